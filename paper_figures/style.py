"""One style table for every figure: scan order / backend / counter → label, colour, marker, hatch.

Labels follow the paper's legends ("Linear (cyclic)", "Sawtooth (alternating)"). Simulated series
are drawn hatched (bars) or dashed with hollow markers (lines) and say so in the legend; model lines
are dotted without markers; measured series are solid.
"""
from __future__ import annotations

ORDER_STYLE = {
    "linear": dict(label="Linear (cyclic)", color="#4C72B0", marker="o"),
    "sawtooth": dict(label="Sawtooth (alternating)", color="#DD8452", marker="s"),
    "reverse": dict(label="Reverse", color="#55A868", marker="^"),
    "blockparity": dict(label="Block parity (ablation)", color="#8172B3", marker="v"),
}
# backends (scaling, ladder) and the SDPA peers measured beside the kernels
BACKEND_STYLE = {
    "cutile": dict(label="cuTile", color="#C44E52", marker="o"),
    "cuda": dict(label="CUDA (raw)", color="#4C72B0", marker="s"),
    "sdpa-flash": dict(label="PyTorch SDPA (flash)", color="#555555", marker="D"),
    "sdpa-cudnn": dict(label="PyTorch SDPA (cuDNN)", color="#937860", marker="P"),
}
# counters (F1, F2, F6)
COUNTER_STYLE = {
    "lts__t_sectors.sum": dict(label="L2 sectors (all)", color="#4C72B0", marker="o"),
    "lts__t_sectors_srcunit_tex.sum": dict(label="L2 sectors from L1TEX", color="#DD8452",
                                           marker="s"),
    "l1tex__t_sectors.sum": dict(label="L1 sectors", color="#55A868", marker="^"),
    "l1tex__t_sectors_lookup_hit.sum": dict(label="L1 hits (right axis)", color="#C44E52",
                                            marker="v"),
    "lts__t_sectors_srcunit_tex_lookup_miss.sum": dict(label="L2 misses", color="#C44E52",
                                                       marker="v"),
    "lts__t_sectors_srcunit_tex_lookup_hit.sum": dict(label="L2 hits", color="#55A868",
                                                      marker="^"),
    "hit_rate": dict(label="L2 hit rate (right axis)", color="#8172B3", marker="D"),
}
FALLBACK = dict(label=None, color="#777777", marker="x")
SIMULATED_HATCH = "//"
# line style per data source (measured solid, simulated dashed, model dotted)
SOURCE_LINE = {
    "measured": dict(ls="-", fill=True, marker=True),
    "simulated": dict(ls="--", fill=False, marker=True),
    "model": dict(ls=":", fill=False, marker=False),
}
MODEL_COLORS = ("#222222", "#8C8C8C", "#64B5CD", "#CCB974")   # for extra model/reference lines


def order_style(order: str) -> dict:
    base = (ORDER_STYLE.get(order) or ORDER_STYLE.get(order.rstrip("0123456789"))
            or BACKEND_STYLE.get(order) or COUNTER_STYLE.get(order) or FALLBACK)
    st = dict(base)
    if st["label"] is None:
        st["label"] = order
    elif order.rstrip("0123456789") in ORDER_STYLE and order not in ORDER_STYLE:
        st["label"] += f" X={order[len(order.rstrip('0123456789')):]}"
    return st


def series_label(order: str, source: str) -> str:
    label = order_style(order)["label"]
    return label if source == "measured" else f"{label}, {source}"


def line_kwargs(key: str, source: str, label: str | None = None) -> dict:
    """Matplotlib ``plot`` keywords for a series (``key`` = order, backend or counter name)."""
    st, src = order_style(key), SOURCE_LINE.get(source, SOURCE_LINE["simulated"])
    kw = dict(color=st["color"], ls=src["ls"], lw=1.4,
              label=series_label(key, source) if label is None else
              (label if source == "measured" else f"{label}, {source}"))
    if src["marker"]:
        kw.update(marker=st["marker"], markersize=4.5,
                  markerfacecolor=st["color"] if src["fill"] else "white")
    return kw


def title_suffix(sources: set[str]) -> str:
    """' (simulated)' etc., so no simulated number can pass as a measurement."""
    others = sorted(s for s in sources if s != "measured")
    if others and "measured" in sources:       # mixed: say what is measured and what is not
        others = ["measured"] + others
    return f" ({' + '.join(others)})" if others else ""


def gpu_name(arch: str | None) -> str:
    """The GPU's name for titles ('NVIDIA H200 (h200)'); the bare name when it is unknown."""
    if not arch:
        return "unknown GPU"
    try:
        from spec import get_arch
        a = get_arch(arch)
    except Exception:
        return arch
    return f"{a.marketing_name or a.name} ({a.name})"


def seq_label(s) -> str:
    """A sequence length as the paper writes it: 131072 -> '128K', 229376 -> '224K', 3000 ->
    '3000' (K = 1024 tokens; a length that is not a whole number of K stays as it is)."""
    try:
        s = int(s)
    except (TypeError, ValueError):
        return str(s)
    return f"{s // 1024}K" if s >= 1024 and s % 1024 == 0 else str(s)


CHAR_EM = 0.64
"""Widest average glyph width in ems (DejaVu Sans digits and capitals: 0.6-0.7 em): text wrapped
at width / (fontsize x CHAR_EM) characters stays inside that width."""


def wrap_to(text: str, width_in: float, fontsize: float) -> str:
    """``text`` with each of its lines wrapped to ``width_in`` inches at ``fontsize`` points."""
    import textwrap
    chars = max(20, int(width_in * 72 / (fontsize * CHAR_EM)))
    return "\n".join(w for line in text.split("\n")
                     for w in (textwrap.wrap(line, chars, break_on_hyphens=False) or [""]))

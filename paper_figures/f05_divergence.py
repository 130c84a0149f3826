"""F5: L2 misses vs S around the capacity knee (divergence study), linear and sawtooth, with the
exact cold-miss line (16S per head for fp16, D = 64) and the wave model at the least-squares
effective capacity C_eff (``analysis.models.wave.fit_c_eff_rows``), one fit per order.

Where K+V of a head fits in the L2 only cold misses remain; past it the linear order re-reads
K/V once per wavefront and the sawtooth order only the part beyond C_eff. The S at which K+V per
head equals the arch's nominal L2 is marked.
"""
from __future__ import annotations

import sys

import numpy as np

from analysis.data.rows import persistent_ctas
from analysis.findings.divergence import ceff_fits
from analysis.models.traffic import MiB, Shape, cold_misses
from spec import get_arch
from spec.records import Metric

from . import lines
from .data import Skip, select, sources
from .style import gpu_name, order_style

FIGURE = "F5"
STUDIES: tuple[str, ...] = ("divergence",)


def load(rows: list[dict]) -> dict:
    rows = select(rows, study="divergence", metric=Metric.L2_TEX_MISSES, causal=False)
    if not rows:
        raise Skip("no rows of the divergence study (lts__t_sectors_srcunit_tex_lookup_miss.sum)")
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["order"], r["source"]), []).append(r)
    series = {}
    for key, grp in sorted(groups.items()):
        by_s: dict[int, list[float]] = {}
        for r in grp:
            by_s.setdefault(r["S_q"], []).append(r["value"])
        series[key] = {s: float(np.mean(v)) for s, v in by_s.items()}
    fits = ceff_fits(rows)                   # a string where rows mix cases: points, no fit
    ref = rows[0]
    return {"series": series, "fits": fits, "ref": ref, "sources": sources(rows),
            "S": sorted({r["S_q"] for r in rows})}


def _fit_label(order: str, fit) -> str:
    name = order_style(order)["label"].split(" (")[0]
    if isinstance(fit, str):
        return f"{name}: no fit ({fit[:40]})"
    lo, hi = fit.interval_bytes
    span = "" if lo == hi else f" (any of {lo / MiB:.1f}..{hi / MiB:.1f})"
    return f"model: wave, {name} fit C_eff = {fit.c_eff_mib:.1f} MiB{span}, MAPE {fit.mape:.1f}%"


def plot(data: dict, arch: str | None = None):
    fig, axes = lines.figure(width=7.6, height=4.6)
    ax = axes[0][0]
    ref, S = data["ref"], data["S"]
    for (order, source), pts in data["series"].items():
        xs = sorted(pts)
        lines.series(ax, np.array(xs) / 1024, [pts[s] / 1e6 for s in xs], order, source)
    fine = np.linspace(S[0], S[-1], 80).astype(int) // 16 * 16
    shape = Shape(S_q=int(S[0]), D=ref["D"], T_m=ref["tile_m"], T_n=ref["tile_n"], B=ref["B"],
                  H=ref["H"], H_kv=ref["H_kv"])
    cold = [cold_misses(shape.with_S(int(s))) / 1e6 for s in fine]
    lines.model_line(ax, fine / 1024, cold, "model: cold misses (exact, 4·S·D·E/C per head)", 0,
                     ls="-", lw=1.0)
    for (order, source), fit in data["fits"].items():
        if isinstance(fit, str):
            continue
        lines.model_line(ax, fit.S / 1024, fit.predicted / 1e6, _fit_label(order, fit),
                         color=order_style(order)["color"], lw=1.2)
    per_token = 2 * ref["D"] * 2                       # K and V bytes per token (fp16)
    labels = []
    if arch:
        try:
            a = get_arch(arch)
            lines.vline(ax, a.l2_bytes / per_token / 1024,
                        f"K+V per head = nominal L2 ({a.l2_mib:.0f} MiB)", color="#444444")
            labels.append(f"nominal L2 {a.l2_mib:.0f} MiB")
        except Exception:
            pass
    for (order, source), fit in data["fits"].items():
        if not isinstance(fit, str) and order.startswith("sawtooth") \
                and S[0] / 2 <= fit.c_eff_bytes / per_token <= S[-1]:
            lines.vline(ax, fit.c_eff_bytes / per_token / 1024,
                        f"K+V = fitted C_eff ({fit.c_eff_mib:.1f} MiB, {order})",
                        color=order_style(order)["color"], ls=":")
    ax.set_xlabel("sequence length S (K tokens; K+V per head = S·4·D bytes)")
    ax.set_ylabel("L2 misses (M sectors)")
    ax.set_ylim(bottom=0)
    top = ax.secondary_xaxis("top", functions=(lambda k: k * 1024 * per_token / MiB,
                                               lambda m: m * MiB / per_token / 1024))
    top.set_xlabel("K+V per head (MiB)", fontsize=8)
    handles, texts = ax.get_legend_handles_labels()
    fig.legend(handles, texts, loc="outside lower center", ncols=2, fontsize=7)
    ceff = ", ".join(f"C_eff {o} {f.c_eff_mib:.1f} MiB" for (o, _), f in data["fits"].items()
                     if not isinstance(f, str))
    lines.title(ax, f"F5: L2 misses vs S, CUDA split-Q, B={ref['B']}, H={ref['H']}, "
                    f"{persistent_ctas(ref['schedule'])} persistent CTAs\n{gpu_name(arch)}\n"
                    f"{ceff}{'; ' + labels[0] if labels else ''}", data["sources"] | {"model"},
                size=9)
    return fig


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

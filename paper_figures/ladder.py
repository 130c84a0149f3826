"""ladder: the NVIDIA cuTile FMHA tuning ladder (ladder study): TFLOPS per level, one panel per
head dim, with the SDPA flash and cuDNN peers of the same problem as reference lines.

Levels (each on top of the previous): 1 basic, 2 exp2 + flush-to-zero, 3 K loaded transposed,
4 latency hints, 5 occupancy 2, 6 approximate division. Variant ids end in ``.L<level>``.
"""
from __future__ import annotations

import math
import sys

from spec.variant import Variant, is_variant_id

from . import lines
from .bars import grouped_bars
from .data import Skip, sources, tflops_stats
from .style import gpu_name, seq_label

FIGURE = "ladder"
STUDIES: tuple[str, ...] = ("ladder",)
LEVELS = {1: "basic", 2: "exp2\n+FTZ", 3: "K pre-\ntransposed", 4: "latency\nhints",
          5: "occu-\npancy 2", 6: "approx.\ndivision"}
PEERS = ("sdpa-flash", "sdpa-cudnn")


def _level(vid: str) -> int | None:
    """The tuning-ladder level of a variant id (None: a full kernel or a peer)."""
    return Variant.parse(vid)[0].level if is_variant_id(vid) else None


def load(rows: list[dict]) -> dict:
    stats = tflops_stats(rows, "ladder")
    steps = [s for s in stats.values() if _level(s["variant"]) is not None]
    if not steps:
        raise Skip("no rows of the ladder study (variants ending in .L1..L6 with kernel_time_ms "
                   "or tflops)")
    panels = {}
    for s in steps:
        key = (s["D"], s["causal"], s["B"], s["H"], s["S_q"])
        panels.setdefault(key, {}).setdefault((s["backend"], s["source"]), {})[
            _level(s["variant"])] = s
    out = []
    for key, series in sorted(panels.items(), key=lambda kv: (-kv[0][0], kv[0][1:])):
        D, causal, B, H, S = key
        levels = sorted({lv for ser in series.values() for lv in ser})
        vals, errs = {}, {}
        for k, ser in series.items():
            vals[k] = [ser[lv]["tflops"] if lv in ser else math.nan for lv in levels]
            errs[k] = ([ser[lv]["tflops_lo"] if lv in ser else math.nan for lv in levels],
                       [ser[lv]["tflops_hi"] if lv in ser else math.nan for lv in levels])
        peers = {(s["backend"], s["source"]): s["tflops"] for s in stats.values()
                 if s["backend"] in PEERS
                 and (s["D"], s["causal"], s["B"], s["H"], s["S_q"]) == key}
        out.append(dict(D=D, causal=causal, B=B, H=H, S=S, series=vals, errors=errs,
                        peers=peers, groups=[f"L{lv}\n{LEVELS.get(lv, '')}" for lv in levels]))
    return {"panels": out, "sources": sources(steps)}


def plot(data: dict, arch: str | None = None):
    n = len(data["panels"])
    fig, axes = lines.figure(ncols=n, width=7.5, height=4.3)
    for ax, p in zip(axes[0], data["panels"]):
        grouped_bars(p["groups"], p["series"], ylabel="TFLOP/s (median; bars: sample min..max)",
                     errors=p["errors"], peers=p["peers"], annotate_reduction=False, ax=ax,
                     title=f"D={p['D']}, {'causal' if p['causal'] else 'non-causal'}, B={p['B']}, "
                           f"H={p['H']}, S={seq_label(p['S'])}")
    lines.title(fig, f"ladder: cuTile FMHA tuning ladder, {gpu_name(arch)}", data["sources"])
    return fig


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

"""reuse: LRU miss-ratio curves and reuse-distance histograms from the simulator (reuse study),
linear vs sawtooth (and the block-parity ablation), one column per case (backend, causal mode),
with every registered arch's nominal L2 marked.

Top: misses of a fully associative LRU over tiles vs its capacity (``lru_misses``, x = bytes).
A cyclic (linear) scan misses everything until the whole K+V of a head fits; the sawtooth scan's
curve falls linearly from there, since tile j is reused at distance j or N − 1 − j. Bottom: the
sector-weighted histogram of reuse distances (``reuse_distance_sectors``, x = the lower edge of a
log2 bin in bytes).
"""
from __future__ import annotations

import sys

import numpy as np

from spec import get_arch
from spec.records import Metric

from . import lines
from .data import Skip, select, sources
from .style import gpu_name, line_kwargs, seq_label

FIGURE = "reuse"
STUDIES: tuple[str, ...] = ("reuse",)
ARCHS = ("gb10", "h100", "h200", "b200")
ARCH_COLORS = ("#2F4F4F", "#6A5ACD", "#8B008B", "#B8860B")


def load(rows: list[dict]) -> dict:
    rows = [r for r in select(rows, study="reuse")
            if r["metric"] in (Metric.LRU_MISSES, Metric.REUSE_DISTANCE_SECTORS)
            and r.get("x") is not None]
    if not rows:
        raise Skip("no rows of the reuse study (lru_misses / reuse_distance_sectors with an x "
                   "column)")
    cases: dict[tuple, dict] = {}
    for r in rows:
        case = (r["backend"], r["causal"], r["B"], r["H"], r["S_q"], r["tile_m"], r["tile_n"],
                r["schedule"])
        d = cases.setdefault(case, {}).setdefault(r["metric"], {}).setdefault(
            (r["order"], r["source"]), {})
        d[r["x"]] = r["value"]
    return {"cases": dict(sorted(cases.items())), "sources": sources(rows)}


def _l2_marks(ax, text: bool):
    for k, name in enumerate(ARCHS):
        a = get_arch(name)
        lines.vline(ax, a.l2_bytes / (1 << 20), f"{name} L2 {a.l2_mib:.0f} MiB",
                    color=ARCH_COLORS[k], text=text, bottom=True, lw=0.9)


def plot(data: dict, arch: str | None = None):
    cases = list(data["cases"])
    fig, axes = lines.figure(ncols=len(cases), nrows=2, width=4.6, height=3.4)
    for col, case in enumerate(cases):
        backend, causal, B, H, S, tm, tn, sched = case
        per = data["cases"][case]
        top, bot = axes[0][col], axes[1][col]
        for (order, source), pts in sorted(per.get(Metric.LRU_MISSES, {}).items()):
            x = sorted(pts)
            lines.series(top, np.array(x) / (1 << 20), [pts[c] / 1e6 for c in x], order, source,
                         markersize=2.5)
        for (order, source), pts in sorted(per.get(Metric.REUSE_DISTANCE_SECTORS, {}).items()):
            x = sorted(pts)
            nz = [c for c in x if pts[c] > 0]
            x = [c for c in x if nz and nz[0] / 2 <= c <= nz[-1] * 2]    # trim empty tails
            kw = line_kwargs(order, source)
            bot.step(np.array(x) / (1 << 20), [pts[c] / 1e6 for c in x], where="post",
                     color=kw.get("color"), ls=kw.get("ls", "-"), label=kw.get("label"), lw=1.3)
        for ax in (top, bot):
            ax.set_xscale("log", base=2)
            _l2_marks(ax, text=(ax is top))
        top.set_ylim(bottom=0)
        top.set_ylabel("LRU misses (M sectors)")
        top.set_xlabel("cache capacity (MiB, log2)")
        bot.set_yscale("symlog", linthresh=1e-3)  # in-wavefront reuse dwarfs the rest
        bot.set_ylim(bottom=0)
        bot.set_ylabel("accesses (M sectors, symlog)")
        bot.set_xlabel("reuse distance (MiB, log2 bins; lower edge)")
        top.set_title(f"{backend}, {'causal' if causal else 'non-causal'}, B={B}, H={H}, "
                      f"S={seq_label(S)}, {tm}×{tn}, {sched}", fontsize=8)
        lines.legend(top, loc="upper right", fontsize=6)
        lines.legend(bot, loc="upper left", fontsize=6)
    lines.title(fig, "reuse: LRU miss-ratio curves and reuse distances of one head, fully "
                     f"associative LRU over tiles\ndrawn for {gpu_name(arch)}; every arch's "
                     "nominal L2 marked", data["sources"], size=9)
    return fig


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

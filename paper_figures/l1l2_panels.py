"""F1, F2 and T1 share the l1l2 study's rows: L1/L2 counters of the CUDA kernel vs the number of
persistent CTAs, at the study's short and long sequence length (B = H = 1, 80×80 tiles).

The paper's point: L1 is a pass-through (L1 hits are a vanishing fraction of L1 sectors), so the
L2 sector traffic is a function of the kernel's loads alone and does not depend on how many CTAs
run at once.
"""
from __future__ import annotations

import numpy as np

from analysis.data.rows import persistent_ctas
from spec.records import Metric

from . import lines
from .data import Skip, mean_by, require, sources
from .modules import figure_module
from .style import gpu_name, seq_label

LEFT = (Metric.L2_SECTORS, Metric.L2_TEX_SECTORS, Metric.L1_SECTORS)
RIGHT = Metric.L1_HITS
METRICS = LEFT + (RIGHT,)


def l1l2_rows(rows: list[dict]) -> list[dict]:
    got = [r for r in require(rows, "l1l2 study", study="l1l2", backend="cuda")
           if r["metric"] in METRICS and persistent_ctas(r["schedule"])]
    if not got:
        raise Skip("the l1l2 study has no L1/L2 counter rows (" + ", ".join(METRICS) + ")")
    return got


def seq_lengths(rows: list[dict]) -> list[int]:
    return sorted({r["S_q"] for r in rows})


def load_sweep(rows: list[dict], which: str) -> dict:
    """``which`` = 'short' (the smaller S of the study) or 'long' (the larger)."""
    rows = l1l2_rows(rows)
    seqs = seq_lengths(rows)
    if which == "long" and len(seqs) < 2:
        raise Skip(f"the l1l2 study has one sequence length only ({seqs[0]}); F2 needs a second")
    S = seqs[0] if which == "short" else seqs[-1]
    rows = [r for r in rows if r["S_q"] == S]
    vals = mean_by(rows, "metric", "source", "schedule")
    series: dict[tuple[str, str], dict[int, float]] = {}
    for (metric, source, schedule), v in vals.items():
        series.setdefault((metric, source), {})[persistent_ctas(schedule)] = v
    return {"S": S, "series": series, "sources": sources(rows), "T": rows[0]["tile_m"]}


def plot_sweep(data: dict, figure: str, arch: str | None):
    fig, axes = lines.figure(width=7.2, height=4.3)
    ax = axes[0][0]
    right = ax.twinx()
    for (metric, source), pts in sorted(data["series"].items()):
        P = sorted(pts)
        y = [pts[p] for p in P]
        if metric == RIGHT:
            y = [max(v, 0.5) for v in y]               # log axis: show a zero count at 0.5
            lines.series(right, P, y, metric, source)
        else:
            lines.series(ax, P, [v / 1e6 for v in y], metric, source)
    right.set_yscale("log")
    lo, hi = right.get_ylim()
    right.set_ylim(min(lo, 10 ** np.floor(np.log10(lo)) / 10), max(hi, 10 ** np.ceil(np.log10(hi))))
    right.set_ylabel("L1 hits (sectors, log; 0 drawn at 0.5)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("persistent CTAs (active SMs)")
    ax.set_ylabel("sectors (millions)")
    ax.set_ylim(bottom=0)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = right.get_legend_handles_labels()
    fig.legend(h1 + h2, l1 + l2, fontsize=7, loc="outside lower center", ncols=4)
    lines.title(ax, f"{figure}: L1/L2 counters vs active SMs, CUDA split-Q, "
                    f"S={seq_label(data['S'])}, B=H=1, {data['T']}×{data['T']} tiles\n"
                    f"{gpu_name(arch)}", data["sources"], size=9)
    return fig


def sweep_module(name: str, figure: str, which: str) -> tuple:
    """``(ROWS, load, plot, main)`` of F1 (``which`` "short") or F2 ("long")."""
    return figure_module(name, None, lambda rows: load_sweep(rows, which),
                         lambda data, arch=None: plot_sweep(data, figure, arch))

"""F6: L2 misses, hits and hit rate vs persistent CTA count at the long sequence length, with the
paper's ``1 − 1/N`` reference and its complement on the left axis, the L1 sectors (the loads)
divided by N (N CTAs walk the same K/V tiles in lock-step: one miss per sector
and wavefront, N − 1 hits).

Rows of the active-sms study when there are any (one panel per scan order), else the l1l2 study's
long-S rows (linear only). Hit rate = hits / (hits + misses) of the L1TEX-sourced L2 sectors
(counts, not ``lts__t_sector_hit_rate.pct``, which also counts writes).
"""
from __future__ import annotations

import sys

import numpy as np

from analysis.data.rows import persistent_ctas
from spec.records import Metric

from . import lines
from .data import Skip, mean_by, select, sources
from .style import gpu_name, order_style, seq_label

FIGURE = "F6"
STUDIES: tuple[str, ...] = ("active-sms", "l1l2")  # the first of the two that has rows
HITS, MISSES = Metric.L2_TEX_HITS, Metric.L2_TEX_MISSES


def load(rows: list[dict]) -> dict:
    for study in ("active-sms", "l1l2"):
        got = [r for r in select(rows, study=study, causal=False)
               if r["metric"] in (HITS, MISSES, Metric.L1_SECTORS)
               and persistent_ctas(r["schedule"])]
        if got:
            break
    else:
        raise Skip("no active-sms or l1l2 rows with L2 hits and misses")
    S = max(r["S_q"] for r in got)
    got = [r for r in got if r["S_q"] == S]
    vals = mean_by(got, "order", "source", "metric", "schedule")
    panels: dict[tuple[str, str], dict[str, dict[int, float]]] = {}
    for (order, source, metric, schedule), v in vals.items():
        panels.setdefault((order, source), {}).setdefault(metric, {})[persistent_ctas(schedule)] = v
    return {"study": study, "S": S, "panels": panels, "sources": sources(got), "ref": got[0]}


def plot(data: dict, arch: str | None = None, columns: int | None = None):
    """One panel per (order, source), in a row, or in ``columns`` columns."""
    n = len(data["panels"])
    ncols = min(n, columns or n)
    fig, axes = lines.figure(ncols=ncols, nrows=-(-n // ncols), width=6.2, height=4.3)
    for ax, ((order, source), m) in zip(axes.flat, sorted(data["panels"].items())):
        P = sorted(set(m.get(HITS, {})) & set(m.get(MISSES, {})))
        hits = np.array([m[HITS][p] for p in P])
        miss = np.array([m[MISSES][p] for p in P])
        lines.series(ax, P, miss / 1e6, MISSES, source)
        lines.series(ax, P, hits / 1e6, HITS, source)
        l1 = m.get(Metric.L1_SECTORS, {})
        if all(p in l1 for p in P):       # one miss per sector and wavefront: loads / N
            lines.model_line(ax, P, [l1[p] / p / 1e6 for p in P],
                             "model: L1 sectors / N (misses at 1 − 1/N)", 1)
        right = ax.twinx()
        lines.series(right, P, 100 * hits / (hits + miss), "hit_rate", source)
        Pf = np.geomspace(1, max(P), 100)
        lines.model_line(right, Pf, 100 * (1 - 1 / Pf), "model: 1 − 1/N (paper)", 0)
        right.set_ylim(0, 105)
        right.set_ylabel("L2 hit rate (%)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("persistent CTAs N (active SMs)")
        ax.set_ylabel("L2 sectors from L1TEX (millions)")
        ax.set_ylim(bottom=0)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = right.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.02),
                  ncols=2, title=f"{order_style(order)['label']}", title_fontsize=8)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    ref = data["ref"]
    src = "" if data["study"] == "active-sms" else " (l1l2 study rows)"
    lines.title(fig, f"F6: L2 misses, hits and hit rate vs active SMs, CUDA split-Q, "
                     f"S={seq_label(data['S'])}, B={ref['B']}, H={ref['H']}\n{gpu_name(arch)}{src}",
                data["sources"] | {"model"}, size=9)
    return fig


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

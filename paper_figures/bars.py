"""Grouped bar charts of linear vs sawtooth (the paper's F8-F10 layout)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .style import SIMULATED_HATCH, order_style, series_label, title_suffix  # noqa: E402

MISS_LABEL = "L2 misses (M sectors)\nmedian; bars: min..max of the repeats"


def miss_bars(rows: list[dict], group_of, groups: list) -> tuple[dict, dict]:
    """Miss counts (M sectors) per (order, source) and group, and the min..max of the repeats
    where the rows carry them (``lo``/``hi`` of a measured run's summary rows; simulated rows
    and single launches have none, and then no error bar is drawn)."""
    series: dict = {}
    errors: dict = {}
    for r in rows:
        key, i = (r["order"], r["source"]), groups.index(group_of(r))
        series.setdefault(key, [np.nan] * len(groups))[i] = r["value"] / 1e6
        if r.get("lo") is not None and r.get("hi") is not None:
            lo, hi = errors.setdefault(key, ([np.nan] * len(groups), [np.nan] * len(groups)))
            lo[i], hi[i] = r["lo"] / 1e6, r["hi"] / 1e6
    return series, errors


def grouped_bars(groups: list[str], series: dict[tuple[str, str], list[float]], *, ylabel: str,
                 title: str, annotate_reduction: bool = True,
                 errors: dict[tuple[str, str], tuple[list[float], list[float]]] | None = None,
                 peers: dict[tuple[str, str], float] | None = None, ax=None):
    """``series`` maps (order, source) to one value per group (NaN where missing); the change of
    the sawtooth series against the linear one is written above each group.

    ``errors`` maps a series key to (low, high) absolute bounds per group (drawn as error bars,
    e.g. the min..max of timing samples); ``peers`` maps (backend, source) to a value drawn as a
    horizontal reference line across the groups (the SDPA peers of the same problem), or to one
    value per group drawn as a segment over that group. ``ax``: draw into that axes (a panel)."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(6.5, 1.6 * len(groups) + 2), 3.8),
                               constrained_layout=True)
    else:                                # a panel of a larger figure
        fig = ax.figure
    x = np.arange(len(groups))
    width = 0.8 / max(1, len(series))
    tops = np.zeros(len(groups))          # the highest bar or error bar of each group
    for k, ((order, source), vals) in enumerate(series.items()):
        st = order_style(order)
        ax.bar(x + (k - (len(series) - 1) / 2) * width, vals, width, color=st["color"],
               hatch=None if source == "measured" else SIMULATED_HATCH, edgecolor="black",
               linewidth=0.5, label=series_label(order, source))
        tops = np.fmax(tops, np.asarray(vals, dtype=float))
        if errors and (order, source) in errors:
            lo, hi = (np.asarray(v, dtype=float) for v in errors[(order, source)])
            v = np.asarray(vals, dtype=float)
            ax.errorbar(x + (k - (len(series) - 1) / 2) * width, v, yerr=[v - lo, hi - v],
                        fmt="none", ecolor="black", elinewidth=0.8, capsize=3)
            tops = np.fmax(tops, hi)
    for k, ((backend, source), value) in enumerate((peers or {}).items()):
        st = order_style(backend)
        kw = dict(color=st["color"], ls=("-.", ":")[k % 2], lw=1.3)
        if np.ndim(value) == 0:          # one problem: a line across every group
            ax.axhline(value, label=f"{series_label(backend, source)}: {value:.0f}", **kw)
        else:                            # one value per group: a segment over each group
            ax.hlines(value, x - 0.45, x + 0.45, label=series_label(backend, source), **kw)
    if annotate_reduction:
        lin = next((v for (o, _), v in series.items() if o == "linear"), None)
        saw = next((v for (o, _), v in series.items() if o.startswith("sawtooth")), None)
        if lin is not None and saw is not None:
            for i, (a, b) in enumerate(zip(lin, saw)):
                if a and np.isfinite(a) and np.isfinite(b):
                    change = 100 * (b / a - 1)
                    # above the group's highest bar or error bar, clear of its edge
                    ax.annotate(f"{change:+.0f}%", (x[i], tops[i]), xytext=(0, 3),
                                textcoords="offset points", ha="center", va="bottom",
                                fontsize=8, gid="change")
    ax.set_xticks(x, groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title + title_suffix({s for _, s in series} | {s for _, s in (peers or {})}),
                 fontsize=10)
    # outside the panel: inside it, it would cover bars, reference lines or the change labels
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.margins(y=0.15)
    return fig

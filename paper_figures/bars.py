"""Grouped bar charts of linear vs sawtooth (the paper's F8-F10 layout)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .style import SIMULATED_HATCH, order_style, series_label, title_suffix  # noqa: E402


def grouped_bars(groups: list[str], series: dict[tuple[str, str], list[float]], *, ylabel: str,
                 title: str, annotate_reduction: bool = True):
    """``series`` maps (order, source) to one value per group (NaN where missing)."""
    fig, ax = plt.subplots(figsize=(max(6.5, 1.6 * len(groups) + 2), 3.8), constrained_layout=True)
    x = np.arange(len(groups))
    width = 0.8 / max(1, len(series))
    for k, ((order, source), vals) in enumerate(series.items()):
        st = order_style(order)
        ax.bar(x + (k - (len(series) - 1) / 2) * width, vals, width, color=st["color"],
               hatch=None if source == "measured" else SIMULATED_HATCH, edgecolor="black",
               linewidth=0.5, label=series_label(order, source))
    if annotate_reduction:
        lin = next((v for (o, _), v in series.items() if o == "linear"), None)
        saw = next((v for (o, _), v in series.items() if o.startswith("sawtooth")), None)
        if lin is not None and saw is not None:
            for i, (a, b) in enumerate(zip(lin, saw)):
                if a and np.isfinite(a) and np.isfinite(b):
                    change = 100 * (b / a - 1)
                    ax.annotate(f"{change:+.0f}%", (x[i], max(a, b)), ha="center",
                                va="bottom", fontsize=8)
    ax.set_xticks(x, groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title + title_suffix({s for _, s in series}), fontsize=10)
    ax.legend(fontsize=8)
    ax.margins(y=0.15)
    return fig

"""Line plots shared by the sweep figures (F1-F6, scaling, reuse): one series per
(order | backend | counter, source), measured solid, simulated dashed, model dotted (style.py)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .style import MODEL_COLORS, line_kwargs, order_style, title_suffix  # noqa: E402


def figure(ncols: int = 1, nrows: int = 1, width: float = 6.5, height: float = 4.2, **kw):
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows),
                             constrained_layout=True, squeeze=False, **kw)
    return fig, axes


def panels(n: int, columns: int, width: float, height: float):
    """(fig, its first ``n`` axes) of ``n`` panels in at most ``columns`` columns; the grid's
    unused axes are switched off."""
    ncols = min(columns, n)
    fig, axes = figure(ncols=ncols, nrows=-(-n // ncols), width=width, height=height)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.axis("off")
    return fig, flat[:n]


def series(ax, x, y, key: str, source: str, *, yerr=None, label: str | None = None, **extra):
    """Draw one series sorted by x; ``yerr`` is (lo, hi) arrays of absolute bounds, drawn as
    error bars around y."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    o = np.argsort(x)
    kw = line_kwargs(key, source, label)
    kw.update(extra)
    if yerr is None:
        return ax.plot(x[o], y[o], **kw)[0]
    lo, hi = (np.asarray(v, dtype=float)[o] for v in yerr)
    kw.setdefault("capsize", 3)
    return ax.errorbar(x[o], y[o], yerr=[y[o] - lo, hi - y[o]], **kw)


def model_line(ax, x, y, label: str, k: int = 0, **extra):
    """A model curve: dotted, no markers, labelled 'model: ...'."""
    kw = dict(color=MODEL_COLORS[k % len(MODEL_COLORS)], ls=":", lw=1.6,
              label=label if label.startswith("model") else f"model: {label}")
    kw.update(extra)
    return ax.plot(x, y, **kw)[0]


def hline(ax, y: float, key: str, label: str | None = None, **extra):
    """A horizontal reference (an SDPA peer, a bound) in the key's colour."""
    st = order_style(key)
    kw = dict(color=st["color"], ls="-." if "sdpa" in key else "--", lw=1.2,
              label=label or st["label"])
    kw.update(extra)
    return ax.axhline(y, **kw)


def vline(ax, x: float, label: str, color: str = "#999999", text: bool = True,
          bottom: bool = False, **extra):
    """A vertical marker with its label written along it (from the top, or from the bottom)."""
    kw = dict(color=color, ls="--", lw=1.0)
    kw.update(extra)
    ax.axvline(x, **kw)
    if text:
        ax.annotate(label, (x, 0.02 if bottom else 0.98), xycoords=("data", "axes fraction"),
                    rotation=90, ha="right", va="bottom" if bottom else "top", fontsize=7,
                    color=color)


def title(ax_or_fig, text: str, sources: set[str], size: float = 10):
    """Title with the data's provenance appended (' (simulated)', ' (model)' ...)."""
    t = text + title_suffix(sources)
    if hasattr(ax_or_fig, "suptitle"):
        ax_or_fig.suptitle(t, fontsize=size)
    else:
        ax_or_fig.set_title(t, fontsize=size)


def legend(ax, **kw):
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        kw.setdefault("fontsize", 7)
        ax.legend(handles, labels, **kw)


def table_figure(columns: list[str], rows: list[list], text: str, sources: set[str]):
    """A table drawn as a figure (PNG/PDF beside the CSV and markdown of a table module)."""
    cells = [[str(c) for c in r] for r in rows]
    chars = sum(max(len(str(c)), *(len(r[i]) for r in cells)) + 2 for i, c in enumerate(columns))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.075 * chars), 0.55 + 0.24 * (len(rows) + 1)),
                           constrained_layout=True)
    ax.axis("off")
    t = ax.table(cellText=cells, colLabels=columns, cellLoc="right", colLoc="center",
                 bbox=[0, 0, 1, 1])
    t.auto_set_font_size(False)
    t.set_fontsize(8)
    t.auto_set_column_width(list(range(len(columns))))
    title(ax, text, sources)
    return fig

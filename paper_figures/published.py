"""The paper's side of F8-F10: beside the figure's own run, a panel with the paper's published
GB10 values (arXiv 2601.16032, ``analysis.data.published``) and, for the misses, a simulated GB10
run of the same problem: the figure's own run when it is one (``python -m experiments.run sawtooth
--arch gb10``, with whatever ``--capacity-mib`` it was given), else the committed one. Each
simulated bar carries its error against the published count, labelled as such ("vs paper") and
written upright above the bar so that it never lies over a neighbouring bar.

The two GB10 series are the paper's problem (S = 128K, 48 SMs, 24 MiB L2); the figure's own panel
is its run at that run's length (an H100 at S = 256K): the panels share groups and orders, not a
scale. Nothing here is fitted: the published values are drawn, never used to set a parameter.
"""
from __future__ import annotations

import math

import numpy as np

from analysis.data import load_rows, select
from analysis.data.published import key_of_row, read_published
from spec.records import Metric

from .data import run_name
from .style import order_style

PUBLISHED_HATCH = ".."
SIMULATED_HATCH = "//"
ORDERS = ("linear", "sawtooth")


def _gb10_misses(rows, cases: dict) -> dict[tuple, float]:
    """Median simulated GB10 misses per published case key, from ``rows`` that simulate the
    case's own problem (the paper's S and D; other lengths are not the paper's problem)."""
    vals: dict[tuple, list[float]] = {}
    for r in rows:
        if (r["metric"] == Metric.L2_TEX_MISSES and r["source"] == "simulated"
                and r.get("arch") == "gb10"):
            c = cases.get(key_of_row(r))
            if c is not None and (int(r["S_q"]), int(r["D"])) == (c.S, c.D):
                vals.setdefault(c.key, []).append(float(r["value"]))
    return {k: float(np.median(v)) for k, v in vals.items()}


def _sim_misses(cases: dict, own: list[dict]) -> tuple[dict[tuple, float], str | None]:
    """The simulated GB10 misses of the figure's own rows when they simulate the paper's problem,
    else those of the committed simulated GB10 run; and the run's name."""
    mine = _gb10_misses(own, cases)
    if mine:
        return mine, run_name(next(r for r in own if r.get("arch") == "gb10")["run"])
    ds = select("gb10", "sawtooth", source="simulated")
    if ds is None:
        return {}, None
    return _gb10_misses(load_rows([ds]), cases), ds.label


def paper_panel(backend: str, causal: bool, groups: list, quantity: str = "misses",
                rows: list[dict] = ()) -> dict | None:
    """The panel's data for ``groups``: schedule kinds (``static``, ``tile``) for cuTile, batch
    sizes for CUDA; ``rows``: the figure's own rows (their simulated GB10 misses, if any, are
    drawn instead of the committed run's). None when the reference has none of them."""
    cases = {c.key: c for c in read_published()}
    sim, sim_run = _sim_misses(cases, list(rows)) if quantity == "misses" else ({}, None)
    kinds = ["static"] * len(groups) if backend == "cuda" else list(groups)
    batches = list(groups) if backend == "cuda" else [None] * len(groups)
    pub, simd = {o: [] for o in ORDERS}, {o: [] for o in ORDERS}
    for kind, b in zip(kinds, batches):
        for o in ORDERS:
            c = next((c for k, c in cases.items() if k[0] == backend and k[1] == kind
                      and k[2] == causal and k[4] == o and (b is None or k[3] == b)), None)
            pub[o].append((c.misses / 1e6 if quantity == "misses" else c.tflops) if c
                          else math.nan)
            simd[o].append(sim[c.key] / 1e6 if c and c.key in sim else math.nan)
    if all(math.isnan(v) for o in ORDERS for v in pub[o]):
        return None
    labels = [("Static" if k == "static" else "Tile-based") if backend == "cutile" else f"B={b}"
              for k, b in zip(kinds, batches)]
    return {"groups": labels, "published": pub, "simulated": simd if sim else None,
            "sim_run": sim_run, "quantity": quantity}


def draw_paper(ax, data: dict) -> None:
    """Published (dotted hatch) and simulated (slashed) bars per order and group; each simulated
    bar is labelled with its error against the published value."""
    x = np.arange(len(data["groups"]))
    sets = [("published", data["published"])]
    if data.get("simulated"):
        sets.append(("simulated", data["simulated"]))
    n = len(sets) * len(ORDERS)
    width = 0.8 / n
    k = 0
    for o in ORDERS:
        for source, vals in sets:
            st = order_style(o)
            xs = x + (k - (n - 1) / 2) * width
            bars = ax.bar(xs, vals[o], width, color=st["color"], edgecolor="black", linewidth=0.5,
                          hatch=PUBLISHED_HATCH if source == "published" else SIMULATED_HATCH,
                          label=f"{st['label']}, {source} (GB10)")
            for b in bars:
                b.set_gid(f"{source}:{o}")
            if source == "simulated":
                for xi, v, p in zip(xs, vals[o], data["published"][o]):
                    if np.isfinite(v) and np.isfinite(p) and p:
                        ax.annotate(f"{100 * (v / p - 1):+.0f}% vs paper", (xi, v),
                                    xytext=(0, 2), textcoords="offset points", ha="center",
                                    va="bottom", rotation=90, fontsize=6.5, gid="sim-error")
            k += 1
    ax.set_xticks(x, data["groups"])
    what = "L2 misses (M sectors)" if data["quantity"] == "misses" else "TFLOP/s (published)"
    ax.set_ylabel(what)
    sim = (f"; simulated: {data['sim_run']}\n(labels: the simulated count's error against "
           f"the published one)") if data.get("simulated") else ""
    ax.set_title(f"GB10, the paper's problem (S=128K): published (arXiv 2601.16032){sim}",
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.margins(y=0.45 if data.get("simulated") else 0.18)


def with_paper(draw_run, data: dict, columns: int = 2):
    """The figure of ``draw_run(ax)`` (the run's own panel) with the paper's panel beside it
    (``columns`` 2) or below it (1) when ``data`` carries one, else the run's figure alone."""
    import matplotlib.pyplot as plt
    if not data.get("paper"):
        return draw_run(None)
    fig, (a, b) = plt.subplots(2 // columns, columns, figsize=(6.75 * columns, 8.4 / columns),
                               constrained_layout=True)
    draw_run(a)
    draw_paper(b, data["paper"])
    return fig

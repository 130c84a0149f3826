"""F3, F4 and T2 share the traffic study's rows: L2 sector accesses vs S against the exact traffic
model (``analysis.models.traffic.sector_accesses``) and the paper's closed form (``8S(1 + S/T)``,
``8S(S/(2T) + 1/2)`` per head for fp16, D = 64, 32-byte sectors).

The exact model counts Q and O once per Q tile and K, V once per visited (q, kv) tile pair; the
paper's causal line leaves out Q and O (``8S``), visible at small S. ``l1tex__t_sectors.sum`` is
drawn too: it counts the loads themselves, which the model describes; on Hopper the L2 counters of
a non-causal run fall well below it (the sector requests of CTAs in lock-step are merged before
they reach the L2 slices), so the comparison tells the L2 traffic model from the L2 counters.
"""
from __future__ import annotations

import numpy as np

from analysis.models.traffic import Shape, model_error, paper_sector_accesses, sector_accesses
from spec.records import Metric

from . import lines
from .data import Skip, mean_by, select, sources
from .modules import figure_module
from .style import gpu_name

# the paper's two L2 counters, and the L1 sectors: on Hopper the L2 counts fall below the loads
# (requests of CTAs in lock-step are merged before the L2), while the L1 sectors are the loads
METRICS = (Metric.L2_SECTORS, Metric.L2_TEX_SECTORS, Metric.L1_SECTORS)
SHORT = {Metric.L2_SECTORS: "lts__t_sectors", Metric.L2_TEX_SECTORS: "lts…srcunit_tex",
         Metric.L1_SECTORS: "l1tex__t_sectors"}
MODELS = ("exact", "paper")


def _shape(r: dict, S: int) -> Shape:
    return Shape(S_q=S, D=r["D"], T_m=r["tile_m"], T_n=r["tile_n"], causal=r["causal"], B=r["B"],
                 H=r["H"], H_kv=r["H_kv"])


def model_sectors(r: dict, S, model: str) -> np.ndarray:
    """Model L2 sector accesses at sequence lengths ``S`` for the case of row ``r``."""
    S = np.atleast_1d(S)
    if model == "exact":
        return np.array([sector_accesses(_shape(r, int(s))).total for s in S], dtype=float)
    # the paper's formula is for fp16, D = 64, C = 32 (2·D·E/C = 8): scale the 8 for other D
    scale = r["B"] * r["H"] * r["D"] / 64
    return scale * np.asarray(paper_sector_accesses(S.astype(float), r["tile_m"], r["causal"]))


def load_mode(rows: list[dict], causal: bool) -> dict:
    mode = "causal" if causal else "non-causal"
    rows = [r for r in select(rows, study="traffic", causal=causal) if r["metric"] in METRICS]
    if not rows:
        raise Skip(f"no {mode} rows of the traffic study ({', '.join(METRICS)})")
    vals = mean_by(rows, "metric", "source", "S_q")
    series: dict[tuple[str, str], dict[int, float]] = {}
    for (metric, source, S), v in vals.items():
        series.setdefault((metric, source), {})[S] = v
    S = np.array(sorted({r["S_q"] for r in rows}))
    ref = rows[0]
    return {"causal": causal, "series": series, "S": S, "ref": ref, "sources": sources(rows),
            "model": {m: dict(zip(S.tolist(), model_sectors(ref, S, m))) for m in MODELS}}


def errors(data: dict) -> list[dict]:
    """Model error per (metric, source, model): MAPE and the largest |error| in percent."""
    out = []
    for (metric, source), pts in sorted(data["series"].items()):
        S = sorted(pts)
        meas = np.array([pts[s] for s in S])
        for m in MODELS:
            e = model_error([data["model"][m][s] for s in S], meas)
            out.append(dict(metric=metric, source=source, model=m, mape=e.mape_pct,
                            max_abs=e.max_abs_pct, n=e.points, S=(S[0], S[-1])))
    return out


def plot_mode(data: dict, figure: str, arch: str | None):
    fig, axes = lines.figure(nrows=2, width=7.0, height=2.6,
                             gridspec_kw=dict(height_ratios=[2.2, 1]), sharex=True)
    ax, err = axes[0][0], axes[1][0]
    S = data["S"]
    fine = np.unique(np.geomspace(S[0], S[-1], 60).astype(int) // 16 * 16)
    ref = data["ref"]
    for (metric, source), pts in sorted(data["series"].items()):
        xs = sorted(pts)
        lines.series(ax, xs, [pts[s] for s in xs], metric, source, ls="none")
    labels = {"exact": "model: exact (Q, O once; K, V per Q tile)",
              "paper": "model: paper " + ("8S(S/(2T) + 1/2)" if data["causal"] else "8S(1 + S/T)")}
    for k, m in enumerate(MODELS):
        lines.model_line(ax, fine, model_sectors(ref, fine, m), labels[m], k)
    for e in errors(data):
        pts = data["series"][(e["metric"], e["source"])]
        xs = sorted(pts)
        rel = [100 * (data["model"][e["model"]][s] / pts[s] - 1) for s in xs]
        kw = lines.line_kwargs(e["metric"], e["source"], f"{e['model']} vs {SHORT[e['metric']]}")
        kw.update(ls="-" if e["model"] == "exact" else ":", markersize=3.5)
        err.plot(xs, rel, **kw)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylabel("sector accesses (sectors)")
    err.axhline(0, color="black", lw=0.6)
    err.set_ylabel("model − measured (%)")
    err.set_xlabel("sequence length S (tokens, log2)")
    lines.legend(ax, loc="upper left")
    lines.legend(err, ncols=3, fontsize=5.5)
    mode = "causal" if data["causal"] else "non-causal"
    lines.title(fig, f"{figure}: L2 sector accesses vs S, {mode}, CUDA split-Q, B={ref['B']}, "
                     f"H={ref['H']}, D={ref['D']}, {ref['tile_m']}×{ref['tile_n']} tiles\n"
                     f"{gpu_name(arch)}", data["sources"] | {"model"}, size=9)
    return fig


def mode_module(name: str, figure: str, causal: bool) -> tuple:
    """``(ROWS, load, plot, main)`` of F3 (``causal`` False) or F4 (True)."""
    return figure_module(name, {"causal": causal}, lambda rows: load_mode(rows, causal=causal),
                         lambda data, arch=None: plot_mode(data, figure, arch))

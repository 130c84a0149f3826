"""repeats: the sawtooth study's change (sawtooth vs linear) in L2 misses and in kernel time, one
marker per independent run of the study, so that the run-to-run spread can be seen.

Data: every run of the sawtooth study that is loaded, each drawn on its own and never pooled; for
the H100 the three committed runs of ``python -m experiments.run sawtooth --arch h100``
(a run and its repeats ``<run>-r2``, ``-r3``, registered as datasets; 10 cold-L2 timing samples per
variant each), measured. For each comparison (a configuration run with both the linear and the
sawtooth order in the same run: cuTile Static / Tile-based × causal / non-causal, CUDA at each B):
left, the change of ``lts__t_sectors_srcunit_tex_lookup_miss.sum``; right, the change of the median
kernel time over the run's samples. The single-run figures (F8-F10) draw the original run only.
"""
from __future__ import annotations

import math
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from analysis.data.rows import median  # noqa: E402
from spec.records import Metric  # noqa: E402

from .data import Skip, manifest, manifest_device, run_name, runs_of  # noqa: E402
from .style import gpu_name, seq_label, title_suffix  # noqa: E402

FIGURE = "repeats"
STUDIES: tuple[str, ...] = ("sawtooth",)
RUN_STYLE = (dict(color="#4C72B0", marker="o"), dict(color="#DD8452", marker="s"),
             dict(color="#55A868", marker="^"), dict(color="#C44E52", marker="D"),
             dict(color="#8172B3", marker="v"))
CASE = ("backend", "schedule", "tile_m", "tile_n", "B", "H", "S_q", "D", "causal")
QUANTITIES = {"misses": "L2 misses (lts__t_sectors_srcunit_tex_lookup_miss.sum)",
              "time": "kernel time (median of the run's samples)"}


def _label(c: dict) -> str:
    mode = "causal" if c["causal"] else "non-causal"
    if c["backend"] == "cutile":
        kind = "Static" if c["schedule"].startswith("static") else \
            "Tile-based" if c["schedule"].startswith("tile") else c["schedule"]
        return f"cuTile {kind} ({c['schedule']}, {c['tile_m']}×{c['tile_n']}), {mode}, B={c['B']}"
    return f"{c['backend'].upper() if c['backend'] == 'cuda' else c['backend']} " \
           f"{c['tile_m']}×{c['tile_n']} {c['schedule']}, {mode}, B={c['B']}"


def _sort_key(c: dict) -> tuple:
    return (c["backend"] != "cutile", c["causal"], not c["schedule"].startswith("static"),
            c["B"], c["S_q"], c["D"], c["schedule"])


def _change(per_order: dict[str, float]) -> float:
    lin, saw = per_order.get("linear"), per_order.get("sawtooth")
    if lin is None or saw is None or not lin:
        return math.nan
    return 100.0 * (saw / lin - 1.0)


def _repeat_set(runs: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """The largest set of runs that are repeats of one another (``<base>``, ``<base>-r2``, ...):
    a newer single run loaded beside them (another method, e.g. repeated launches) is not mixed
    in."""
    groups: dict[str, list[str]] = {}
    for k in runs:
        groups.setdefault(re.sub(r"-r\d+$", "", run_name(k)), []).append(k)
    best = max(groups.values(), key=len, default=[])
    return {k: runs[k] for k in best}


def load(rows: list[dict]) -> dict:
    runs = _repeat_set(runs_of(rows, "sawtooth"))
    if len(runs) < 2:
        raise Skip(f"no repeated runs of the sawtooth study ({len(runs)} loaded; the repeats "
                   "figure needs at least two)")
    cases: dict[tuple, dict] = {}
    for run, rr in runs.items():
        misses: dict[tuple, dict] = {}
        times: dict[tuple, dict] = {}
        for r in rr:
            if r["order"] not in ("linear", "sawtooth"):
                continue
            k = tuple(r[c] for c in CASE) + (r["source"],)
            if r["metric"] == Metric.L2_TEX_MISSES:
                misses.setdefault(k, {})[r["order"]] = r["value"]
            elif r["metric"] == Metric.KERNEL_TIME_MS and r["value"] > 0:
                times.setdefault(k, {}).setdefault(r["order"], []).append(r["value"])
        for k in set(misses) | set(times):
            m, t = _change(misses.get(k, {})), _change(
                {o: median(v) for o, v in times.get(k, {}).items()})
            if math.isnan(m) and math.isnan(t):
                continue
            c = cases.setdefault(k, dict(zip(CASE, k), source=k[-1], runs={}))
            c["runs"][run_name(run)] = {"misses": m, "time": t,
                                        "n": {o: len(v) for o, v in times.get(k, {}).items()}}
    if not cases:
        raise Skip("no comparisons in the sawtooth runs (rows with both the linear and the "
                   "sawtooth order of one configuration)")
    order = sorted(cases.values(), key=_sort_key)
    devices = {manifest_device(manifest(rr)) for rr in runs.values()}
    return {"cases": order, "runs": [run_name(r) for r in runs],
            "device": devices.pop() if len(devices) == 1 else None,
            "sources": {c["source"] for c in order}}


def plot(data: dict, arch: str | None = None):
    cases, runs = data["cases"], data["runs"]
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 1.8 + 0.42 * len(cases)), sharey=True,
                             constrained_layout=True)
    y = np.arange(len(cases))[::-1]
    off = np.linspace(-0.22, 0.22, len(runs)) if len(runs) > 1 else np.zeros(1)
    for ax, q in zip(axes, QUANTITIES):
        for j, run in enumerate(runs):
            st = RUN_STYLE[j % len(RUN_STYLE)]
            xs = [c["runs"].get(run, {}).get(q, math.nan) for c in cases]
            ax.scatter(xs, y + off[j], s=30, color=st["color"], marker=st["marker"],
                       edgecolor="black", linewidth=0.4, zorder=3, label=run, gid=f"{q}:{run}")
        for yi, c in zip(y, cases):      # the run-to-run range, written beside each row
            v = [c["runs"][r][q] for r in runs if r in c["runs"]
                 and not math.isnan(c["runs"][r][q])]
            if len(v) > 1:
                ax.hlines(yi, min(v), max(v), color="grey", lw=2.5, alpha=0.35, zorder=1)
                ax.annotate(f"{min(v):+.1f}..{max(v):+.1f}%", (1.0, yi), xycoords=("axes fraction",
                            "data"), xytext=(3, 0), textcoords="offset points", va="center",
                            fontsize=7, color="#444444")
        ax.axvline(0, color="black", lw=0.9, zorder=2)
        ax.set_xlabel(f"sawtooth vs linear: change in {QUANTITIES[q]} (%)", fontsize=8)
        ax.grid(True, axis="x", lw=0.3, alpha=0.6)
        for yi in y:
            ax.axhline(yi + 0.5, color="grey", lw=0.3, alpha=0.4)
        ax.set_ylim(-0.6, len(cases) - 0.4)
    axes[0].set_yticks(y, [_label(c) + ("" if c["source"] == "measured" else f" ({c['source']})")
                           for c in cases], fontsize=8)
    axes[0].set_title("L2 misses (lower: sawtooth saves misses)", fontsize=9)
    axes[1].set_title("kernel time (lower: sawtooth faster)", fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, title="run (one marker each; grey bar and numbers at the right: "
               "range over the runs)", fontsize=8, title_fontsize=8, ncol=len(runs),
               loc="outside lower center")
    c0 = cases[0]
    measured = "measured" if data["sources"] == {"measured"} else "drawn"
    fig.suptitle(f"repeats: sawtooth vs linear in {len(runs)} independent runs of the sawtooth "
                 f"study, S={seq_label(c0['S_q'])}, D={c0['D']}" + title_suffix(data["sources"]) +
                 f"\n{measured} on {data['device'] or gpu_name(arch)}: "
                 f"python -m experiments.run sawtooth --arch {arch or '<arch>'}, once per run",
                 fontsize=9)
    return fig


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

"""drift: how far the persistent CTAs of the CUDA kernel drift apart from lock-step, measured.

Data: ``drift.csv`` of the drift measurement on the H100 (the registered
drift dataset the selector picks, measured with exact int64 timestamps; the manifest names the
command and the GPU): the trace build of the
CUDA kernel (persistent, one CTA per SM, 80×80 tiles, D=64, the sawtooth study's S) stamps
``%globaltimer`` at the start of every K/V step of every CTA; ``cta_start_spread_ns`` is, for a
sampled step index ``x``, the latest minus the earliest start of that step over the CTAs, and
``median_step_ns`` the median duration of one step.

One panel per (B, causal), linear and sawtooth in each, for the run's full launch (its largest
CTA count; the drift study's few-CTA launches are listed in the title, not drawn). Left axis:
the spread in steps (spread_ns / median_step_ns, log scale); right axis: the K/V bytes those
steps span (steps × ``spec.TileGrid.kv_step_bytes``, one K and one V tile per step), with the
arch's L2 size as a dashed line, so the spread can be read against the cache. Light vertical
lines mark the end of each work item of a non-causal CTA (every n_kv = ceil(S/tile_n) steps);
causal work items have 1..n_kv steps and are not marked.
"""
from __future__ import annotations

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import EngFormatter  # noqa: E402

from spec import Problem, Tiles, get_arch  # noqa: E402
from spec.problem import TileGrid  # noqa: E402
from spec.records import Metric  # noqa: E402
from spec.schedules import CtaSchedule  # noqa: E402

from .data import Skip, manifest, manifest_command, manifest_device, one_run, select  # noqa: E402
from .style import order_style, seq_label, title_suffix  # noqa: E402

FIGURE = "drift"
STUDIES: tuple[str, ...] = ("drift",)
MiB = 2 ** 20


def kv_bytes(r: dict) -> int:
    """Bytes of K/V one step of a CTA reads (one K and one V tile: ``TileGrid.kv_step_bytes``)."""
    p = Problem(r["B"], r["H"], r["S_q"], r["D"], S_kv=r["S_kv"], causal=r["causal"])
    return TileGrid(p, Tiles(r["tile_m"], r["tile_n"])).kv_step_bytes


def load(rows: list[dict]) -> dict:
    rows, run = one_run(rows, "drift")
    spread = select(rows, study="drift", metric=Metric.CTA_START_SPREAD_NS)
    steps = select(rows, study="drift", metric=Metric.STEP_NS)
    if not spread or not steps:
        raise Skip("no rows of the drift study (cta_start_spread_ns with a step index x and "
                   "median_step_ns; python -m experiments.run drift --arch <arch>)")
    key = lambda r: (r["B"], r["causal"], r["order"], r["H"], r["S_q"], r["D"],  # noqa: E731
                     r["tile_m"], r["tile_n"], r["schedule"], r["source"])
    step_ns = {key(r): r["value"] for r in steps}
    cases: dict[tuple, dict] = {}
    for r in spread:
        k = key(r)
        if k not in step_ns or r["x"] is None:
            continue
        c = cases.setdefault(k, dict(B=r["B"], causal=r["causal"], order=r["order"], H=r["H"],
                                     S=r["S_q"], D=r["D"], tile_m=r["tile_m"], tile_n=r["tile_n"],
                                     schedule=r["schedule"], source=r["source"],
                                     step_ns=step_ns[k], kv_bytes=kv_bytes(r), x=[], ns=[]))
        c["x"].append(r["x"])
        c["ns"].append(r["value"])
    if not cases:
        raise Skip("no drift cases with both cta_start_spread_ns and median_step_ns rows")
    # the full launch only: the few-CTA launches of the study run 10-60x more steps each and
    # would share its axes (their spreads are in ``analysis.findings`` section 6)
    full = max(CtaSchedule.parse(c["schedule"]).num_ctas for c in cases.values())
    few = sorted({CtaSchedule.parse(c["schedule"]).num_ctas for c in cases.values()} - {full})
    cases = {k: c for k, c in cases.items()
             if CtaSchedule.parse(c["schedule"]).num_ctas == full}
    for c in cases.values():
        o = np.argsort(c["x"])
        c["x"], c["ns"] = np.asarray(c["x"])[o], np.asarray(c["ns"])[o]
        c["steps"] = c["ns"] / c["step_ns"]
        c["n_kv"] = TileGrid(Problem(c["B"], c["H"], c["S"], c["D"], causal=c["causal"]),
                             Tiles(c["tile_m"], c["tile_n"])).n_kv
    all_ns = np.concatenate([c["ns"] for c in cases.values()])
    quantum = int(np.gcd.reduce(all_ns.astype(np.int64))) if np.all(all_ns == all_ns.round()) else 0
    panels: dict[tuple, list[dict]] = {}
    for c in sorted(cases.values(), key=lambda c: (c["B"], c["causal"], c["order"] != "linear")):
        panels.setdefault((c["B"], c["causal"]), []).append(c)
    m = manifest([r for r in rows if r["study"] == "drift"])
    return {"panels": panels, "run": run, "device": manifest_device(m),
            "command": manifest_command(m), "quantum_ns": quantum,
            "sources": {c["source"] for c in cases.values()}, "few_ctas": few}


def plot(data: dict, arch: str | None = None):
    panels = data["panels"]
    Bs = sorted({b for b, _ in panels})
    modes = sorted({c for _, c in panels})
    fig, axes = plt.subplots(len(Bs), len(modes), figsize=(6.2 * len(modes), 3.6 * len(Bs)),
                             squeeze=False, constrained_layout=True)
    fig.get_layout_engine().set(w_pad=0.07)   # room for the right axis' label at the edge
    l2 = get_arch(arch).l2_bytes if arch else None
    for (B, causal), cases in panels.items():
        ax = axes[Bs.index(B)][modes.index(causal)]
        ref = cases[0]
        kvb = ref["kv_bytes"]
        top = 0.0
        for c in cases:
            st = order_style(c["order"])
            y = np.where(c["steps"] > 0, c["steps"], np.nan)       # log axis: 0 spread not drawn
            peak = int(np.nanargmax(c["steps"]))
            ax.plot(c["x"], y, color=st["color"], lw=1.2, gid=f"case:{c['order']}",
                    label=f"{st['label']}, step {c['step_ns'] / 1e3:.2f} µs: max "
                          f"{c['steps'][peak]:.0f} steps = "
                          f"{c['steps'][peak] * c['kv_bytes'] / MiB:.1f} MiB")
            ax.plot(c["x"][peak], c["steps"][peak], marker="v", color=st["color"], ms=5)
            top = max(top, float(np.nanmax(c["steps"])))
        if not causal:                   # every CTA's work items end every n_kv steps
            for k in range(1, int(ref["x"].max() // ref["n_kv"]) + 1):
                ax.axvline(k * ref["n_kv"], color="grey", lw=0.4, alpha=0.35, zorder=0)
        if l2 and all(c["kv_bytes"] == kvb for c in cases):
            ax.axhline(l2 / kvb, color="black", ls="--", lw=1.1, gid="l2",
                       label=f"L2 ({l2 / MiB:.0f} MiB) = {l2 / kvb:.0f} steps of "
                             f"{kvb // 1024} KiB K/V")
            top = max(top, l2 / kvb)
            sec = ax.secondary_yaxis("right", functions=(lambda s, b=kvb: s * b / MiB,
                                                         lambda m, b=kvb: m * MiB / b))
            sec.set_ylabel("MiB of K/V", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylim(0.1, top * 3)
        ax.set_xlim(0, ref["x"].max())
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        items = (f"work item = {ref['n_kv']} steps (grey lines)" if not causal
                 else f"work items of 1..{ref['n_kv']} steps")
        ax.set_title(f"B={B}, {'causal' if causal else 'non-causal'}: {items}", fontsize=9)
        ax.set_xlabel("step index of the CTAs' K/V scans")
        ax.set_ylabel("start spread (steps)", fontsize=8)
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(True, which="major", axis="y", lw=0.3, alpha=0.5)
    c0 = next(iter(panels.values()))[0]
    measured = "measured" if data["sources"] == {"measured"} else ""
    head = (f"drift: start-time spread across {c0['schedule'].replace('static', '')} persistent "
            f"CTAs, CUDA {c0['tile_m']}×{c0['tile_n']} tiles, D={c0['D']}, H={c0['H']}, "
            f"S={seq_label(c0['S'])}" + title_suffix(data["sources"]))
    where = (f"{measured} on {data['device']}" if data.get("device")
             else f"{measured} ({arch or 'unknown GPU'})").strip()
    lines = [head, where + (f": {data['command']}" if data.get("command") else "")]
    if data.get("few_ctas"):
        lines.append(f"the run's launches of {', '.join(map(str, data['few_ctas']))} CTAs are "
                     f"not drawn (python -m analysis.findings, section 6)")
    if data.get("quantum_ns", 0) >= 64:
        lines.append(f"every spread and step time in this run is a multiple of "
                     f"{data['quantum_ns']} ns (timestamp resolution of the run): ±"
                     f"{data['quantum_ns'] / c0['step_ns']:.1f} step")
    fig.suptitle("\n".join(lines), fontsize=9)
    return fig


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

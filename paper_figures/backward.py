"""backward: the backward study. Left, the L2 misses of each backward kernel alone (dK/dV: a CTA
owns K/V tiles and scans Q, dO, LSE, Δ; dQ: a CTA owns Q tiles and scans K/V, as the forward),
linear vs sawtooth, causal and not; measured bars beside the prediction committed before the run
(hatched). Right, the kernels' times (median, min..max of the alternated samples) with the SDPA
peers' whole backward as reference lines; a simulated-only run (GB10) draws the DRAM time its
misses cost instead (hatched), the most the sawtooth can save.

Data: one run of the backward study (``python -m experiments.run backward --arch <arch>``); for
a measured H100 run the prediction is ``analysis.findings.backward.BACKWARD_PREDICTION``.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from spec.records import Metric  # noqa: E402

from .bars import grouped_bars  # noqa: E402
from .data import Skip, one_run, select  # noqa: E402
from .style import gpu_name, seq_label  # noqa: E402

FIGURE = "backward"
STUDIES: tuple[str, ...] = ("backward",)
GROUPS = (("dkdv", False), ("dq", False), ("dkdv", True), ("dq", True))
LABEL = {"dkdv": "dK/dV", "dq": "dQ"}


def _causal(r: dict) -> bool:
    return str(r["causal"]) in ("True", "true", "1")


def _series(rows: list[dict], metric: str, scale: float) -> dict:
    """(order, source) -> one value per group (NaN where missing)."""
    out: dict = {}
    for r in rows:
        if r["metric"] != metric or (metric == Metric.L2_TEX_MISSES
                                     and r.get("source") == "measured"
                                     and r.get("stat") != "median"):
            continue
        v = r["variant"]
        key = (v.split(".")[1], r.get("source") or "measured")
        g = GROUPS.index((v.rsplit(".", 1)[-1], _causal(r)))
        out.setdefault(key, [float("nan")] * len(GROUPS))[g] = float(r["value"]) * scale
    return out


def _prediction() -> list[dict]:
    from analysis.data import read_run
    from analysis.findings.backward import BACKWARD_PREDICTION
    return read_run(Path(BACKWARD_PREDICTION)).get("counters.csv", [])


def load(rows: list[dict]) -> dict:
    rows, run = one_run(rows, "backward")
    rows = select(rows, study="backward")
    if not rows:
        raise Skip("no rows of the backward study")
    measured = any(r.get("source") == "measured" for r in rows)
    pred = _prediction() if measured and rows[0]["arch"] == "h100" else []
    pred = [dict(r, source="predicted") for r in pred]
    cut = [r for r in rows + pred if r["variant"].startswith("cutile.")]
    misses = _series(cut, Metric.L2_TEX_MISSES, 1e-6)
    times: dict = {}
    errors: dict = {}
    peers: dict = {}
    samples: dict = {}
    for r in rows:
        if r["metric"] == Metric.KERNEL_TIME_MS:
            samples.setdefault((r["variant"], _causal(r)), []).append(float(r["value"]))
    for (v, causal), s in samples.items():
        if v.startswith("cutile."):
            key, g = (v.split(".")[1], "measured"), GROUPS.index((v.rsplit(".", 1)[-1], causal))
            times.setdefault(key, [float("nan")] * 4)[g] = statistics.median(s)
            lo, hi = errors.setdefault(key, ([float("nan")] * 4, [float("nan")] * 4))
            lo[g], hi[g] = min(s), max(s)
        else:
            vals = peers.setdefault((v, "measured"), [float("nan")] * 4)
            for g, (_, c) in enumerate(GROUPS):
                if c == causal:
                    vals[g] = statistics.median(s)
    if not times:
        times = _series(cut, Metric.DRAM_SECONDS_OF_MISSES, 1e3)
    return {"misses": misses, "times": times, "errors": errors, "peers": peers,
            "measured": measured, "S": rows[0]["S_q"], "B": rows[0]["B"], "run": run}


def plot(data: dict, arch: str | None = None):
    groups = [f"{LABEL[p]}\n{'causal' if c else 'non-causal'}" for p, c in GROUPS]
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.4), constrained_layout=True)
    grouped_bars(groups, data["misses"], ax=a, ylabel="L2 misses (M sectors, log)",
                 title="L2 misses" + (" (hatched: the prediction)" if data["measured"]
                                      else ""))
    a.set_yscale("log")
    grouped_bars(groups, data["times"], ax=b, errors=data["errors"] or None,
                 peers=data["peers"] or None,
                 ylabel="kernel time (ms)" if data["measured"]
                 else "DRAM time of the misses (ms)",
                 title="time of one kernel (peers: their whole backward)" if data["measured"]
                 else "the misses' DRAM time: the most the sawtooth can save")
    fig.suptitle(f"backward: cuTile dK/dV and dQ kernels, B={data['B']} "
                 f"S={seq_label(data['S'])} D=64, 64x64 tiles, one persistent CTA per SM, "
                 f"{gpu_name(arch)}"
                 + ("\nthe persistent dQ builds and the causal dK/dV sawtooth build spill "
                    "(stack frames): those bars measure the build, not the order"
                    if data["measured"] else "")
                 + (f"\n{data['run']['note']}" if data["run"]["note"] else ""))
    return fig


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

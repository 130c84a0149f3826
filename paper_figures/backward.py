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

from spec import Variant  # noqa: E402
from spec.records import Metric  # noqa: E402

from .bars import grouped_bars  # noqa: E402
from .data import Skip, one_run, select  # noqa: E402
from .style import gpu_name, seq_label  # noqa: E402

FIGURE = "backward"
STUDIES: tuple[str, ...] = ("backward",)
GROUPS = (("dkdv", False, "m64n64"), ("dq", False, "m64n64"), ("dkdv", True, "m64n64"),
          ("dq", True, "m64n64"), ("dq", False, "m64n128"), ("dq", True, "m64n128"))
"""(pass, causal, tiles) of each bar group: the study's 64x64 builds, then its dQ pairs at
64x128 (spill-free twins); a run draws the groups it has."""
LABEL = {"dkdv": "dK/dV", "dq": "dQ"}


def group_of(variant: str, causal: bool) -> int | None:
    """The bar group of a variant id's rows (None: a build the figure does not draw)."""
    v, _ = Variant.parse(variant)
    key = (v.bwd.value if v.bwd else "", causal, v.tiles.label)
    return GROUPS.index(key) if key in GROUPS else None


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
        g = group_of(v, _causal(r))
        if g is None:
            continue
        out.setdefault(key, [float("nan")] * len(GROUPS))[g] = float(r["value"]) * scale
    return out


def _prediction() -> list[dict]:
    from analysis.data import read_run
    from analysis.findings.backward import BACKWARD_PREDICTION, BACKWARD_PREDICTION_FAIR_DQ
    return [r for p in (BACKWARD_PREDICTION, BACKWARD_PREDICTION_FAIR_DQ)
            for r in read_run(Path(p)).get("counters.csv", [])]


def load(rows: list[dict]) -> dict:
    rows, run = one_run(rows, "backward")
    rows = select(rows, study="backward")
    if not rows:
        raise Skip("no rows of the backward study")
    measured = any(r.get("source") == "measured" for r in rows)
    pred = _prediction() if measured and rows[0]["arch"] == "h100" else []
    present = {r["variant"] for r in rows}
    pred = [dict(r, source="predicted") for r in pred if r["variant"] in present]
    cut = [r for r in rows + pred if r["variant"].startswith("cutile.")]
    misses = _series(cut, Metric.L2_TEX_MISSES, 1e-6)
    times: dict = {}
    errors: dict = {}
    peers: dict = {}
    samples: dict = {}
    for r in rows:
        if r["metric"] == Metric.KERNEL_TIME_MS:
            samples.setdefault((r["variant"], _causal(r)), []).append(float(r["value"]))
    n = len(GROUPS)
    for (v, causal), s in samples.items():
        if v.startswith("cutile."):
            key, g = (v.split(".")[1], "measured"), group_of(v, causal)
            if g is None:
                continue
            times.setdefault(key, [float("nan")] * n)[g] = statistics.median(s)
            lo, hi = errors.setdefault(key, ([float("nan")] * n, [float("nan")] * n))
            lo[g], hi[g] = min(s), max(s)
        else:
            vals = peers.setdefault((v, "measured"), [float("nan")] * n)
            for g, (_, c, _) in enumerate(GROUPS):
                if c == causal:
                    vals[g] = statistics.median(s)
    if not times:
        times = _series(cut, Metric.DRAM_SECONDS_OF_MISSES, 1e3)
    return {"misses": misses, "times": times, "errors": errors, "peers": peers,
            "measured": measured, "S": rows[0]["S_q"], "B": rows[0]["B"], "run": run}


def _drawn(data: dict) -> dict:
    """``data`` cut to the groups that have a bar (a run need not hold every group)."""
    keep = [g for g in range(len(GROUPS))
            if any(vals[g] == vals[g] for vals in (*data["misses"].values(),
                                                   *data["times"].values()))]
    cut = lambda d: {k: [v[g] for g in keep] for k, v in d.items()}  # noqa: E731
    return dict(data, keep=keep, misses=cut(data["misses"]), times=cut(data["times"]),
                peers=cut(data["peers"]),
                errors={k: tuple([x[g] for g in keep] for x in v)
                        for k, v in data["errors"].items()})


def plot(data: dict, arch: str | None = None):
    data = _drawn(data)
    groups = [f"{LABEL[p]}\n{'causal' if c else 'non-causal'}"
              + ("" if t == "m64n64" else f"\n{t[1:].replace('n', 'x')}")
              for p, c, t in (GROUPS[g] for g in data["keep"])]
    fig, (a, b) = plt.subplots(1, 2, figsize=(13 + 2 * max(0, len(groups) - 4), 4.4),
                               constrained_layout=True)
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
                 f"S={seq_label(data['S'])} D=64, 64x64 tiles unless named, one persistent "
                 f"CTA per SM, {gpu_name(arch)}"
                 + ("\nthe persistent 64x64 dQ builds and the causal dK/dV sawtooth build spill "
                    "(stack frames): those bars measure the build, not the order"
                    if data["measured"] and any(GROUPS[g][2] == "m64n64"
                                                for g in data["keep"]) else "")
                 + (f"\n{data['run']['note']}" if data["run"]["note"] else ""))
    return fig


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

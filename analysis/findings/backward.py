"""Section B: does the sawtooth order pay in the backward, where it does not in the forward?

The argument. The dK/dV kernel streams, per owned K/V tile, every Q, dO, LSE and Δ tile of its
head: Q + dO + the fp32 rows are 264 bytes per query row at D = 64, 66 MiB per head at
S = 262144, more than the H100's 50 MiB L2. So a persistent CTA whose scans all run the same way
re-reads the whole stream every round (an LRU keeps the tiles the next scan needs last), and the
sawtooth, which turns every other scan round, starts each scan on the tiles the last one left
in L2: the forward's argument with the operands swapped. The dQ kernel *is* the forward's scan
(``spec.backward_trace``). What the sawtooth cannot change is how much a miss costs: a dK/dV step
does four MMAs (the forward's two) on about the bytes of the forward's step (a Q and a dO tile
against a K and a V tile), and a dQ step three, so the share of a step that waits for DRAM is at
most the forward's, where the sawtooth already saved no time.

The test (``BACKWARD_PREDICTION`` committed before ``BACKWARD_RUN``): per pass and masking, the
sawtooth/linear ratio of L2 misses predicted (lock-step LRU) and measured (ncu local tex lookup
misses of the one kernel, median of the launches), and the time ratio measured (median of the
alternated samples, with the samples' spread) against the bound the prediction gives: sawtooth
can save at most the DRAM time of the misses it removes (``dram_seconds_of_misses``).
"""
from __future__ import annotations

import statistics
from typing import Sequence

from spec import Variant
from spec.records import Metric

BACKWARD_PREDICTION = "profiles/h100/backward-prediction-20261127"
BACKWARD_PREDICTION_FAIR_DQ = "profiles/h100/backward-prediction-20261127b"
"""The prediction for the plan's dQ pairs at 64x128 tiles (spill-free twins), committed before
they were measured."""
BACKWARD_RUN = "profiles/h100/backward-20261127"
BACKWARD_RUN_FAIR_DQ = "profiles/h100/backward-20261127b"
"""The H100 run of the plan's dQ pairs at 64x128 tiles, after ``BACKWARD_PREDICTION_FAIR_DQ``."""
BACKWARD_GB10 = "profiles/gb10/backward-20261127"
FORWARD_RUN = "profiles/h100/sawtooth-20261123"
"""The forward's sawtooth study on the H100 (the same problem class, cuTile Static 64x64): the
comparison the section's question names."""


def _pass_of(variant: str) -> str:
    return variant.rsplit(".", 1)[-1]


def _key(r: dict) -> tuple[str, bool, str, str]:
    """(pass, causal, tiles, order) of a row: the tiles keep the plan's 64x128 dQ pairs apart
    from its 64x64 builds."""
    v = Variant.parse(r["variant"])[0]
    return _pass_of(r["variant"]), str(r["causal"]) in ("True", "true", "1"), v.tiles.label, \
        v.order.label


def _medians(timing: Sequence[dict], what: str) -> dict:
    ms: dict = {}
    for r in timing:
        if r["metric"] == Metric.KERNEL_TIME_MS and r.get("source", "measured") == "measured":
            ms.setdefault(what(r), []).append(float(r["value"]))
    return ms


def backward_check(predicted: Sequence[dict], counters: Sequence[dict],
                   timing: Sequence[dict], dram_bytes_per_s: float) -> list[dict]:
    """One row per (pass, causal, tiles): misses of linear and sawtooth predicted and measured,
    their ratios (``ranges_apart``: the launches' min..max do not overlap), the measured DRAM reads
    and the time they take at ``dram_bytes_per_s`` (``dram_saving_ms``: what the removed reads
    cost), the bound on the time sawtooth can save as predicted (``max_saving_ms``), and the
    measured time ratio (``time_apart``: the samples' min..max do not overlap)."""
    pred: dict = {}
    bound: dict = {}
    for r in predicted:
        if r["metric"] == Metric.L2_TEX_MISSES:
            pred[_key(r)] = float(r["value"])
        elif r["metric"] == Metric.DRAM_SECONDS_OF_MISSES:
            bound[_key(r)] = float(r["value"])
    meas: dict = {}
    dram: dict = {}
    for r in counters:
        if r["metric"] == Metric.L2_TEX_MISSES and r.get("stat") == "median":
            meas[_key(r)] = (float(r["value"]), float(r["lo"]), float(r["hi"]))
        elif r["metric"] == Metric.DRAM_READ_BYTES and r.get("stat") == "median":
            dram[_key(r)] = float(r["value"])
    ms = _medians(timing, lambda r: _key(r) if r["variant"].startswith("cutile.") else None)
    out = []
    for p, causal, tiles in sorted({k[:3] for k in pred}):
        lin, saw = (p, causal, tiles, "linear"), (p, causal, tiles, "sawtooth")
        row = dict(pass_=p, causal=causal, tiles=tiles,
                   pred_linear=pred.get(lin), pred_sawtooth=pred.get(saw),
                   pred_ratio=pred[saw] / pred[lin] if lin in pred and saw in pred else None)
        if lin in meas and saw in meas:
            row.update(meas_linear=meas[lin][0], meas_sawtooth=meas[saw][0],
                       meas_ratio=meas[saw][0] / meas[lin][0],
                       ranges_apart=meas[saw][2] < meas[lin][1] or meas[saw][1] > meas[lin][2])
        if lin in bound and saw in bound:
            row["max_saving_ms"] = 1e3 * (bound[lin] - bound[saw])
        if lin in dram and saw in dram:
            row.update(dram_linear_gb=dram[lin] / 1e9, dram_sawtooth_gb=dram[saw] / 1e9,
                       dram_saving_ms=1e3 * (dram[lin] - dram[saw]) / dram_bytes_per_s)
        if ms.get(lin) and ms.get(saw):
            tl, ts = statistics.median(ms[lin]), statistics.median(ms[saw])
            row.update(ms_linear=tl, ms_sawtooth=ts, time_ratio=ts / tl,
                       time_apart=max(ms[saw]) < min(ms[lin]) or min(ms[saw]) > max(ms[lin]),
                       saving_ms=tl - ts, samples=min(len(ms[lin]), len(ms[saw])))
        out.append(row)
    return out


def peer_times(timing: Sequence[dict]) -> list[dict]:
    """Median time of each SDPA peer's whole backward and of our two passes (linear) per
    causal, from the same run: the scale the kernels' times stand on."""
    ms = _medians(timing, lambda r: (r["variant"], str(r["causal"])))
    out = []
    for causal in sorted({c for _, c in ms}):
        ours = {v: statistics.median(x) for (v, c), x in ms.items()
                if c == causal and v.startswith("cutile.linear.")}
        row = dict(causal=causal, ours_linear_passes_ms=sum(ours.values()) if ours else None)
        for (v, c), x in ms.items():
            if c == causal and not v.startswith("cutile."):
                row[f"{v}_ms"] = statistics.median(x)
        out.append(row)
    return out


def forward_pairs(counters: Sequence[dict], timing: Sequence[dict]) -> list[dict]:
    """The forward's cuTile Static linear/sawtooth pairs of the sawtooth study (the same problem
    class): miss ratio and median time ratio, per causal."""
    miss = {(r["variant"].split(".")[1], str(r["causal"])): float(r["value"]) for r in counters
            if r["metric"] == Metric.L2_TEX_MISSES and r.get("stat") == "median"
            and r["variant"].startswith("cutile.") and ".static" in r["variant"]}
    ms = _medians(timing, lambda r: (r["variant"].split(".")[1], str(r["causal"]))
                  if r["variant"].startswith("cutile.") and ".static" in r["variant"] else None)
    dram = {(r["variant"].split(".")[1], str(r["causal"])): float(r["value"]) for r in counters
            if r["metric"] == Metric.DRAM_READ_BYTES and r.get("stat") == "median"
            and r["variant"].startswith("cutile.") and ".static" in r["variant"]}
    out = []
    for causal in sorted({c for _, c in miss}):
        lin, saw = ("linear", causal), ("sawtooth", causal)
        if lin in miss and saw in miss and ms.get(lin) and ms.get(saw):
            out.append(dict(causal=causal, miss_ratio=miss[saw] / miss[lin],
                            dram_linear_gb=dram.get(lin, float("nan")) / 1e9,
                            dram_sawtooth_gb=dram.get(saw, float("nan")) / 1e9,
                            ms_linear=statistics.median(ms[lin]),
                            time_ratio=statistics.median(ms[saw]) / statistics.median(ms[lin]),
                            time_apart=max(ms[saw]) < min(ms[lin]) or min(ms[saw]) > max(ms[lin])))
    return out


DQPAIR_PREDICTION = "profiles/cpu/prediction-h200-dqpair-20261128"
DQPAIR_OCCASIONS = {"occ1": "profiles/h200/dqpair-20261128-occ1",
                    "occ2": "profiles/h200/dqpair-20261128-occ2",
                    "occ3": "profiles/h200/dqpair-20261128-occ3"}
"""The fair dQ pair repeated on the H200 with a reverse-order control and a length whose K/V
fits the L2: one run directory per occasion (a fresh machine and process each)."""


def dqpair_rows(predicted: Sequence[dict],
                occasions: Sequence[tuple[str, Sequence[dict], Sequence[dict]]]) -> list[dict]:
    """One row per (causal, S, order) against linear: the predicted miss ratio, and per
    occasion the measured miss ratio and the median time ratio (``<occ>_apart``: the samples'
    min..max do not overlap); then the time ratio's range over the occasions."""
    def key(r):
        return str(r["causal"]) in ("True", "true", "1"), int(float(r["S_q"])), \
            Variant.parse(r["variant"])[0].order.label
    pred = {key(r): float(r["value"]) for r in predicted if r["metric"] == Metric.L2_TEX_MISSES}
    out = []
    for causal, s, order in sorted(k for k in pred if k[2] != "linear"):
        lin = (causal, s, "linear")
        row = dict(causal=causal, S_q=s, order=order,
                   pred_miss_ratio=pred[(causal, s, order)] / pred[lin])
        ratios = []
        for occ, counters, timing in occasions:
            meas = {key(r): float(r["value"]) for r in counters
                    if r["metric"] == Metric.L2_TEX_MISSES and r.get("stat") == "median"}
            ms = _medians(timing, lambda r: key(r) if r["variant"].startswith("cutile.") else None)
            if (causal, s, order) in meas and lin in meas:
                row[f"{occ}_miss_ratio"] = meas[(causal, s, order)] / meas[lin]
            a, b = ms.get((causal, s, order)), ms.get(lin)
            if a and b:
                t = statistics.median(a) / statistics.median(b)
                ratios.append(t)
                row[f"{occ}_time_ratio"] = t
                row[f"{occ}_apart"] = max(a) < min(b) or min(a) > max(b)
        if ratios:
            row.update(occasions=len(ratios), time_ratio_lo=min(ratios),
                       time_ratio_hi=max(ratios))
        out.append(row)
    return out


def sections(arch: str) -> dict:
    """The report's sections B, B2 and B3 (``analysis.findings.report``) for ``arch``: only the
    H100 has the measured run and its prediction."""
    from pathlib import Path

    from analysis.data import read_run
    from analysis.data.registry import root
    if arch == "h200":
        occ = [(o, *(read_run(Path(d)).get(f, []) for f in ("counters.csv", "timing.csv")))
               for o, d in DQPAIR_OCCASIONS.items()]
        return {"sB_dqpair": (
            f"B4. The fair dQ pair repeated on the H200 (cuTile 64x128, 132 persistent CTAs, "
            f"B=8 D=64; {DQPAIR_PREDICTION} before the occasions "
            f"{', '.join(DQPAIR_OCCASIONS.values())}): sawtooth and the reverse control "
            "against linear, miss and time ratios per occasion",
            dqpair_rows(read_run(Path(DQPAIR_PREDICTION)).get("counters.csv", []), occ))}
    if arch != "h100" or not (root() / BACKWARD_RUN).is_dir():
        return {}
    run = read_run(Path(BACKWARD_RUN))
    fwd = read_run(Path(FORWARD_RUN))
    from spec import get_arch
    dram = get_arch(arch).dram_bytes_per_s
    rows = backward_check(read_run(Path(BACKWARD_PREDICTION)).get("counters.csv", []),
                          run.get("counters.csv", []), run.get("timing.csv", []), dram)
    if (root() / BACKWARD_RUN_FAIR_DQ).is_dir():
        fair = read_run(Path(BACKWARD_RUN_FAIR_DQ))
        rows += backward_check(read_run(Path(BACKWARD_PREDICTION_FAIR_DQ)).get("counters.csv", []),
                               fair.get("counters.csv", []), fair.get("timing.csv", []), dram)
    return {
        "sB_backward": (f"B. The backward's sawtooth: each kernel alone, linear vs sawtooth "
                        f"(cuTile 64x64 and, for dQ, 64x128; 132 persistent CTAs, B=8 S=262144 "
                        f"D=64; {BACKWARD_PREDICTION} before {BACKWARD_RUN}, "
                        f"{BACKWARD_PREDICTION_FAIR_DQ} before {BACKWARD_RUN_FAIR_DQ}): miss ratio "
                        "predicted and measured, time ratio measured, and the most time the "
                        "removed misses can cost (their DRAM time)", rows),
        "sB_backward_peers": ("B2. The backward's time scale: our two passes (linear) and SDPA's "
                              f"whole backward, median ms ({BACKWARD_RUN})",
                              peer_times(run.get("timing.csv", []))),
        "sB_forward": (f"B3. The forward's sawtooth on the same problem class (cuTile Static "
                       f"64x64, {FORWARD_RUN}): miss and time ratios",
                       forward_pairs(fwd.get("counters.csv", []), fwd.get("timing.csv", []))),
    }

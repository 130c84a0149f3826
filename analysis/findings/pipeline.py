"""Section P7: the pipeline model against a measurement it predicted.

The test of the pipeline model (``analysis.models.steptime``): one build family, one access stream,
three K/V pipeline depths. Without prefetch (depth 1) every fill is exposed, the CTA that misses
falls back and a causal launch's CTAs stay in a convoy; with a double buffer or deeper the fills
hide behind compute and the causal CTAs spread into a staircase. The prediction
(``PIPELINE_PREDICTION``, the misscost study simulated at S = 327680) was committed before the
H100 run (``PIPELINE_RUN``) was made. Per case: the misses (median and min..max of the launches)
against the predicted count, and the median kernel time (streamer off) against the predicted
makespan times the build's step (``steptime.REFERENCE``).
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from spec.records import Metric

PIPELINE_PREDICTION = "profiles/cpu/prediction-h100-pipeline-20261127"
PIPELINE_RUN = "profiles/h100/pipeline-20261127"
SPILLS_PREDICTION = "profiles/cpu/prediction-h100-spills-20261127"
SPILLS_RUN = "profiles/h100/spills-20261127"
"""The second test (section P8): a build that spills inside its step loop beside its twin that
does not (the spills study, causal cuTile Static, occupancy 1 and 2)."""


_STEP = re.compile(r"step (\d+(?:\.\d+)?) ns")


def pipeline_check(predicted: Sequence[dict], counters: Sequence[dict],
                   timing: Sequence[dict]) -> list[dict]:
    """One row per case of the measured run: misses and time, predicted and measured. The
    predicted time is the predicted makespan times the step the prediction assumed (its rows'
    note), so a later change of the model's constants cannot move a committed prediction."""
    pred_miss, pred_span, step_s = {}, {}, {}
    for r in predicted:
        k = (r["variant"], str(r["causal"]))
        if r["metric"] == Metric.L2_TEX_MISSES:
            pred_miss[k] = float(r["value"])
            m = _STEP.search(r.get("note") or "")
            if m:
                step_s[k] = float(m.group(1)) * 1e-9
        elif r["metric"] == Metric.MAKESPAN_STEPS:
            pred_span[k] = float(r["value"])
    meas: dict[tuple, tuple[float, float, float]] = {}
    for r in counters:
        if r["metric"] == Metric.L2_TEX_MISSES and r.get("stat") == "median":
            meas[(r["variant"], str(r["causal"]))] = (float(r["value"]), float(r["lo"]),
                                                     float(r["hi"]))
    ms: dict[tuple, list[float]] = {}
    for r in timing:
        note = r.get("note") or ""
        if (r["metric"] == Metric.KERNEL_TIME_MS and r.get("source") == "measured"
                and ("stream=" not in note or "stream=off" in note)):
            ms.setdefault((r["variant"], str(r["causal"])), []).append(float(r["value"]))
    out = []
    for k in sorted(meas):
        m, lo, hi = meas[k]
        p = pred_miss.get(k)
        t = float(np.median(ms[k])) if ms.get(k) else float("nan")
        tp = pred_span[k] * step_s[k] * 1e3 if k in pred_span and k in step_s else float("nan")
        out.append(dict(variant=k[0], causal=k[1], misses=m, misses_lo=lo, misses_hi=hi,
                        predicted=p, err_pct=100 * (p / m - 1) if p else None,
                        ms=t, predicted_ms=tp, ms_err_pct=100 * (tp / t - 1)))
    return out


def spill_cost(rows: Sequence[dict]) -> list[dict]:
    """What a spill costs per step, measured: the time a spilling build adds over its spill-free
    twin (``occ1`` over ``occ2`` of the same order)."""
    ms = {r["variant"]: r["ms"] for r in rows}
    out = []
    for v, t in ms.items():
        if ".occ1" in v and v.replace(".occ1", ".occ2") in ms:
            t2 = ms[v.replace(".occ1", ".occ2")]
            out.append(dict(variant=v, ms=t, twin_ms=t2, added_pct=100 * (t / t2 - 1)))
    return out


def summary(rows: Sequence[dict]) -> list[dict]:
    """Relative RMS error of the misses and of the times over the cases, and how many cases
    are predicted within 25%."""
    e = np.array([r["err_pct"] for r in rows if r["err_pct"] is not None])
    t = np.array([r["ms_err_pct"] for r in rows if np.isfinite(r["ms_err_pct"])])
    return [dict(cases=len(rows), misses_rel_rms_pct=float(np.sqrt(np.mean(e ** 2))),
                 misses_within_25pct=int(np.sum(np.abs(e) <= 25)),
                 time_rel_rms_pct=float(np.sqrt(np.mean(t ** 2))) if len(t) else float("nan"),
                 time_max_abs_err_pct=float(np.max(np.abs(t))) if len(t) else float("nan"))]

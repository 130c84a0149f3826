"""The simulator terms fixed by measurements, never by miss counts: the per-step and per-CTA
jitter from the measured CTA drift, the SM-pair slowdown from per-CTA lags, and the miss/hit
step-time ratio from step times and pointer-chase latencies."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from analysis.cache.smmap import sm_pair
from analysis.data import csv_rows
from analysis.models import timemodel
from spec.records import Metric
from spec.schedules import CtaSchedule
from spec.variant import DEFAULT_STAGES


# --------------------------------------------------------------------------------------------
# jitter from the measured drift
# --------------------------------------------------------------------------------------------
def expected_normal_range(n: int) -> float:
    """E[max − min] of ``n`` independent standard normals (numerical integral)."""
    x = np.linspace(-10, 10, 20001)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    pdf = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    e_max = float(np.trapezoid(x * n * pdf * cdf ** (n - 1), x))
    return 2 * e_max


def jitter_from_drift(drift_csv: Path) -> tuple[float, float, str]:
    """(σ_step, σ_rate, note): the two components of the measured CTA drift.

    The spread of ``N`` CTAs' clocks after ``x`` steps, if each step's duration has a random
    log-factor of sd σ_step and each CTA (SM) a constant speed log-factor of sd σ_rate, is about
    ``E[range of N normals] · sqrt(σ_rate² x² + σ_step² x)``: a random walk grows like sqrt(x), a
    speed difference linearly. The measured spreads grow almost linearly over a whole kernel
    (log-log slope 0.83-0.96 over the four non-causal cases of ``drift-20261121b``; a random walk
    alone would give 0.5, and B=4's 100 work items would spread 2x B=1's 25, not the measured
    1.5-6x), so both terms are kept. For every non-causal case ``(spread / range)²`` is fitted by
    non-negative least squares in (σ_rate², σ_step²) over all its sampled steps; each σ is the
    median over the cases. Drift data only: no miss count enters."""
    from scipy.optimize import nnls
    rows = csv_rows(drift_csv)
    by: dict[tuple, dict] = {}
    for r in rows:
        if r["causal"]:
            continue
        k = (r["variant"], r["B"])
        d = by.setdefault(k, {"pts": [], "P": None, "step": None})
        if r["metric"] == Metric.STEP_NS:
            d["step"] = r["value"]
        elif r["metric"] == Metric.CTA_START_SPREAD_NS:
            d["pts"].append((r["x"], r["value"]))
        d["P"] = CtaSchedule.parse(r["schedule"]).num_ctas
    s_rate, s_step = [], []
    for d in by.values():
        x = np.array([p[0] for p in d["pts"]], dtype=float)
        v = np.array([p[1] for p in d["pts"]]) / d["step"] / expected_normal_range(d["P"])
        keep = x > 0
        (a, b), _ = nnls(np.stack([x[keep] ** 2, x[keep]], axis=1), v[keep] ** 2)
        s_rate.append(math.sqrt(a))
        s_step.append(math.sqrt(b))
    if not s_rate:
        raise ValueError(f"{drift_csv}: no non-causal drift cases to derive the jitter from")
    sr, ss = float(np.median(s_rate)), float(np.median(s_step))
    name = Path(drift_csv).parent.name
    return ss, sr, (f"jitter {ss:.4f} per step and rate_jitter {sr:.5f} per CTA = medians over "
                    f"{len(s_rate)} non-causal cases of {name} (fit of the spread's growth)")


def pair_slowdown_from_lags(lags_csv: Path) -> tuple[float, str]:
    """(δ, note): how much slower the odd SM of a busy SM pair runs, per step, from measured
    per-CTA lags (``profiles/h100/drift-sm-20261125b/lags.csv.xz``: each CTA's SM and its lag
    behind the median CTA at the last step all CTAs ran, sparse-stamp trace builds).

    For every launch, every SM pair (2k, 2k+1) that runs a CTA on both SMs gives lag(odd) −
    lag(even); their mean over the launch's pairs, over the step, is that launch's δ; the note's
    δ is the median over the launches that have busy pairs (launches of CTAs alone on their
    pairs give none). Timing data only: no miss count enters."""
    rows = csv_rows(lags_csv, typed=False)
    launches: dict[tuple[str, str], dict] = {}
    for r in rows:
        d = launches.setdefault((r["case"], r["launch"]), {"step": int(r["step"]), "pair": {}})
        sm = int(r["sm"])
        d["pair"].setdefault(sm_pair(sm), {})[sm % 2] = float(r["lag_steps"])
    per = []
    for d in launches.values():
        diffs = [p[1] - p[0] for p in d["pair"].values() if len(p) == 2]
        if diffs and d["step"] > 0:
            per.append(float(np.mean(diffs)) / d["step"])
    if not per:
        raise ValueError(f"{lags_csv}: no launch with a CTA on both SMs of a pair")
    delta = float(np.median(per))
    return delta, (f"pair_slowdown {delta:.2e} per step = median over the {len(per)} launches "
                   f"with busy SM pairs of {Path(lags_csv).parent.name} (odd minus even SM lag)")


def miss_ratio_from_timing(drift_csv: Path, facts: timemodel.MemoryFacts = timemodel.H100,
                           stages: int = DEFAULT_STAGES) -> tuple[float, str]:
    """(r, note): the miss/hit step-time ratio of ``analysis.cache.timesim`` from timing data alone.

    What a simulated step is. ``timesim`` advances a CTA by one K/V tile pair per step and lets the
    step last until its loads are ready: a hit step is the unit, a miss step lasts ``r``. In the
    kernel a step is not its load latency. The CUDA build keeps ``stages`` K/V buffers (default
    2, ``spec.variant.DEFAULT_STAGES``): tile ``s+1`` is issued when step ``s`` starts and must have
    landed when step ``s+1`` starts, so a load has ``(stages − 1)·t_c`` of compute to hide behind.
    ``analysis.models.timemodel`` states this as ``period = t_c + max(0, L − (stages − 1)·t_c)``,
    and ``r = period(L_dram) / period(L_hit)``. Here ``t_c`` is the shortest measured median step of
    the drift study (``analysis.calibration.fitting.DRIFT_RUN``: 1.29-1.40 µs, the same 80×80 D=64
    build with 2-132 CTAs; the shortest gives the largest r), ``L_hit`` and ``L_dram`` the
    pointer-chase latencies (``profiles/h100/latency-20261123``: 143 ns, 349 ns). At depth 2 the
    DRAM fill (0.35 µs) is 0.28 of the step it hides behind, so **r = 1 exactly**: a CTA whose load
    misses is not slower than one that hits, and nothing in the timing pulls a trailing CTA back
    behind the leader that pays the misses. The misscost study agrees (REPORT.md §10): at depths 2
    and 3 the time change does not follow the miss change (−74% .. +38% misses, +1.4 .. +4.0% time
    in all 32 configurations), while at depth 1 (``r = (t_c + L_dram) / (t_c + L_hit)``, 1.15 here)
    removing misses saves 5-12%. r would exceed 1 only if the loaded DRAM latency exceeded
    ``t_c``, 3.6× the unloaded value. Timing and latency data only: no miss count enters."""
    steps = [r["value"] for r in csv_rows(drift_csv) if r["metric"] == Metric.STEP_NS]
    if not steps:
        raise ValueError(f"{drift_csv}: no {Metric.STEP_NS} rows to take the step time from")
    t_c = min(steps) * 1e-9

    def period(f: float) -> float:
        return timemodel.predict(steps=1, t_c=t_c, stages=stages, f=f, dram_bytes=0.0,
                                 bw_available=1.0, facts=facts).period_s

    r = period(1.0) / period(0.0)
    return r, (f"miss_ratio {r:g} = step period with every load from DRAM / with every load an L2 "
               f"hit (analysis.models.timemodel, {stages} K/V stages, t_c {t_c * 1e6:.2f} us = "
               f"shortest median step of {Path(drift_csv).parent.name}, "
               f"L2 hit {facts.l2_hit_s * 1e9:.1f} "
               f"ns, DRAM {facts.dram_s * 1e9:.1f} ns: {facts.name} latencies)")

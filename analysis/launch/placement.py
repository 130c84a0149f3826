"""Where and when the CTAs of one launch ran, and whether launches that miss more in L2 ran
differently.

The wavefront argument behind the sawtooth order assumes that the P CTAs of a persistent launch
start together, one per SM, and scan their K/V tiles in near lock-step, so that one CTA's miss is
the others' hit. Two things can break that from one launch to the next without any change to the
code. *Placement*: the 80x80 CUDA build fits two CTAs per SM (160 registers x 160 threads, 52 KB
of shared memory), so the block scheduler may put 2 of 132 CTAs on one SM and leave another SM
idle; the two CTAs sharing an SM run at about half speed each and fall behind. *Drift*: CTAs
that start late or run slow fall steps behind the others, and a tile the leaders fetched has
left L2 by the time a straggler asks for it.

The CUDA trace build records both per CTA (``CudaFamily.trace``): ``smid`` (the SM), ``start_ns``
and ``end_ns`` (``%globaltimer`` at its start and end) and ``time_ns`` (the start of every step).
This module turns one launch's arrays into a compact record (:class:`LaunchTrace`, a few KB), the
placement and drift statistics of the launch (:class:`Placement`), and, over the launches of one
case, the Spearman rank correlation between the measured misses and each statistic.

Worked example: 4 CTAs on SMs (0, 1, 1, 3) place 2 CTAs on SM 1 (``max_ctas_per_sm`` = 2,
``shared_sms`` = 1, ``sms_used`` = 3); if they start at 0, 32, 64 and 96 ns the start spread is
96 ns; if at step ``n_kv`` (one work item done) their stamps are 1000, 1000, 1600 and 1100 ns
with steps of 100 ns, they have drifted 6 steps apart after one work item. Over five launches
with misses (80, 81, 89, 80, 82) M and shared SMs (0, 0, 3, 0, 1), Spearman's rho is 0.92: the
launches that shared SMs missed more.

SM pairs: ``analysis.cache.smmap.sm_pair`` (``smid // 2``) groups SM ids in consecutive pairs.
Hopper's TPCs hold two SMs, but NVIDIA does not document that ``%smid`` 2k and 2k+1 share a
TPC, and the SM -> GPC mapping is not public at all; the pair statistics are reported under that
name, not as TPCs or GPCs.
%globaltimer ticks in 32 ns steps on the H100 measured (all 2400 start spreads of
profiles/h100/drift-20261121b are multiples of 32 ns): spreads below that are not resolved.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Sequence

import numpy as np

from analysis.cache.smmap import sm_pair
from analysis.launch.drift import drift, sample_steps


@dataclass(frozen=True)
class LaunchTrace:
    """One launch's trace, compact: per CTA its SM and start/end, and the start of a sample of
    steps. Times are ns relative to ``base_ns`` (the earliest CTA start, absolute %globaltimer);
    -1 where a CTA has no such stamp."""
    smid: np.ndarray            # int32 [n_ctas]
    start_ns: np.ndarray        # int64 [n_ctas]
    end_ns: np.ndarray          # int64 [n_ctas]
    steps: np.ndarray           # int64 [k], sampled step indices (increasing)
    step_ns: np.ndarray         # int64 [n_ctas, k], start of those steps
    median_step_ns: float       # median step duration over all CTAs and all steps
    base_ns: int

    @property
    def n_ctas(self) -> int:
        return len(self.smid)


def compact(time_ns: np.ndarray, smid: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray, *,
            keep_steps: Sequence[int] = (), points: int = 64, every: int = 1) -> LaunchTrace:
    """The compact record of one launch from ``trace()``'s full arrays (``time_ns`` int64
    [n_ctas, steps], -1 padded): ``points`` evenly spaced steps plus ``keep_steps`` (clipped to
    the last step; e.g. the step after one work item), and the median step duration of the full
    array (``analysis.launch.drift``). A sparse trace (record ``r`` = step ``r * every``) keeps the
    records nearest those steps; ``steps`` holds step indices either way."""
    time_ns = np.asarray(time_ns, dtype=np.int64)
    smid, start_ns, end_ns = (np.asarray(a) for a in (smid, start_ns, end_ns))
    if time_ns.ndim != 2 or not time_ns.shape[1]:
        raise ValueError(f"time_ns has shape {time_ns.shape}; expected [n_ctas, steps >= 1]")
    n = time_ns.shape[0]
    for name, a in (("smid", smid), ("start_ns", start_ns), ("end_ns", end_ns)):
        if a.shape != (n,):
            raise ValueError(f"{name} has shape {a.shape}; expected ({n},), one per CTA")
    if (smid < 0).any():
        raise ValueError("smid holds negative SM ids: a CTA did not record its SM (was this a "
                         "trace build?)")
    started = start_ns >= 0
    if not started.any():
        raise ValueError("no CTA recorded a start stamp (start_ns all -1)")
    base = int(start_ns[started].min())
    last = time_ns.shape[1] - 1
    cols = np.union1d(sample_steps(last + 1, points),
                      np.minimum(np.asarray(keep_steps, dtype=np.int64) // every, last))
    cols = cols.astype(np.int64)

    def rel(a):
        return np.where(a >= 0, a - base, -1).astype(np.int64)

    return LaunchTrace(smid.astype(np.int32), rel(start_ns), rel(end_ns), cols * every,
                       rel(time_ns[:, cols]), drift(time_ns, every).median_step_ns, base)


@dataclass(frozen=True)
class Placement:
    """Placement and drift statistics of one launch (see the module docstring)."""
    n_ctas: int
    sms_used: int               # distinct SM ids
    max_ctas_per_sm: int
    shared_sms: int             # SMs that ran two or more CTAs
    pairs_used: int             # distinct smid // 2 (TPCs if consecutive ids pair up; undocumented)
    max_ctas_per_pair: int
    start_spread_ns: float      # last CTA start - first CTA start
    start_order_rho: float      # Spearman(CTA index, start time): 1 = CTAs start in index order
    drift_one_item_steps: float # start spread of step n_kv over the CTAs, in median steps
    max_drift_steps: float      # largest spread over the sampled steps, in median steps
    span_ns: float              # last CTA end - first CTA start
    shared_end_lag_ns: float    # median end of CTAs on shared SMs - median end of the others
    median_step_ns: float


STATISTICS = tuple(f.name for f in fields(Placement) if f.name not in ("n_ctas",))
"""The statistics correlated with the misses (every Placement field but the CTA count)."""

UNITS = {"n_ctas": "CTA", "sms_used": "SM", "max_ctas_per_sm": "CTA", "shared_sms": "SM",
         "pairs_used": "pair", "max_ctas_per_pair": "CTA", "start_spread_ns": "ns",
         "start_order_rho": "rho", "drift_one_item_steps": "step", "max_drift_steps": "step",
         "span_ns": "ns", "shared_end_lag_ns": "ns", "median_step_ns": "ns"}


def step_spread_ns(t: LaunchTrace) -> np.ndarray:
    """Max - min start of each sampled step over the CTAs that ran it (NaN where fewer than 2)."""
    valid = t.step_ns >= 0
    hi = np.where(valid, t.step_ns, np.iinfo(np.int64).min).max(axis=0)
    lo = np.where(valid, t.step_ns, np.iinfo(np.int64).max).min(axis=0)
    return np.where(valid.sum(axis=0) >= 2, (hi - lo).astype(np.float64), np.nan)


def lags(t: LaunchTrace) -> tuple[int, np.ndarray]:
    """(step, lag): each CTA's lag behind the median CTA, in median steps (+ = behind), at the
    last sampled step every CTA ran. Which CTAs fall behind in a full launch: joined with the
    SM each ran on (``t.smid``) over launches that placed CTAs differently, it tells whether the
    lag belongs to the SM or to the CTA (``profiles/h100/drift-sm-20261125``)."""
    common = np.flatnonzero((t.step_ns >= 0).all(axis=0))
    if not common.size:
        raise ValueError("no sampled step that every CTA ran")
    col = t.step_ns[:, common[-1]].astype(np.float64) / t.median_step_ns
    return int(t.steps[common[-1]]), col - np.median(col)


def placement(t: LaunchTrace, n_kv: int) -> Placement:
    """The statistics of one launch; ``n_kv`` is the number of steps of one work item (K/V tiles
    per head), so step ``n_kv`` starts the second work item (clipped to the last sampled step)."""
    per_sm = np.bincount(t.smid)
    per_pair = np.bincount(sm_pair(t.smid))
    ok = t.start_ns >= 0
    starts = t.start_ns[ok]
    spread = step_spread_ns(t)
    at = int(np.searchsorted(t.steps, min(n_kv, int(t.steps[-1]))))
    step = t.median_step_ns
    drift_steps = spread / step if step and not math.isnan(step) else spread * math.nan
    shared = per_sm[t.smid] >= 2
    ended = t.end_ns >= 0
    lag = (float(np.median(t.end_ns[shared & ended]) - np.median(t.end_ns[~shared & ended]))
           if (shared & ended).any() and (~shared & ended).any() else math.nan)
    span = (float(t.end_ns[ended].max() - starts.min()) if ended.any() else math.nan)
    return Placement(
        n_ctas=t.n_ctas, sms_used=int((per_sm > 0).sum()), max_ctas_per_sm=int(per_sm.max()),
        shared_sms=int((per_sm >= 2).sum()), pairs_used=int((per_pair > 0).sum()),
        max_ctas_per_pair=int(per_pair.max()),
        start_spread_ns=float(starts.max() - starts.min()),
        start_order_rho=spearman(np.flatnonzero(ok), starts),
        drift_one_item_steps=float(drift_steps[at]),
        max_drift_steps=float(np.nanmax(drift_steps)) if np.isfinite(drift_steps).any()
        else math.nan,
        span_ns=span, shared_end_lag_ns=lag, median_step_ns=float(step))


def spearman(x, y) -> float:
    """Spearman's rank correlation (ties get average ranks); NaN for fewer than 3 pairs, a
    constant input or NaN values: no correlation can be stated then."""
    return _spearman(x, y)[0]


def _spearman(x, y) -> tuple[float, float]:
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"spearman needs two 1-D arrays of one length, got {x.shape}, {y.shape}")
    if len(x) < 3 or np.isnan(x).any() or np.isnan(y).any() or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan
    from scipy import stats as sps  # about 1 s to import: only where a test is computed
    r = sps.spearmanr(x, y)
    return float(r.statistic), float(r.pvalue)


@dataclass(frozen=True)
class Correlation:
    """Spearman's rho between the misses and one statistic over ``n`` launches, with its
    two-sided p-value (scipy's t approximation; at n = 10 |rho| must exceed ~0.65 for p < 0.05)."""
    statistic: str
    rho: float
    p: float
    n: int


def correlations(misses: Sequence[float], launches: Sequence[Placement]) -> dict[str, Correlation]:
    """Spearman's rho between the misses of each launch and each statistic of ``STATISTICS``
    over the launches that have a miss count (NaN misses, a failed launch, are left out)."""
    if len(misses) != len(launches):
        raise ValueError(f"{len(misses)} miss counts for {len(launches)} launches")
    keep = [i for i, m in enumerate(misses) if not math.isnan(m)]
    m = [misses[i] for i in keep]
    return {s: Correlation(s, *_spearman(m, [getattr(launches[i], s) for i in keep]), len(keep))
            for s in STATISTICS}


# -- storage: the launches of one case as one small npz --------------------------------------

ARRAYS = ("smid", "start_ns", "end_ns", "steps", "step_ns", "median_step_ns", "base_ns")


def to_arrays(traces: Sequence[LaunchTrace]) -> dict[str, np.ndarray]:
    """The launches stacked along a first axis (``np.savez`` input); they must share the CTA
    count and the sampled steps (launches of one case do)."""
    if not traces:
        raise ValueError("no launches to store")
    shapes = {(t.n_ctas, tuple(t.steps)) for t in traces}
    if len(shapes) != 1:
        raise ValueError("launches differ in CTA count or sampled steps; store one case per file")
    return {name: np.stack([np.asarray(getattr(t, name)) for t in traces]) for name in ARRAYS}


def from_arrays(arrays) -> list[LaunchTrace]:
    """Inverse of :func:`to_arrays` (``arrays``: a dict or an ``np.load`` result)."""
    missing = [a for a in ARRAYS if a not in arrays]
    if missing:
        raise ValueError(f"placement arrays lack {', '.join(missing)}")
    a = {k: np.asarray(arrays[k]) for k in ARRAYS}
    return [LaunchTrace(a["smid"][i], a["start_ns"][i], a["end_ns"][i], a["steps"][i],
                        a["step_ns"][i], float(a["median_step_ns"][i]), int(a["base_ns"][i]))
            for i in range(len(a["smid"]))]

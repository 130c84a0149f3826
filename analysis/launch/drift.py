"""How far concurrent CTAs drift apart, read off the trace build of a kernel family (its
``trace()["time_ns"]``).

The wavefront argument assumes that CTAs running at the same time advance through their K/V scans
in lock-step, so that one CTA's miss is the others' hit. The trace build stamps ``%globaltimer`` at
the start of every step of every CTA; for a persistent launch (all CTAs resident from the start)
the spread of the start times of step ``s`` over the CTAs measures the drift after ``s`` steps, in
nanoseconds and in units of one step's duration.

Worked example: 3 CTAs whose step 10 starts at 1000, 1040 and 1100 ns, with steps of 20 ns,
have drifted apart by 100 ns = 5 steps by then; K/V tiles they share are then 5 tiles apart in
their scans instead of 0.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Drift:
    step: np.ndarray        # step indices with at least two CTAs
    spread_ns: np.ndarray   # max - min start time of that step over the CTAs that ran it
    median_step_ns: float   # median duration of one step (all CTAs, all steps)

    @property
    def spread_steps(self) -> np.ndarray:
        return self.spread_ns / self.median_step_ns


def drift(time_ns: np.ndarray, every: int = 1) -> Drift:
    """``time_ns``: int64 [n_ctas, records], -1 where a CTA has no such record
    (trace()["time_ns"]); record ``r`` is step ``r * every`` (trace()["every"]), so ``step`` holds
    step indices and ``median_step_ns`` is the median time between records over ``every``.

    %globaltimer stamps are large (ns since the epoch on current drivers, ~1.8e18), where float64
    resolves only 256 ns; times are made relative to the earliest stamp in int64 before any
    floating-point arithmetic."""
    raw = np.asarray(time_ns, dtype=np.int64)
    valid = raw >= 0
    base = raw[valid].min() if valid.any() else 0
    t = (raw - base).astype(np.float64)
    both = valid[:, 1:] & valid[:, :-1]
    durations = np.diff(t, axis=1)[both] / every
    median = float(np.median(durations)) if durations.size else float("nan")
    counts = valid.sum(axis=0)
    hi = np.where(valid, t, -np.inf).max(axis=0)
    lo = np.where(valid, t, np.inf).min(axis=0)
    keep = counts >= 2
    return Drift(np.flatnonzero(keep) * every, (hi - lo)[keep], median)


GAP_EDGES = (0.0, 0.5, 2.0, 8.0, 64.0, 256.0, 1024.0, 4096.0)
"""Lower edges of the bins of ``step_time_by_gap``, in steps behind the leading CTA: the first
bin holds the leader (gap 0) and CTAs within half a step of it, the next ones CTAs close enough
to find the leader's fills in flight, a few MiB behind, and more than one L2 partition behind
(1280 steps of 20 KiB are 25 MiB)."""


@dataclass(frozen=True)
class GapTimes:
    edges: np.ndarray       # lower edge of each gap bin, in steps behind the leading CTA
    mean_ns: np.ndarray     # mean duration of the steps that started in that bin (nan: none)
    count: np.ndarray       # how many step durations fell in that bin


def step_time_by_gap(time_ns: np.ndarray, edges=GAP_EDGES, every: int = 1,
                     d: Drift | None = None) -> GapTimes:
    """How long a CTA's step lasts as a function of how far it is behind the leading CTA.

    Why: a simulated step costs a hit time or a miss time, and only the *difference* between
    the two holds CTAs together. When a few CTAs scan the same K/V, the one in front (the
    leader) misses every tile and the ones behind find its fills in the L2; if a missing step
    lasted longer than a hitting one, followers would catch up with the leader and convoy behind
    it; if not, any difference in speed drives them apart without limit. The trace build stamps
    every step of every CTA, so both durations are read off directly: for each step index ``s``
    the leader is the CTA that started it first, every CTA's gap is its start time minus the
    leader's (in median steps), and its step lasts ``t[c, s+1] − t[c, s]``. Only steps the CTA
    ran both ends of count; ``edges`` are the bins' lower edges (the last bin is open). With a
    sparse trace (record ``r`` = step ``r * every``) a "step" is ``every`` steps and its
    duration is reported per step (divided by ``every``). ``d``: ``drift(time_ns, every)`` if
    the caller has it already (its median step is the unit of the gaps)."""
    raw = np.asarray(time_ns, dtype=np.int64)
    valid = raw >= 0
    if raw.ndim != 2 or raw.shape[1] < 2 or valid.sum(axis=0).max() < 2:
        raise ValueError("step_time_by_gap needs at least two CTAs with two stamped steps")
    d = d if d is not None else drift(raw, every)
    base = raw[valid].min()
    t = (raw - base).astype(np.float64)
    lead = np.where(valid, t, np.inf).min(axis=0)
    gap = (t[:, :-1] - lead[:-1]) / d.median_step_ns
    dur = np.diff(t, axis=1) / every
    ok = valid[:, 1:] & valid[:, :-1] & (valid.sum(axis=0)[:-1] >= 2)
    e = np.asarray(edges, dtype=np.float64)
    b = np.searchsorted(e, gap[ok], side="right") - 1
    n = np.bincount(b, minlength=len(e))[:len(e)]
    tot = np.bincount(b, weights=dur[ok], minlength=len(e))[:len(e)]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, tot / np.maximum(n, 1), np.nan)
    return GapTimes(e, mean, n)


def sample_steps(n: int, points: int) -> np.ndarray:
    """At most ``points`` (>= 2) step positions out of ``0..n-1``, evenly spaced, first and last
    kept."""
    if points < 2:
        raise ValueError(f"points={points}: at least 2 are needed to keep the first and last step")
    if n <= points:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, points).round().astype(np.int64))


@dataclass(frozen=True)
class Completions:
    """The finish times of a persistent launch's work items, as a kernel with no timer shows them
    to an observer (``explorations/drift_spy.py``): item ``k`` was CTA ``cta[k]``'s ``iter[k]``-th,
    ``steps[k]`` K/V steps long, and its output appeared at ``t_ns[k]``."""

    cta: np.ndarray
    iter: np.ndarray
    steps: np.ndarray
    t_ns: np.ndarray

    @functools.cached_property
    def _per_cta(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """(finish times, K/V steps done by then) of each CTA, its items in order (computed once:
        ``window``, ``speeds`` and ``positions`` all read it)."""
        order = np.lexsort((self.iter, self.cta))
        cta, t, s = self.cta[order], self.t_ns[order].astype(np.float64), self.steps[order]
        bounds = np.searchsorted(cta, np.arange(cta.max() + 2))
        return [(t[a:b], np.cumsum(s[a:b]).astype(np.float64))
                for a, b in zip(bounds[:-1], bounds[1:])]

    def window(self, lo: float, hi: float) -> tuple[float, float]:
        """Times at fractions ``lo`` and ``hi`` of the span from the first finish to the moment
        the first CTA runs out of work (after it, fewer CTAs run and the rest spread freely)."""
        t0 = float(self.t_ns.min())
        end = min(float(t.max()) for t, _ in self._per_cta if len(t))
        return t0 + lo * (end - t0), t0 + hi * (end - t0)

    def speeds(self, lo: float = 0.1, hi: float = 0.9) -> np.ndarray:
        """Each CTA's speed in K/V steps per ns: the least-squares slope of steps done against
        finish time over the items that finish inside ``window(lo, hi)`` (NaN with fewer than
        two). A constant speed difference makes the drift grow linearly with the steps run,
        which is how the H100's CTAs drift (``analysis.cache.timesim``: the slot speed factors)."""
        a, b = self.window(lo, hi)
        out = []
        for t, done in self._per_cta:
            m = (t >= a) & (t <= b)
            out.append(np.polyfit(t[m], done[m], 1)[0] if m.sum() >= 2 else np.nan)
        return np.asarray(out)

    def positions(self, fractions) -> np.ndarray:
        """[len(fractions), n_ctas] K/V steps each CTA has done at each fraction of ``window(0,
        1)``, interpolated between its item finishes: the spread of a column is the drift."""
        a, b = self.window(0.0, 1.0)
        return np.array([[np.interp(a + f * (b - a), t, done) for t, done in self._per_cta]
                         for f in fractions])


def step_factors(speeds: np.ndarray) -> np.ndarray:
    """Per-CTA step duration over the mean CTA's (mean speed / speed): the constant slot speed
    factors ``analysis.cache.timesim`` multiplies each step by."""
    s = np.asarray(speeds, dtype=np.float64)
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ValueError("every CTA needs a finite, positive measured speed")
    return s.mean() / s

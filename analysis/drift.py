"""How far concurrent CTAs drift apart, read off the trace build of a kernel family (its ``trace()["time_ns"]``).

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


def drift(time_ns: np.ndarray) -> Drift:
    """``time_ns``: int64 [n_ctas, steps], -1 where a CTA has no such step (trace()["time_ns"]).

    %globaltimer stamps are large (ns since the epoch on current drivers, ~1.8e18), where float64
    resolves only 256 ns; times are made relative to the earliest stamp in int64 before any
    floating-point arithmetic."""
    raw = np.asarray(time_ns, dtype=np.int64)
    valid = raw >= 0
    base = raw[valid].min() if valid.any() else 0
    t = (raw - base).astype(np.float64)
    both = valid[:, 1:] & valid[:, :-1]
    durations = np.diff(t, axis=1)[both]
    median = float(np.median(durations)) if durations.size else float("nan")
    counts = valid.sum(axis=0)
    hi = np.where(valid, t, -np.inf).max(axis=0)
    lo = np.where(valid, t, np.inf).min(axis=0)
    keep = counts >= 2
    return Drift(np.flatnonzero(keep), (hi - lo)[keep], median)


def sample_steps(n: int, points: int) -> np.ndarray:
    """At most ``points`` (>= 2) step positions out of ``0..n-1``, evenly spaced, first and last
    kept."""
    if points < 2:
        raise ValueError(f"points={points}: at least 2 are needed to keep the first and last step")
    if n <= points:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, points).round().astype(np.int64))

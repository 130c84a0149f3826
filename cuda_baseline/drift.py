"""How far concurrent CTAs drift apart, read off a trace build (``CudaBackend.trace``).

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
    """``time_ns``: int64 [n_ctas, steps], -1 where a CTA has no such step (trace()["time_ns"])."""
    t = np.asarray(time_ns, dtype=np.float64)
    valid = t >= 0
    both = valid[:, 1:] & valid[:, :-1]
    durations = np.diff(t, axis=1)[both]
    median = float(np.median(durations)) if durations.size else float("nan")
    counts = valid.sum(axis=0)
    hi = np.where(valid, t, -np.inf).max(axis=0)
    lo = np.where(valid, t, np.inf).min(axis=0)
    keep = counts >= 2
    return Drift(np.flatnonzero(keep), (hi - lo)[keep], median)

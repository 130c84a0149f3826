"""The fills' latency tail (``TimeParams.fill_sigma``, model pipeline-v2): a fill that takes
several times the unloaded latency is exposed even behind a lookahead, so a causal launch's
CTAs can hold an intermediate convoy between depth 0's and the staircase."""
from __future__ import annotations

from dataclasses import replace

import pytest

from analysis.cache import timesim
from analysis.cache.timesim import TimeParams
from spec import CtaSchedule, Problem, ScanOrder, TileGrid, Tiles
from spec.trace import work_table


def _pipe(prefetch, miss, sigma=0.0, cap=1 << 20, seed=0):
    return TimeParams(cap, compute=1.0, hit_latency=0.1, miss_ratio=miss, prefetch=prefetch,
                      step_source="test", fill_sigma=sigma, seed=seed)


def _one_cta(steps):
    return work_table(TileGrid(Problem(1, 1, 64, 64, S_kv=64 * steps), Tiles(64, 64)),
                      CtaSchedule.persistent(1), ScanOrder.linear())


def test_validation_and_note():
    with pytest.raises(ValueError, match="fill_sigma"):
        TimeParams(1 << 20, fill_sigma=-0.1)
    with pytest.raises(ValueError, match="pipeline-model"):
        TimeParams(1 << 20, fill_sigma=0.5)
    assert "fill_sigma=0.5" in _pipe(1, 0.3, 0.5).note()
    assert "fill_sigma" not in _pipe(1, 0.3).note()


def test_without_a_tail_a_lookahead_hides_every_fill_and_with_one_it_cannot():
    """One CTA, one item of 64 K/V tiles (every one a cold miss), prefetch 1, a fill of 0.3
    steps: without a tail each step lasts exactly its compute after the first (the fill of
    step s+1 lands 0.3 into step s), so the makespan is the prologue's fill (0.3, Q and the
    first K/V) plus 64 steps. A tail of sd 1.5 in the log makes some fills last over a step
    (P(0.3 e^{1.5 z} > 1) = P(z > 0.80) = 21%): those are exposed and the makespan grows; the
    misses do not change."""
    t = _one_cta(64)
    base = timesim.simulate(t, 1, _pipe(1, 0.3))
    assert base.makespan == pytest.approx(0.3 + 64)
    tail = timesim.simulate(t, 1, _pipe(1, 0.3, 1.5))
    assert tail.makespan > base.makespan + 1.0
    assert tail.tex_misses == base.tex_misses
    deeper = timesim.simulate(t, 1, _pipe(3, 0.3, 1.5))
    assert base.makespan <= deeper.makespan < tail.makespan     # a deeper lookahead hides more


def test_zero_tail_is_the_frozen_model_bit_for_bit():
    t = work_table(TileGrid(Problem(1, 1, 64 * 32, 64, causal=True), Tiles(64, 64)),
                   CtaSchedule.persistent(8), ScanOrder.linear())
    p = replace(_pipe(1, 0.3), jitter=0.01, capacity_bytes=64 * 256 * 32)
    a, b = timesim.simulate(t, 8, p), timesim.simulate(t, 8, replace(p, fill_sigma=0.0))
    assert (a.tex_misses, a.makespan) == (b.tex_misses, b.makespan)

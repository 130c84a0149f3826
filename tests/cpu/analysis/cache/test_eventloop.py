"""The event loop's parts that must not change a count: the loser tree pops the slots in the
order a binary heap on (clock, slot) does, and the normal draws are numpy's legacy stream (the
``np.random`` stream the loop drew from before), bit for bit."""
import heapq

import numba
import numpy as np
import pytest

from analysis.cache import gauss
from analysis.cache.replacement import INF_KEY, tree_build, tree_replay


@pytest.mark.parametrize("seed", [0, 1, 7, 2**32 - 1])
def test_normal_draws_are_numpys_legacy_stream(seed):
    n = 1_000_003                       # not a multiple of the buffer: a refill mid-pair too
    assert np.array_equal(gauss.draws(seed, n), np.random.RandomState(seed).standard_normal(n))


def test_step_factors_are_the_loops_former_expression():
    """The per-step jitter factor, computed with each refill, is ``exp(j z - j^2 / 2)`` of the
    stream's normals as the loop computed it per step (libm's exp, here through Python's)."""
    import math
    j = 2.6027650007648533e-05
    z = np.random.RandomState(4).standard_normal(5000)
    want = [math.exp(j * x - 0.5 * j * j) for x in z]
    assert gauss.factors(4, j, 5000).tolist() == want


@numba.njit
def _numba_stream(seed, n):  # pragma: no cover - compiled
    np.random.seed(seed)
    out = np.empty(n)
    for i in range(n):
        out[i] = np.random.standard_normal()
    return out


def test_numbas_own_generator_is_that_stream_too():
    """What the loop drew before (``np.random`` in numba) is the same stream: the test above
    then says the counts cannot move."""
    assert np.array_equal(_numba_stream(3, 100_001), np.random.RandomState(3).standard_normal(
        100_001))


@pytest.mark.parametrize("slots", [1, 2, 3, 5, 48, 64, 100])
def test_loser_tree_pops_in_clock_then_slot_order(slots):
    """Random clock advances with many ties (clocks on a coarse grid) and slots retiring at
    random: every pop is the minimum of (clock, slot), as ``heapq`` gives it."""
    rng = np.random.default_rng(slots)
    time = np.zeros(slots)
    keys = time.view(np.int64)
    leaves = 1
    while leaves < slots:
        leaves *= 2
    tree_k = np.empty(2 * leaves, np.int64)
    tree_s = np.empty(2 * leaves, np.int64)
    tree_build(tree_k, tree_s, keys, slots, leaves)
    heap = [(0.0, s) for s in range(slots)]
    heapq.heapify(heap)
    live = slots
    while live:
        want = heapq.heappop(heap)
        s = int(tree_s[0])
        assert (time[s], s) == want
        if rng.random() < 0.02:                              # retire
            live -= 1
            tree_replay(tree_k, tree_s, leaves, s, INF_KEY)
            continue
        time[s] += float(rng.integers(0, 3))                  # 0: a tie with itself
        heapq.heappush(heap, (time[s], s))
        tree_replay(tree_k, tree_s, leaves, s, keys[s])

"""LRU stack distances, histograms and miss-ratio curves vs brute force and hand-derived cases."""
from __future__ import annotations

import numpy as np
import pytest

from analysis.cache.l2sim import hits_at
from analysis.cache.reuse import (
    distance_histogram,
    exact_histogram,
    miss_ratio_curve,
    stack_distances,
    trace_stack_distances,
)
from spec import CtaSchedule, Problem, ScanOrder, Tensor, TileGrid, Tiles, build_trace


# ---- brute force references ---------------------------------------------------------------
def brute_distances(key, weights=None) -> list[int]:
    """List-based LRU stack: distance = total weight of the keys above the accessed one."""
    stack: list[int] = []            # most recent first
    out = []
    for k in key.tolist():
        w = (lambda x: 1) if weights is None else (lambda x: int(weights[x]))
        if k in stack:
            i = stack.index(k)
            out.append(sum(w(x) for x in stack[:i]))
            stack.pop(i)
        else:
            out.append(-1)
        stack.insert(0, k)
    return out


def brute_sector_lru_misses(key, weights, capacity) -> int:
    """A sector-granular LRU: every key is ``weights[key]`` sectors touched in order."""
    from collections import OrderedDict
    cache: OrderedDict = OrderedDict()
    misses = 0
    for k in key.tolist():
        for s in range(int(weights[k])):
            sec = (k, s)
            if sec in cache:
                cache.move_to_end(sec)
            else:
                misses += 1
                cache[sec] = None
                if len(cache) > capacity:
                    cache.popitem(last=False)
    return misses


def one_cta_k_distances(order: ScanOrder, n_kv: int, passes: int):
    """Unweighted stack distances of the K accesses of one persistent CTA (P = resident = 1)."""
    g = TileGrid(Problem(1, 1, 64 * passes, 64, S_kv=64 * n_kv), Tiles(64, 64))
    tr = build_trace(g, CtaSchedule.persistent(1), order, resident=1)
    d = tr.decode()
    k_only = tr.key[d["tensor"] == Tensor.K]
    tile = d["tile"][d["tensor"] == Tensor.K]
    return stack_distances(k_only), tile, stack_distances(k_only, tr.key_sectors)


# ---- the locality argument on a one-CTA trace ---------------------------------------------
@pytest.mark.parametrize("n_kv", [1, 2, 5, 16])
def test_sawtooth_distances_are_j_and_n_minus_1_minus_j(n_kv):
    passes = 5
    d, tile, dw = one_cta_k_distances(ScanOrder.sawtooth(), n_kv, passes)
    assert len(d) == passes * n_kv
    assert np.all(d[:n_kv] == -1)                       # first pass: cold
    for p in range(1, passes):
        sl = slice(p * n_kv, (p + 1) * n_kv)
        backward = p % 2 == 1
        want = (n_kv - 1 - tile[sl]) if backward else tile[sl]
        assert np.array_equal(d[sl], want), (p, d[sl], tile[sl])
    # all K tiles are 64 rows × 64 × 2 B = 256 sectors: weighted = 256 × unweighted
    assert np.array_equal(dw[n_kv:], 256 * d[n_kv:])
    warm = d[n_kv:]
    assert warm.mean() == pytest.approx((n_kv - 1) / 2)


@pytest.mark.parametrize("n_kv", [1, 3, 16])
def test_linear_distances_are_n_minus_1(n_kv):
    d, _, _ = one_cta_k_distances(ScanOrder.linear(), n_kv, 4)
    assert np.all(d[:n_kv] == -1)
    assert np.all(d[n_kv:] == n_kv - 1)


def test_worked_examples_of_the_docstring():
    assert stack_distances(np.array([0, 1, 2, 0, 1, 2], np.int32)).tolist() == [-1] * 3 + [2] * 3
    assert stack_distances(np.array([0, 1, 2, 2, 1, 0], np.int32)).tolist() == [-1] * 3 + [0, 1, 2]
    # 2-key cache: 6 misses linear, 4 sawtooth
    for seq, want in (([0, 1, 2, 0, 1, 2], 6), ([0, 1, 2, 2, 1, 0], 4)):
        k = np.array(seq, np.int32)
        assert miss_ratio_curve(stack_distances(k), k).misses(2) == want


# ---- against brute force ------------------------------------------------------------------
CASES = [(n, k, seed) for seed in range(3) for n, k in ((1, 1), (50, 3), (300, 17), (2000, 40),
                                                      (3000, 400))]


@pytest.mark.parametrize("n,n_keys,seed", CASES)
def test_unweighted_equals_brute_force(n, n_keys, seed):
    rng = np.random.default_rng(seed)
    # a mix of uniform and bursty (small-distance) reuse, so both cold and hot keys occur
    key = np.where(rng.random(n) < 0.5, rng.integers(0, n_keys, n),
                   rng.integers(0, max(1, n_keys // 8), n)).astype(np.int32)
    assert stack_distances(key).tolist() == brute_distances(key)


@pytest.mark.parametrize("n,n_keys,seed", CASES)
def test_weighted_equals_brute_force(n, n_keys, seed):
    rng = np.random.default_rng(100 + seed)
    key = rng.integers(0, n_keys, n).astype(np.int32)
    weights = rng.integers(0, 300, n_keys + 3)           # extra unused keys, zero weights allowed
    assert stack_distances(key, weights).tolist() == brute_distances(key, weights)


def test_compaction_many_accesses_few_keys():
    # 2·n_keys slots fill up thousands of times here
    rng = np.random.default_rng(7)
    key = rng.integers(0, 5, 20000).astype(np.int32)
    w = np.array([3, 1, 4, 1, 5])
    assert stack_distances(key, w).tolist() == brute_distances(key, w)


def test_input_validation():
    with pytest.raises(ValueError):
        stack_distances(np.array([0, -1], np.int32))
    with pytest.raises(ValueError):
        stack_distances(np.array([0, 5], np.int32), np.ones(3))
    with pytest.raises(ValueError):
        stack_distances(np.zeros((2, 2), np.int32))
    assert stack_distances(np.zeros(0, np.int32)).tolist() == []
    assert stack_distances(np.array([3, 3], np.int64)).tolist() == [-1, 0]


# ---- miss-ratio curve ---------------------------------------------------------------------
def _random_trace(seed, n=1500, n_keys=60, wmax=9):
    rng = np.random.default_rng(seed)
    key = np.where(rng.random(n) < 0.6, rng.integers(0, n_keys, n),
                   rng.integers(0, 6, n)).astype(np.int32)
    return key, rng.integers(1, wmax + 1, n_keys)


@pytest.mark.parametrize("seed", range(4))
def test_mrc_matches_sector_lru_at_every_capacity(seed):
    key, w = _random_trace(seed, n=600, n_keys=30, wmax=5)
    d = stack_distances(key, w)
    mrc = miss_ratio_curve(d, key, w)
    caps = np.arange(0, int(w.sum()) + 3)
    got = mrc.misses(caps)
    want = [brute_sector_lru_misses(key, w, c) for c in caps]
    assert got.tolist() == want


@pytest.mark.parametrize("seed", range(4))
def test_mrc_monotone_and_limits(seed):
    key, w = _random_trace(seed)
    for weights in (None, w):
        d = stack_distances(key, weights)
        mrc = miss_ratio_curve(d, key, weights)
        total = int(len(key) if weights is None else w[key].sum())
        seen = np.unique(key)
        cold = int(len(seen) if weights is None else w[seen].sum())
        caps = np.arange(0, (mrc.need[-1] if len(mrc.need) else 0) + 5)
        m = mrc.misses(caps)
        assert np.all(np.diff(m) <= 0)
        assert mrc.misses(0) == total == mrc.total
        assert mrc.misses(10**12) == cold == mrc.cold
        assert mrc.misses(mrc.need[-1]) == cold
        c, mm = mrc.steps()
        assert c[0] == 0 and mm[0] == total and mm[-1] == cold


def test_mrc_sort_path_equals_histogram_path():
    # huge weights push the needs past the histogram limit and force the sorting path
    key, w = _random_trace(11, n=2000, n_keys=50)
    big = w * 1_000_003
    d_small, d_big = stack_distances(key, w), stack_distances(key, big)
    assert np.array_equal(d_big[d_big >= 0], d_small[d_small >= 0] * 1_000_003)
    small, large = miss_ratio_curve(d_small, key, w), miss_ratio_curve(d_big, key, big)
    assert int(large.need[-1]) > (1 << 20) and int(large.need[-1]) > 4 * len(key)
    assert np.array_equal(large.need, small.need * 1_000_003)
    assert np.array_equal(large.hits_upto, small.hits_upto * 1_000_003)
    assert (large.total, large.cold) == (small.total * 1_000_003, small.cold * 1_000_003)


def test_hits_at_equals_mrc():
    key, w = _random_trace(3)
    d = stack_distances(key, w)
    mrc = miss_ratio_curve(d, key, w)
    caps = [0, 1, 7, 50, 120, 10**9]
    total, cold, hits = hits_at(d, key, w, caps)
    assert (total, cold) == (mrc.total, mrc.cold)
    assert (total - hits).tolist() == mrc.misses(np.array(caps)).tolist()


def test_all_cold_and_empty_mrc():
    key = np.arange(5, dtype=np.int32)
    mrc = miss_ratio_curve(stack_distances(key), key)
    assert mrc.misses(0) == mrc.misses(100) == 5 == mrc.cold
    e = np.zeros(0, np.int32)
    assert miss_ratio_curve(stack_distances(e), e).misses(3) == 0


# ---- histograms ---------------------------------------------------------------------------
def test_log2_histogram_bins_and_weights():
    d = np.array([-1, 0, 1, 2, 3, 4, 7, 8, 1000], dtype=np.int64)
    h = distance_histogram(d)
    assert h.cold == 1
    assert h.lo.tolist()[:5] == [0, 1, 2, 4, 8] and h.hi.tolist()[:5] == [1, 2, 4, 8, 16]
    assert h.count.tolist()[:5] == [1, 1, 2, 2, 1]
    assert h.count[-1] == 1 and h.lo[-1] <= 1000 < h.hi[-1]
    assert h.total == len(d)
    key = np.arange(len(d), dtype=np.int32)
    w = np.arange(1, len(d) + 1)
    hw = distance_histogram(d, key, w)
    assert hw.weighted and hw.cold == 1 and hw.total == int(w.sum())
    assert hw.count.tolist()[:3] == [2, 3, 4 + 5]


def test_exact_histogram_of_a_sawtooth_trace():
    d, _, _ = one_cta_k_distances(ScanOrder.sawtooth(), 8, 3)
    h = exact_histogram(d)
    assert h.lo.tolist() == list(range(8))
    assert h.count.tolist() == [2] * 8            # each distance 0..7 once per warm pass
    assert h.cold == 8 and h.mean() == pytest.approx(3.5)


def test_trace_stack_distances_is_sector_weighted():
    g = TileGrid(Problem(1, 2, 200, 64, causal=True), Tiles(64, 64))
    tr = build_trace(g, CtaSchedule.persistent(3), ScanOrder.sawtooth(), resident=3)
    assert trace_stack_distances(tr).tolist() == brute_distances(tr.key, tr.key_sectors)

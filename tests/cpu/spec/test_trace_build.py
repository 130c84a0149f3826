"""spec.build_trace (one pass over the work table, numba) equals, access for access, the former
implementation that expanded every (item, step) pair and sorted them by (step, slot), on
every schedule kind, both masks, GQA, uneven and cross lengths, more and fewer resident slots
than CTAs."""
from __future__ import annotations

import numpy as np
import pytest

from spec import CtaSchedule, Problem, ScanOrder, TileGrid, Tiles, build_trace
from spec.trace import Tensor, Trace, _expand, _KeySpace, dispatch


def reference_trace(g, schedule, order, resident, sector_bytes=32):
    """The former implementation: every (item, step) pair expanded, then a counting sort over
    the dense (step, slot) grid. Slow and memory-hungry, obviously the definition."""
    e = _expand(g, schedule, order)
    dur = np.bincount(e.item_cta, weights=e.item_len, minlength=e.n_ctas).astype(np.int64)
    slot, start = dispatch(dur, resident)
    r = min(resident, e.n_ctas)

    it = e.pair_item
    cta = e.item_cta[it]
    time = start[cta] + e.item_local0[it] + e.pair_step
    pos = time * r + slot[cta]                      # unique: one pair per slot per step
    del time
    # counting sort on the dense (step, slot) grid instead of an O(n log n) argsort
    dense = np.full(int(pos.max()) + 1 if len(pos) else 0, -1, dtype=np.int32)
    dense[pos] = np.arange(len(pos), dtype=np.int32)
    del pos
    perm = dense[dense >= 0]
    del dense

    it = it[perm]
    step, kv = e.pair_step[perm], e.pair_kv[perm]
    del perm
    first = step == 0
    last = step == e.item_len[it] - 1
    n_acc = 2 + first.astype(np.int64) + last
    base = np.cumsum(n_acc) - n_acc
    ks = _KeySpace(g, sector_bytes)
    p = g.problem
    bh = e.item_bh[it].astype(np.int64)
    q_key = bh * g.n_q + e.item_q[it]
    kv_key = ((bh // p.H) * p.H_kv + (bh % p.H) // p.group_size) * g.n_kv + kv
    del bh, kv, step

    key = np.empty(int(n_acc.sum()), dtype=np.int32)
    key[base[first]] = ks.base[Tensor.Q] + q_key[first]
    k_at = base + first
    key[k_at] = ks.base[Tensor.K] + kv_key
    key[k_at + 1] = ks.base[Tensor.V] + kv_key
    key[k_at[last] + 2] = ks.base[Tensor.O] + q_key[last]
    return Trace(key=key, key_sectors=ks.sectors(), grid=g, resident=r, sector_bytes=sector_bytes)


SCHEDULES = [CtaSchedule.grid(), CtaSchedule.tile_x(2), CtaSchedule.tile_x(3),
             CtaSchedule.persistent(3), CtaSchedule.persistent(7), CtaSchedule.parse("lpt5")]
ORDERS = [ScanOrder.linear(), ScanOrder.sawtooth(), ScanOrder.sawtooth(2), ScanOrder.reverse(),
          ScanOrder.block_parity()]
PROBLEMS = [Problem(B=2, H=2, S_q=320, D=64), Problem(B=1, H=3, S_q=300, D=64, causal=True),
            Problem(B=1, H=4, H_kv=2, S_q=256, D=64, causal=True),
            Problem(B=2, H=1, S_q=128, S_kv=400, D=64),
            Problem(B=1, H=2, S_q=200, S_kv=520, D=128, causal=True)]


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.label)
@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s.label)
def test_equals_the_former_implementation(problem, schedule):
    g = TileGrid(problem, Tiles(64, 64))
    for order in ORDERS:
        for resident in (1, 2, 5, 64):
            new = build_trace(g, schedule, order, resident)
            ref = reference_trace(g, schedule, order, resident)
            assert new.resident == ref.resident
            np.testing.assert_array_equal(new.key, ref.key)
            np.testing.assert_array_equal(new.key_sectors, ref.key_sectors)

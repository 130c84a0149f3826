"""Properties of the vocabulary: orders, schedules, visit orders and traces
(hand-checkable cases)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from spec import (
    CtaSchedule,
    InvalidProblem,
    OrderKind,
    Problem,
    ScanOrder,
    Tensor,
    TileGrid,
    Tiles,
    WorkOrder,
    build_trace,
    dispatch,
    get_arch,
    known_archs,
    visit_order,
)
from spec.arch import UnknownArch
from spec.schedules import ScheduleKind, section_heads

ORDERS = [ScanOrder.linear(), ScanOrder.sawtooth(), ScanOrder.sawtooth(2), ScanOrder.reverse(),
          ScanOrder.block_parity()]
SCHEDULES = [CtaSchedule.grid(), CtaSchedule.tile_x(2), CtaSchedule.tile_x(3),
             CtaSchedule.persistent(1), CtaSchedule.persistent(5),
             CtaSchedule.persistent(5, WorkOrder.HEAD_MAJOR), CtaSchedule.longest_first(4),
             CtaSchedule.snake(3), CtaSchedule.snake(5, WorkOrder.HEAD_MAJOR),
             CtaSchedule.persistent(1000), CtaSchedule.sectioned_longest_first(1),
             CtaSchedule.sectioned_longest_first(2), CtaSchedule.sectioned_longest_first(4)]
PROBLEMS = [Problem(2, 3, 320, 64), Problem(2, 3, 320, 64, causal=True),
            Problem(1, 4, 300, 128, S_kv=333, H_kv=2),
            Problem(1, 4, 300, 128, S_kv=333, causal=True),
            Problem(1, 2, 200, 64, S_kv=130, causal=True)]
TILES = [Tiles(64, 64), Tiles(128, 64), Tiles(64, 128), Tiles(80, 80)]


def expected_pairs(g: TileGrid) -> set:
    return {(b, h, i, j) for b in range(g.problem.B) for h in range(g.problem.H)
            for i in range(g.n_q) for j in range(g.kv_tiles_for(i))}


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.label)
@pytest.mark.parametrize("tiles", TILES, ids=lambda t: t.label)
def test_every_schedule_and_order_visits_each_pair_once(problem, tiles):
    g = TileGrid(problem, tiles)
    want = expected_pairs(g)
    for sched, order in itertools.product(SCHEDULES, ORDERS):
        v = visit_order(g, sched, order)
        got = list(zip(v.b.tolist(), v.h.tolist(), v.q.tolist(), v.kv.tolist()))
        assert len(got) == len(want), (sched.label, order.label)
        assert set(got) == want, (sched.label, order.label)


def test_causal_pairs_are_at_or_below_the_diagonal():
    g = TileGrid(Problem(1, 1, 256, 64, causal=True), Tiles(64, 64))
    v = visit_order(g, CtaSchedule.grid(), ScanOrder.sawtooth())
    assert np.all(v.kv <= v.q)
    assert len(v.kv) == 4 * 5 // 2


def test_sawtooth_flips_direction_on_the_ctas_own_sequence():
    g = TileGrid(Problem(1, 1, 4 * 64, 64), Tiles(64, 64))
    t = visit_order(g, CtaSchedule.persistent(1), ScanOrder.sawtooth()).table()[0]
    assert t[:, 3].tolist() == [0, 1, 2, 3, 3, 2, 1, 0, 0, 1, 2, 3, 3, 2, 1, 0]
    t2 = visit_order(g, CtaSchedule.persistent(1), ScanOrder.sawtooth(2)).table()[0]
    assert t2[:, 3].tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 3, 2, 1, 0, 3, 2, 1, 0]


def test_block_parity_uses_the_cta_index_not_its_sequence():
    g = TileGrid(Problem(1, 1, 4 * 64, 64), Tiles(64, 64))
    t = visit_order(g, CtaSchedule.persistent(2), ScanOrder.block_parity()).table()
    assert t[0, :, 3].tolist() == [0, 1, 2, 3] * 2          # CTA 0: always forward
    assert t[1, :, 3].tolist() == [3, 2, 1, 0] * 2          # CTA 1: always backward


def test_causal_reversal_stays_inside_the_valid_range():
    g = TileGrid(Problem(1, 1, 3 * 64, 64, causal=True), Tiles(64, 64))
    t = visit_order(g, CtaSchedule.persistent(1), ScanOrder.sawtooth()).table()[0]
    # q=0: [0]; q=1 (2nd tile, backward): [1, 0]; q=2 (3rd, forward): [0, 1, 2]
    assert t[:, 2:].tolist() == [[0, 0], [1, 1], [1, 0], [2, 0], [2, 1], [2, 2]]


def test_grid_is_q_fastest_then_head_and_tile_x_groups_consecutive_q():
    g = TileGrid(Problem(1, 2, 3 * 64, 64), Tiles(64, 64))
    v = visit_order(g, CtaSchedule.grid(), ScanOrder.linear()).table()
    assert ([tuple(v[c, 0, 1:3]) for c in range(6)]
            == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)])
    t = visit_order(g, CtaSchedule.tile_x(2), ScanOrder.linear()).table()
    assert t.shape[0] == 4                                   # ceil(3/2) groups x 2 heads
    assert [t[0, s, 2] for s in (0, 3)] == [0, 1] and t[1, 0, 2] == 2 and t[1, 3, 2] == -1


def test_head_major_and_longest_first_work_orders():
    g = TileGrid(Problem(1, 2, 2 * 64, 64, causal=True), Tiles(64, 64))
    v = visit_order(g, CtaSchedule.persistent(4, WorkOrder.HEAD_MAJOR), ScanOrder.linear()).table()
    assert [tuple(v[c, 0, 1:3]) for c in range(4)] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    lpt = visit_order(g, CtaSchedule.longest_first(4), ScanOrder.linear()).table()
    # longest first (q = 1 of both heads, then q = 0), heads fastest
    assert [tuple(lpt[c, 0, 1:3]) for c in range(4)] == [(0, 1), (1, 1), (0, 0), (1, 0)]
    # the snake deal: with P = 3 the second round starts at the last CTA
    items = CtaSchedule.longest_first(3).work_items(g)
    got = {(int(c), int(i)): (int(b), int(q))
           for c, i, b, q in zip(items.cta, items.iter, items.bh, items.q)}
    assert got == {(0, 0): (0, 1), (1, 0): (1, 1), (2, 0): (0, 0), (2, 1): (1, 0)}


def test_snake_deals_the_static_rounds_in_alternating_order():
    """SNAKE takes the same rounds of P consecutive items as the static grid-stride, q-major or
    head-major, but odd rounds go to the CTAs in reverse (hand-written: B*H = 2, n_q = 3, P = 4)."""
    g = TileGrid(Problem(1, 2, 3 * 64, 64, causal=True), Tiles(64, 64))
    s = CtaSchedule.snake(4)
    assert s.is_persistent and s.grid_size(g) == 4 and s.label == "snake4"
    items = s.work_items(g)
    got = {(int(c), int(i)): (int(b), int(q))
           for c, i, b, q in zip(items.cta, items.iter, items.bh, items.q)}
    # round 0: items 0..3 = (0,0) (0,1) (0,2) (1,0) to CTAs 0..3; round 1: items 4, 5 = (1,1)
    # (1,2) to CTAs 3, 2
    assert got == {(0, 0): (0, 0), (1, 0): (0, 1), (2, 0): (0, 2), (3, 0): (1, 0),
                   (3, 1): (1, 1), (2, 1): (1, 2)}
    head = CtaSchedule.snake(4, WorkOrder.HEAD_MAJOR).work_items(g)
    assert sorted(zip(head.cta.tolist(), head.iter.tolist(), head.bh.tolist(), head.q.tolist())) \
        == [(0, 0, 0, 0), (1, 0, 1, 0), (2, 0, 0, 1), (2, 1, 1, 2), (3, 0, 1, 1), (3, 1, 0, 2)]
    assert CtaSchedule.parse("snake4h") == CtaSchedule.snake(4, WorkOrder.HEAD_MAJOR)
    assert CtaSchedule.parse("snake4").label == "snake4"


def test_sectioned_longest_first_grid():
    """One CTA per item; within each section of G heads the longest Q tiles first, heads fastest;
    the last section holds the heads left over (B*H = 3, G = 2: sections {0, 1} and {2})."""
    g = TileGrid(Problem(1, 3, 3 * 64, 64, causal=True), Tiles(64, 64))
    s = CtaSchedule.sectioned_longest_first(2)
    assert s.grid_size(g) == 9 and not s.is_persistent and s.label == "glpt2"
    v = visit_order(g, s, ScanOrder.linear()).table()
    assert [tuple(v[c, 0, 1:3]) for c in range(9)] == [
        (0, 2), (1, 2), (0, 1), (1, 1), (0, 0), (1, 0), (2, 2), (2, 1), (2, 0)]
    # G >= B*H: one section, every head's longest tile first
    one = visit_order(g, CtaSchedule.sectioned_longest_first(8), ScanOrder.linear()).table()
    assert [int(one[c, 0, 2]) for c in range(9)] == [2, 2, 2, 1, 1, 1, 0, 0, 0]
    for bad in (0, -1, 2.0, None):
        with pytest.raises(ValueError, match="G >= 1"):
            CtaSchedule(ScheduleKind.SECTIONED_LONGEST_FIRST, section=bad)
    with pytest.raises(ValueError, match="section only applies"):
        CtaSchedule(ScheduleKind.GRID, section=2)


def test_section_heads_fit_half_the_l2():
    """G = the most heads whose K+V fit in half the L2, a power of two, at least 1; a K/V head
    shared by a group of query heads counts once per group."""
    l2 = 50 * 2**20
    # S=512, D=128, fp16: 256 KiB of K+V per head; 25 MiB hold 100 -> 64
    assert section_heads(Problem(32, 16, 512, 128), l2) == 64
    assert section_heads(Problem(1, 16, 16384, 128), l2) == 2          # 8 MiB per head: 3 -> 2
    assert section_heads(Problem(1, 16, 131072, 128), l2) == 1         # 64 MiB: none fits -> 1
    # GQA, 8 query heads per K/V head: 1 MiB per query head -> 25 -> 16
    assert section_heads(Problem(2, 32, 16384, 128, H_kv=4), l2) == 16


def test_load_balance_of_persistent_schedules():
    """The static grid-stride cannot balance causal work where P is close to n_q (S=16K, 128-row
    tiles: CTA c's Q tiles are (c + 4r) mod 128); longest-first with the snake deal can."""
    g = TileGrid(Problem(1, 16, 16384, 128, causal=True), Tiles(128, 64))
    static, lpt = CtaSchedule.persistent(132), CtaSchedule.longest_first(132)
    assert static.load_balance(g) > 1.5
    assert lpt.load_balance(g) < 1.01
    assert CtaSchedule.grid().load_balance(g) == 1.0
    full = TileGrid(Problem(1, 16, 16384, 128), Tiles(128, 64))      # equal items: both balance
    assert static.load_balance(full) < 1.07 and lpt.load_balance(full) < 1.07
    # short heads, P a multiple of n_q (S=512, 64-row tiles: n_q = 8, P = 264): the static deal
    # gives CTA c Q tile c mod 8 in every round; the snake pairs q with 7 - q
    short = TileGrid(Problem(32, 16, 512, 128, causal=True), Tiles(64, 128))
    assert CtaSchedule.persistent(264).load_balance(short) > 1.6
    assert CtaSchedule.snake(264).load_balance(short) < 1.05
    # long heads (n_q = 128 > P / 2): no pairing, the snake is as unbalanced as the static deal
    assert CtaSchedule.snake(132).load_balance(g) > 1.5


def test_trace_counts_every_tile_access():
    p = Problem(2, 2, 200, 64, S_kv=250, H_kv=1, causal=True)
    g = TileGrid(p, Tiles(64, 64))
    tr = build_trace(g, CtaSchedule.tile_x(2), ScanOrder.sawtooth(), resident=3)
    d = tr.decode()
    n_pairs = sum(g.kv_tiles_for(i) for i in range(g.n_q)) * p.B * p.H
    assert (d["tensor"] == Tensor.K).sum() == n_pairs == (d["tensor"] == Tensor.V).sum()
    assert (d["tensor"] == Tensor.Q).sum() == g.n_work == (d["tensor"] == Tensor.O).sum()
    assert set(d["h"][d["tensor"] == Tensor.K].tolist()) == {0}      # GQA: one K/V head
    k = d["tensor"] == Tensor.K
    assert d["bytes"][k].min() == (250 - 192) * 64 * 2                 # ragged last K/V tile
    assert d["bytes"][d["tensor"] == Tensor.Q].min() == (200 - 192) * 64 * 2
    assert tr.total_sectors() == int(d["bytes"].sum()) // 32


def test_trace_interleaves_resident_ctas_in_lock_step():
    g = TileGrid(Problem(1, 1, 2 * 64, 64), Tiles(64, 64))
    tr = build_trace(g, CtaSchedule.persistent(2), ScanOrder.linear(), resident=2)
    d = tr.decode()
    seq = list(zip(d["tensor"].tolist(), d["tile"].tolist()))
    Q, K, V, O = Tensor.Q, Tensor.K, Tensor.V, Tensor.O
    assert seq == [(Q, 0), (K, 0), (V, 0), (Q, 1), (K, 0), (V, 0),
                   (K, 1), (V, 1), (O, 0), (K, 1), (V, 1), (O, 1)]


def test_causal_wavefronts_drift_a_finished_cta_starts_its_next_item_at_once():
    g = TileGrid(Problem(1, 1, 4 * 64, 64, causal=True), Tiles(64, 64))
    tr = build_trace(g, CtaSchedule.persistent(2), ScanOrder.linear(), resident=2)
    d = tr.decode()
    q_loads = np.flatnonzero(d["tensor"] == Tensor.Q)
    # CTA0 does q0 (1 step) then q2 (3 steps); CTA1 does q1 (2 steps) then q3 (4 steps).
    # step 0: Q0 K0 V0 O0 | Q1 K0 V0; step 1: Q2 K0 V0 | K1 V1 O1; step 2: K1 V1 | Q3 K0 V0
    assert d["tile"][q_loads].tolist() == [0, 1, 2, 3]
    assert q_loads.tolist() == [0, 4, 7, 15]


def test_dispatch_gives_freed_slots_to_the_next_cta_in_launch_order():
    slot, start = dispatch(np.array([3, 1, 2, 2]), resident=2)
    assert slot.tolist() == [0, 1, 1, 0] and start.tolist() == [0, 0, 1, 3]
    slot, start = dispatch(np.array([2, 2, 2]), resident=2)
    assert slot.tolist() == [0, 1, 0] and start.tolist() == [0, 0, 2]


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: o.label)
def test_labels_round_trip(order):
    assert ScanOrder.parse(order.label) == order
    for s in SCHEDULES:
        assert CtaSchedule.parse(s.label) == s


def test_bad_vocabulary_is_rejected_with_a_reason():
    with pytest.raises(InvalidProblem, match="head dim D=96"):
        Problem(1, 1, 128, 96)
    with pytest.raises(InvalidProblem, match="B=0"):
        Problem(0, 1, 128, 64)
    with pytest.raises(InvalidProblem, match="multiple of H_kv"):
        Problem(1, 3, 128, 64, H_kv=2)
    with pytest.raises(InvalidProblem, match="dtype"):
        Problem(1, 1, 128, 64, dtype="fp8")
    with pytest.raises(InvalidProblem, match="multiple of 16"):
        Tiles(72, 64)
    with pytest.raises(ValueError, match="num_ctas"):
        CtaSchedule.persistent(0)
    with pytest.raises(ValueError, match="unknown scan order"):
        ScanOrder.parse("zigzag")
    with pytest.raises(UnknownArch, match="known: gb10, h100, h200, b200, b300"):
        get_arch("a100")


def test_arch_registry():
    assert set(known_archs()) == {"gb10", "h100", "h200", "b200", "b300"}
    gb10 = get_arch("gb10")
    assert (gb10.num_sms, gb10.l2_bytes, gb10.sm) == (48, 24 << 20, "sm_121")
    assert get_arch("h100").sm == "sm_90" and get_arch("h200").l2_bytes == 60 << 20
    assert all(get_arch(a).sector_bytes == 32 and get_arch(a).line_bytes == 128
               for a in known_archs())
    assert OrderKind.SAWTOOTH == 1


def test_every_metric_has_a_unit():
    from spec.records import UNITS, Metric
    names = {k: v for k, v in vars(Metric).items() if k.isupper()}
    assert len(names) >= 17 and len(set(names.values())) == len(names)   # distinct metric names
    missing = sorted(k for k, v in names.items() if v not in UNITS)
    assert not missing, f"Metric constants without a unit in UNITS: {missing}"
    assert set(UNITS) == set(names.values())          # and no unit for a name that is not a Metric
    assert UNITS[Metric.CTA_START_SPREAD_NS] == UNITS[Metric.STEP_NS] == "ns"


def test_case_round_trips_through_json_with_every_knob():
    """The profiling target rebuilds cases from JSON: a knob lost there would profile another
    build under the case's id."""
    import json

    from spec import Backend, CtaSchedule, Problem, ScanOrder, Tiles, Variant
    from spec.case import Case, case_from_dict, case_to_dict
    for v in (Variant(Backend.CUDA, ScanOrder.sawtooth(), CtaSchedule.persistent(96),
                      Tiles(80, 80), stages=1),
              Variant(Backend.CUTILE, ScanOrder.linear(), CtaSchedule.tile_x(2), Tiles(64, 64),
                      occupancy=2, level=4)):
        c = Case(Problem(B=2, H=4, S_q=1000, S_kv=3000, H_kv=2, D=64, causal=True), v, 96, "p")
        back = case_from_dict(json.loads(json.dumps(case_to_dict(c))))
        assert back == c and back.id == c.id


def test_published_limits_give_hand_computed_occupancy():
    """sm_121 (GB10): 65536 registers, 102400 B of shared memory and 1536 threads per SM, 1 KB
    reserved per CTA. 256 threads x 128 registers: 8 warps of 4096 registers, two CTAs fill the
    four 16384-register sub-partitions exactly; 42108 B of static shared memory fits twice
    (2 x 43132 = 86264), 50340 B once (2 x 51364 = 102728 > 102400); 128 threads x 64 registers,
    20000 B: 4 by shared memory
    (4 x 21024 = 84096, 5 x 21024 > 102400), 12 by threads, 8 by registers -> 4."""
    from dataclasses import replace

    from spec.family import published_limits
    gb10 = published_limits(get_arch("gb10"))
    assert gb10.ctas_per_sm(256, 128, 42108) == 2
    assert gb10.ctas_per_sm(256, 128, 50340) == 1
    assert gb10.ctas_per_sm(128, 64, 20000) == 4
    assert published_limits(get_arch("h100")).ctas_per_sm(256, 128, 98496) == 2
    with pytest.raises(ValueError, match="no published SM limits for sm_80"):
        published_limits(replace(get_arch("h100"), name="a100", sm="sm_80"))


def test_a_variants_tactic_is_in_its_id_and_only_where_it_can_be_built():
    """The forward's TACTIC bits name the build: ``.t<N>`` in the id (none when 0, so older ids
    stay), parsed back and carried through the profiling target's case dict; a tactic on another
    scan order, on the CUDA family or on a backward pass is refused with the reason."""
    from spec.case import Case, case_from_dict, case_to_dict
    from spec.variant import Variant
    pr = Problem(16, 12, 512, 64)
    vid = "cutile.linear.static264.m64n128d64.occ2.t4096"
    v, d = Variant.parse(vid)
    assert v.tactic == 4096 and d == 64 and v.id(pr) == vid
    assert Variant.parse("cutile.linear.static264.m64n128d64.occ2")[0].tactic == 0
    c = Case(pr, v, 264, "p")
    assert case_from_dict(case_to_dict(c)) == c
    assert "tactic" not in case_to_dict(Case(pr, Variant.parse(vid[:-6])[0], 264, "p"))["variant"]
    for bad in ("cutile.sawtooth.static264.m64n128d64.occ2.t4096",
                "cuda.linear.grid.m64n128d64.t4096", "cutile.linear.grid.m64n64d64.t1.dq"):
        with pytest.raises(ValueError, match="linear scan only"):
            Variant.parse(bad)
    with pytest.raises(ValueError, match="0..65535"):
        Variant.parse("cutile.linear.grid.m64n64d64.t70000")

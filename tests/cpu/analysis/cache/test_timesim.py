"""The timed L2 simulator: its lock-step limit, a hand-computed miss cost, the two partitions and
the merge window."""
import numpy as np
import pytest

from analysis.cache import l2sim, replacement, timesim
from analysis.cache.timesim import TimeParams
from spec import CtaSchedule, Problem, ScanOrder, TileGrid, Tiles
from spec.trace import build_trace, work_table

KiB = 1024
TILE = 256          # sectors of one 64x64 fp16 tile at D=64


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sched,resident", [
    (CtaSchedule.persistent(20), 20), (CtaSchedule.tile_x(2), 24),
    (CtaSchedule.longest_first(16), 16), (CtaSchedule.grid(), 24),
    (CtaSchedule.persistent(13), 13)])
@pytest.mark.parametrize("order", [ScanOrder.linear(), ScanOrder.sawtooth(),
                                   ScanOrder.sawtooth(2), ScanOrder.block_parity()])
def test_lockstep_limit_equals_l2sim_bit_for_bit(causal, sched, resident, order):
    g = TileGrid(Problem(2, 4, 2048, 64, H_kv=2, causal=causal), Tiles(64, 32))
    tab = work_table(g, sched, order)
    tr = build_trace(g, sched, order, resident)
    assert tab.n_accesses == tr.n_accesses
    for cap in (0, 96 * KiB, 700 * KiB, 4 << 20):
        a = l2sim.simulate(tr, cap)
        b = timesim.simulate(tab, resident, TimeParams(cap))
        assert (b.tex_sectors, b.tex_hits, b.tex_misses, b.cold_misses) == \
            (a.sectors, a.hits, a.misses, a.cold_misses)


def _two_ctas(n_q=2):
    """Two persistent CTAs, one head, S = 64·n_q, 64x64 tiles (n_kv = n_q)."""
    return work_table(TileGrid(Problem(1, 1, 64 * n_q, 64), Tiles(64, 64)),
                      CtaSchedule.persistent(2), ScanOrder.linear())


def test_two_ctas_hand_computed_miss_cost():
    # t=0: CTA0 misses Q0, K0, V0 (fills done at 3); CTA1 misses Q1 and finds K0, V0 in flight:
    # hits that wait until 3. t=3: CTA0 misses K1, V1 and stores O0; CTA1 waits on K1, V1 and
    # stores O1. Both end at 6. 12 accesses: 8 misses, 4 hits on tiles in flight.
    c = timesim.simulate(_two_ctas(), 2, TimeParams(1 << 20, miss_ratio=3.0))
    assert c.tex_sectors == 12 * TILE
    assert c.tex_misses == 8 * TILE and c.cold_misses == 8 * TILE
    assert c.tex_hits == c.inflight_hits == 4 * TILE
    assert c.makespan == 6.0
    assert c.dram_fills == 6 * TILE            # the O stores read nothing
    assert timesim.simulate(_two_ctas(), 2, TimeParams(1 << 20)).makespan == 2.0


def test_dram_queue_hand_computed():
    # DRAM streams one tile per hit step: each fill queues behind the fills before it. t=0: CTA0's
    # Q0, K0, V0 are ready at 1, 2, 3; CTA1's Q1 at 4 (K0, V0 in flight: merged, ready at 2, 3).
    # t=3: CTA0's K1, V1 at 5, 6; t=4: CTA1 waits on them. Both end at 6, as with a miss cost of 3
    # above, but here from the queue: the counts are those of the free-bandwidth run.
    free = timesim.simulate(_two_ctas(), 2, TimeParams(1 << 20))
    q = timesim.simulate(_two_ctas(), 2, TimeParams(1 << 20, dram_step_sectors=TILE))
    assert q.makespan == 6.0 and free.makespan == 2.0
    assert (q.tex_misses, q.inflight_hits, q.dram_fills) == (8 * TILE, 4 * TILE, 6 * TILE)
    assert (free.tex_misses, free.dram_fills) == (q.tex_misses, q.dram_fills)
    fast = timesim.simulate(_two_ctas(), 2, TimeParams(1 << 20, dram_step_sectors=100 * TILE))
    assert fast.makespan == 2.0                # bandwidth to spare: no queueing


def test_jitter_spreads_and_miss_cost_reconvoys():
    # 8 CTAs scan one head's 64 K/V tiles (2 MiB) through a 64 KiB cache (4 tiles): only the
    # wavefront shares. Jitter alone spreads the CTAs and the misses grow; a miss cost makes a
    # drifted leader wait for its fill while the followers catch up on hits (a convoy), which
    # restores the lock-step count here.
    g = TileGrid(Problem(1, 1, 4096, 64), Tiles(64, 64))
    tab = work_table(g, CtaSchedule.persistent(8), ScanOrder.linear())
    base = timesim.simulate(tab, 8, TimeParams(64 * KiB))
    drift = timesim.simulate(tab, 8, TimeParams(64 * KiB, jitter=0.1, seed=1))
    convoy = timesim.simulate(tab, 8, TimeParams(64 * KiB, miss_ratio=4.0, jitter=0.1, seed=1))
    assert drift.tex_sectors == base.tex_sectors
    assert drift.tex_misses > 2 * base.tex_misses
    assert convoy.tex_misses < drift.tex_misses
    assert convoy.makespan > drift.makespan
    again = timesim.simulate(tab, 8, TimeParams(64 * KiB, jitter=0.1, seed=1))
    assert again == drift                      # seeded: reproducible


def test_partitions_hand_made_duplication():
    # CTA0 on partition 0, CTA1 on partition 1; each tile is two halves of 128 sectors, half h
    # homed in partition h. t=0, CTA0 reads Q0, K0, V0: its home halves miss to DRAM, the other
    # halves miss locally, miss at home over the fabric, and fill both partitions.
    # CTA1 reads Q1 (the same, new tile) and K0, V0: half 1 (its home) hits the line CTA0's
    # fabric miss filled; half 0 misses locally and hits at home over the fabric: a second copy.
    c = timesim.simulate(_two_ctas(), 2, TimeParams(1 << 20, partitions=2))
    # t=1: the same with K1, V1, and each CTA stores its O tile (new: like Q).
    # 8 new tiles (Q0 K0 V0 K1 V1 O0 Q1 O1): 256 tex misses and 128 fabric misses each;
    # 4 shared reads (CTA1's K0 V0 K1 V1): 128 local misses that hit at home, 128 local hits.
    h = TILE // 2
    assert c.tex_sectors == 12 * TILE
    assert c.tex_misses == 8 * TILE + 4 * h
    assert c.fabric_sectors == 8 * h + 4 * h
    assert c.fabric_hits == 4 * h and c.fabric_misses == 8 * h
    assert c.dram_fills == 6 * TILE           # every loaded tile read once; stores read nothing
    assert c.tex_hits == 4 * h


def test_partitions_duplicate_capacity():
    # Two CTAs (one per partition) re-scan one head's K/V of 16 tiles: 16 * 2 * 8 KiB = 256 KiB.
    # One partition of 384 KiB holds it (cold misses only); two of 192 KiB each must each hold
    # the whole K/V (home halves + copies of the others), which does not fit: capacity misses.
    tab = _two_ctas(16)
    one = timesim.simulate(tab, 2, TimeParams(384 * KiB))
    two = timesim.simulate(tab, 2, TimeParams(384 * KiB, partitions=2))
    assert one.tex_misses == one.cold_misses
    assert two.tex_misses > two.cold_misses
    assert two.dram_fills > one.dram_fills
    big = timesim.simulate(tab, 2, TimeParams(2 * 384 * KiB, partitions=2))
    assert big.dram_fills == one.dram_fills   # twice the capacity: duplication fits again


def test_merge_window():
    # lock-step: CTA1 requests K0/V0 at t=0 and K1/V1 at t=1, each at the same time as CTA0:
    # with a window of half a step they are coalesced before the L2 and not counted at all.
    no = timesim.simulate(_two_ctas(), 2, TimeParams(1 << 20))
    yes = timesim.simulate(_two_ctas(), 2, TimeParams(1 << 20, merge_window=0.5))
    assert no.tex_sectors == 12 * TILE and no.tex_hits == 4 * TILE and no.merged_sectors == 0
    assert yes.merged_sectors == 4 * TILE
    assert yes.tex_sectors == 8 * TILE and yes.tex_hits == 0 and yes.tex_misses == no.tex_misses
    # n_q = 4: CTA0 runs q0 then q2, CTA1 q1 then q3, 4 steps each: every K/V tile is requested
    # by both CTAs at t = kv and again at t = 4 + kv. A 1.5-step window joins only the
    # same-time requests (16 of 32); a 5-step window also joins the second item's to the first's
    # (the window runs from the last request that reached the L2): 24 of 32.
    tab = _two_ctas(4)
    merged = [timesim.simulate(tab, 2, TimeParams(1 << 20, merge_window=w)).merged_sectors
              for w in (1.5, 5.0)]
    assert merged == [16 * TILE, 24 * TILE]


def test_sampling_unbiased_roughly_and_stated():
    g = TileGrid(Problem(2, 1, 8192, 64), Tiles(64, 64))
    tab = work_table(g, CtaSchedule.persistent(16), ScanOrder.sawtooth())
    exact = timesim.simulate(tab, 16, TimeParams(1 << 20))
    samp = timesim.simulate(tab, 16, TimeParams(1 << 20, sample_rate=0.25))
    assert "SHARDS R=0.25" in samp.params.note()
    assert abs(samp.tex_sectors / exact.tex_sectors - 1) < 0.1
    assert abs(samp.tex_misses / exact.tex_misses - 1) < 0.15


def test_systematic_sample_is_uniform_along_a_scan():
    # rate 1/4 over 10 tiles of 2 halves: tile k is in iff floor((k+1)/4 + 1/2) > floor(k/4 + 1/2),
    # i.e. tiles 1, 5 and 9, each with both halves (sub-keys 2k, 2k+1)
    assert np.flatnonzero(timesim.sampled_subkeys(20, 0.25, 2)).tolist() == [2, 3, 10, 11, 18, 19]
    # every window of n consecutive ids holds floor(R n) or ceil(R n) samples (a hashed sample's
    # windows vary binomially around R n)
    c = np.concatenate([[0], np.cumsum(timesim.sampled_subkeys(100_000, 0.1))])
    for n in (7, 100, 999):
        w = c[n:] - c[:-n]
        assert w.min() == int(0.1 * n) and w.max() == -(-n // 10)


@pytest.mark.parametrize("bad", [dict(miss_ratio=0.5), dict(jitter=-1), dict(partitions=3),
                                 dict(sample_rate=0), dict(merge_window=-1),
                                 dict(rate_jitter=-0.1), dict(placement=""),
                                 dict(replacement="plru"), dict(ways=-1),
                                 dict(ways=4, replacement="srrip"), dict(dram_step_sectors=-1),
                                 dict(dram_step_sectors=float("inf"))])
def test_bad_params(bad):
    with pytest.raises(ValueError):
        TimeParams(1 << 20, **bad)


def _replay(lookup, seq, cap, srrip):
    """Hits of ``lookup`` over ``seq`` (entry ids, weight 1) in one partition of ``cap``."""
    n = max(seq) + 1
    lists = 4 if srrip else 1
    prev, nxt = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    head, tail = np.full(lists, -1, np.int64), np.full(lists, -1, np.int64)
    pb, age = np.zeros(n, np.int64), np.zeros(1, np.int64)
    present, occ = np.zeros(n, np.bool_), np.zeros(1, np.int64)
    cap_a, w = np.array([cap], np.int64), np.ones(n, np.int64)
    return [bool(replacement.access(srrip, j, 0, 1, prev, nxt, head, tail, pb, age, present, occ,
                                 cap_a, w, 0)) for j in seq]   # partition 0: base 0


def test_srrip_keeps_re_referenced_lines_where_lru_keeps_recent_ones():
    # Three entries fit. A B C A D E F A D, by hand:
    # LRU: A B C miss, A hits (MRU); D evicts B, E evicts C, F evicts A (the least recent);
    #      A misses (evicts D), D misses: one hit.
    # SRRIP (insert at RRPV 2, hit -> 0, evict the oldest RRPV 3, age all when there is none):
    #      A B C miss at 2; A hits -> 0; D: age (A 1, B 3, C 3), evict B, D at 2; E: evict C,
    #      E at 2; F: age (A 2, D 3, E 3), evict D (older in its list), F at 2; A hits (the
    #      re-referenced line survived); D misses: evicts E (RRPV 3). Two hits.
    A, B, C, D, E, F = range(6)
    seq = [A, B, C, A, D, E, F, A, D]
    lru = _replay(replacement._lookup, seq, 3, False)
    srrip = _replay(replacement._lookup_srrip, seq, 3, True)
    assert lru == [False, False, False, True, False, False, False, False, False]
    assert srrip == [False, False, False, True, False, False, False, True, False]


def test_srrip_evicts_a_leaders_unread_lines_before_its_followers_reach_them():
    # Why SRRIP and not LRU matters for the wavefront: 4 CTAs on one partition scan a head's
    # K/V cyclically (footprint 4x the cache), the followers a little behind the leader (per-step
    # jitter). Both policies give the lone CTA's thrash (every access misses); with followers,
    # SRRIP's protection of re-referenced lines evicts lines the leader just brought in before
    # the followers read them, so the followers miss more than under LRU.
    g = TileGrid(Problem(1, 1, 64 * 256, 64), Tiles(64, 64))
    one = work_table(g, CtaSchedule.persistent(1), ScanOrder.linear())
    four = work_table(g, CtaSchedule.persistent(4), ScanOrder.linear())
    cap = 2 * 256 * 64 * 64 * 2 // 4          # a quarter of the K/V footprint
    p = dict(jitter=0.05, seed=3, stores_miss=False)
    for r in ("lru", "srrip"):
        c = timesim.simulate(one, 1, TimeParams(cap, replacement=r, **p))
        assert c.tex_misses == c.tex_sectors - 256 * TILE   # all K/V and Q miss, stores hit
    lru = timesim.simulate(four, 4, TimeParams(cap, **p))
    srrip = timesim.simulate(four, 4, TimeParams(cap, replacement="srrip", **p))
    assert srrip.tex_sectors == lru.tex_sectors
    assert srrip.tex_misses > lru.tex_misses
    assert "replacement=srrip" in srrip.params.note()


def test_stores_never_miss():
    # The two-CTA case with miss cost 3 (above), stores as the H100 counts them: O0 and O1 are
    # lookups that hit (a store of whole sectors needs no fill). 12 accesses: the 6 loaded tiles
    # miss once each; CTA1's 4 reads of tiles in flight and the 2 stores hit. Timing unchanged.
    c = timesim.simulate(_two_ctas(), 2, TimeParams(1 << 20, miss_ratio=3.0, stores_miss=False))
    assert c.tex_sectors == 12 * TILE
    assert c.tex_misses == c.cold_misses == 6 * TILE
    assert c.tex_hits == 6 * TILE and c.inflight_hits == 4 * TILE
    assert c.dram_fills == 6 * TILE and c.makespan == 6.0
    assert "stores_miss=no" in c.params.note()


def test_measured_placement_puts_both_ctas_on_one_partition():
    # The H100 map (profiles/h100/smmap-20261123): a launch of 2 CTAs runs both on one side, so
    # the two-partition L2 behaves like one for their sharing: CTA1 finds both halves of K0..V1
    # locally (4 tiles, all hits) instead of fetching half of each across the fabric. Every loaded
    # tile: its home-side half misses to DRAM, its other half misses locally and at home (fabric
    # miss, 6 x 128 sectors); the 2 stores hit locally and, for their far half, at home.
    h = TILE // 2
    c = timesim.simulate(_two_ctas(), 2, TimeParams(1 << 20, partitions=2, placement="h100",
                                                    stores_miss=False))
    assert c.tex_misses == 6 * TILE and c.tex_hits == 4 * TILE + 2 * TILE
    assert c.fabric_misses == 6 * h and c.fabric_hits == 2 * h and c.fabric_sectors == 8 * h
    assert c.dram_fills == 6 * TILE
    alt = timesim.simulate(_two_ctas(), 2, TimeParams(1 << 20, partitions=2, stores_miss=False))
    assert alt.tex_misses == 6 * TILE + 4 * h      # alternate: CTA1 across the chip, 4 far halves


def test_slot_partitions_from_the_measured_map():
    from analysis.cache.smmap import slot_partitions
    assert slot_partitions("alternate", 5, 2).tolist() == [0, 1, 0, 1, 0]
    assert slot_partitions("h100", 7, 1).tolist() == [0] * 7
    assert slot_partitions("h100", 8, 2).tolist() == [0] * 8
    p132 = slot_partitions("h100", 132, 2)          # CTAs 0-15 and 64-113 on one side
    assert p132[:16].tolist() == [0] * 16 and p132[16:64].tolist() == [1] * 48
    assert p132.sum() == 66
    assert slot_partitions("h100", 100, 2).tolist() == p132[:100].tolist()   # next larger launch
    with pytest.raises(ValueError, match="experiments.instruments.smmap"):
        slot_partitions("b200", 4, 2)


def test_rate_jitter_is_a_constant_speed_per_slot():
    # One CTA, no per-step jitter: every step lasts the slot's factor f, so the makespan is
    # exactly f * steps and doubling the work doubles it (linear drift, not a random walk).
    def one(n_q):
        tab = work_table(TileGrid(Problem(1, 1, 64 * n_q, 64), Tiles(64, 64)),
                         CtaSchedule.persistent(1), ScanOrder.linear())
        return timesim.simulate(tab, 1, TimeParams(1 << 24, rate_jitter=0.1, seed=3)).makespan
    m4, m8 = one(4), one(8)
    assert m4 != 16.0
    assert m8 == pytest.approx(4 * m4, rel=1e-12)   # 64 steps vs 16
    assert "rate_jitter=0.1" in TimeParams(1, rate_jitter=0.1).note()


def test_sampled_clocks_keep_the_exact_step_costs():
    # miss_ratio = 1: every step lasts exactly its slot's speed factor, whatever it loads. A
    # sampled run must keep that: an unsampled access costs at least a hit (a mean load below
    # one, from waits on fills under way, would make its steps short) and a skipped run of steps
    # costs the slot's factor per step. With constant per-slot speeds and no per-step jitter
    # the clocks, hence the makespan, then equal the exact run's up to rounding.
    tab = work_table(TileGrid(Problem(1, 2, 4096, 64), Tiles(64, 64)),
                     CtaSchedule.persistent(8), ScanOrder.linear())
    p = TimeParams(64 * KiB, rate_jitter=0.01, seed=5)
    exact = timesim.simulate(tab, 8, p)
    samp = timesim.simulate(tab, 8, TimeParams(64 * KiB, rate_jitter=0.01, seed=5,
                                               sample_rate=0.25))
    assert exact.makespan != 32 * 64                 # the speeds differ from 1
    assert samp.makespan == pytest.approx(exact.makespan, rel=1e-9)


# Counts recorded with the implementation before the speed work (commit 942f1c5): jittered and
# two-partition cases over several schedules, orders and mechanisms. The event order, the normal
# stream and every mechanism must reproduce them exactly (makespan included).
_RECORDED = [
    (Problem(2, 4, 4096, 64, H_kv=2, causal=True), CtaSchedule.tile_x(2), 24, ScanOrder.sawtooth(),
     TimeParams(1 << 20, partitions=2, placement="h100", stores_miss=False, jitter=0.011,
                rate_jitter=0.0004),
     (8781824, 4034368, 4747456, 712832, 0, 2788992, 1083136, 1705856, 3729856, 262144,
      1531.4971312099215)),
    (Problem(2, 4, 4096, 64, H_kv=2), CtaSchedule.persistent(20), 20, ScanOrder.linear(),
     TimeParams(1 << 20, partitions=2, miss_ratio=2.5, jitter=0.02, rate_jitter=0.01,
                merge_window=1.0),
     (2168576, 481024, 1687552, 477440, 14870784, 1081344, 475136, 606208, 1081344, 393216,
      8046.777107682709)),
    (Problem(1, 2, 3000, 64, causal=True), CtaSchedule.longest_first(16), 16,
     ScanOrder.sawtooth(2), TimeParams(700 * KiB, miss_ratio=3.0, jitter=0.05, seed=2),
     (1202944, 1019136, 183808, 741120, 0, 0, 0, 0, 159808, 96000, 685.0747749955124)),
]


@pytest.mark.parametrize("prob,sched,resident,order,params,expected", _RECORDED)
def test_exact_counts_equal_those_recorded_before_the_speedup(prob, sched, resident, order,
                                                              params, expected):
    c = timesim.simulate(work_table(TileGrid(prob, Tiles(64, 32)), sched, order), resident,
                         params)
    assert (c.tex_sectors, c.tex_hits, c.tex_misses, c.inflight_hits, c.merged_sectors,
            c.fabric_sectors, c.fabric_hits, c.fabric_misses, c.dram_fills, c.cold_misses,
            c.makespan) == expected


def test_pair_slowdown_slows_only_the_odd_sm_of_a_busy_pair():
    # The H100's measured placement puts 2 and 4 CTAs on even SMs alone in their pairs and 8 CTAs
    # on SMs 124-131 (four busy pairs). Non-causal, every CTA runs the same number of steps n, so
    # the makespan is n for the lone-pair launches and n * (1 + slowdown) once a pair is busy.
    from analysis.cache.smmap import slot_paired_odd
    assert [int(slot_paired_odd("h100", n).sum()) for n in (2, 4, 8, 132)] == [0, 0, 4, 66]
    assert not slot_paired_odd("alternate", 8).any()
    for ctas, slowed in ((4, False), (8, True)):
        tab = work_table(TileGrid(Problem(1, 1, 64 * ctas, 64), Tiles(64, 64)),
                         CtaSchedule.persistent(ctas), ScanOrder.linear())
        n = ctas                                      # one work item of `ctas` K/V steps each
        p = TimeParams(1 << 24, placement="h100", pair_slowdown=0.25)
        got = timesim.simulate(tab, ctas, p).makespan
        assert got == pytest.approx(n * (1.25 if slowed else 1.0), rel=1e-12)
    assert "pair_slowdown=0.25" in TimeParams(1, pair_slowdown=0.25).note()
    with pytest.raises(ValueError, match="pair_slowdown"):
        TimeParams(1, pair_slowdown=-0.1)


def test_measured_speeds_replace_the_pair_term():
    # Measured factors equal to what the pair term gives reproduce its counts and clocks exactly;
    # a slot measured 1.5x slower ends its 8 steps at 12; bad speeds are refused with the fix.
    from analysis.cache.smmap import slot_paired_odd
    tab = work_table(TileGrid(Problem(1, 1, 64 * 8, 64), Tiles(64, 64)),
                     CtaSchedule.persistent(8), ScanOrder.linear())
    pair = TimeParams(1 << 24, placement="h100", pair_slowdown=0.25)
    f = tuple(1.25 if odd else 1.0 for odd in slot_paired_odd("h100", 8))
    meas = TimeParams(1 << 24, placement="h100", speeds=f, speeds_source="test")
    a, b = timesim.simulate(tab, 8, pair), timesim.simulate(tab, 8, meas)
    assert (a.tex_misses, a.tex_hits, a.makespan) == (b.tex_misses, b.tex_hits, b.makespan)
    slow = TimeParams(1 << 24, speeds=(1.0,) * 7 + (1.5,), speeds_source="test")
    assert timesim.simulate(tab, 8, slow).makespan == pytest.approx(12.0, rel=1e-12)
    assert "speeds=measured(test)" in meas.note()
    with pytest.raises(ValueError, match="slots"):
        timesim.simulate(tab, 8, TimeParams(1 << 24, speeds=(1.0,) * 4, speeds_source="t"))
    with pytest.raises(ValueError, match="pair_slowdown=0"):
        TimeParams(1, speeds=f, speeds_source="t", pair_slowdown=0.1)
    with pytest.raises(ValueError, match="speeds_source"):
        TimeParams(1, speeds=f)
    with pytest.raises(ValueError, match="finite"):
        TimeParams(1, speeds=(1.0, 0.0), speeds_source="t")


def test_set_index_sizes_sets_by_ways_and_spreads_a_scan():
    w = np.full(4096, 8, dtype=np.int64)
    keep = np.ones(4096, dtype=bool)
    s0, n0 = timesim.set_index(w, keep, 8 * 1024, 0)
    assert n0 == 1 and not s0.any()                           # fully associative: one set
    s, n = timesim.set_index(w, keep, 8 * 1024, 16)
    assert n == 64                                             # 1024 entries / 16 ways
    counts = np.bincount(s, minlength=n)
    assert counts.min() > 0 and counts.max() < 2.5 * counts.mean()   # hashed, not clustered
    assert np.array_equal(s, timesim.set_index(w, keep, 8 * 1024, 16)[0])   # deterministic


def test_sets_turn_the_lru_cliff_into_a_slope():
    # One CTA scans a head's K/V once per Q tile (cyclic). Footprint below the capacity: the
    # fully associative LRU misses each tile once, hashed 2-way sets also conflict. Footprint
    # above: LRU misses every K/V access (the cliff), sets keep some tiles (the slope).
    g = TileGrid(Problem(1, 1, 64 * 32, 64), Tiles(64, 64))
    t = work_table(g, CtaSchedule.persistent(1), ScanOrder.linear())
    kv = 2 * 32 * TILE                                         # K+V sectors of the head
    p = dict(stores_miss=False)
    fits = int(kv * 1.25) * 32
    fa = timesim.simulate(t, 1, TimeParams(fits, **p))
    two = timesim.simulate(t, 1, TimeParams(fits, ways=2, **p))
    assert fa.tex_misses == fa.cold_misses
    assert two.tex_misses > fa.tex_misses
    assert "ways=2" in two.params.note() and "ways" not in fa.params.note()
    thrash = int(kv * 0.8) * 32
    fa = timesim.simulate(t, 1, TimeParams(thrash, **p))
    two = timesim.simulate(t, 1, TimeParams(thrash, ways=2, **p))
    assert fa.tex_misses == fa.tex_sectors - 32 * TILE        # every K/V and Q access misses
    assert two.tex_misses < fa.tex_misses


@pytest.mark.parametrize("pipeline", [False, True])
def test_every_simulated_row_names_the_model_version(pipeline):
    """The frozen model version (``timesim.MODEL_VERSION``) is in the note of every row the
    timed simulator writes, step model and pipeline model alike."""
    from spec import Backend, Variant
    from spec.case import Case
    v = Variant(Backend.CUDA, ScanOrder.sawtooth(), CtaSchedule.persistent(4), Tiles(64, 64))
    case = Case(Problem(1, 1, 1024, 64), v, 4, "test")
    tp = TimeParams(1 << 20, miss_ratio=3.0 if pipeline else 1.0, compute=float(pipeline),
                    hit_latency=0.5 if pipeline else 1.0, prefetch=int(pipeline),
                    step_source="test" if pipeline else "")
    rows = timesim.counts_to_rows(timesim.simulate_case(case, tp), case, run="r", study="s",
                                  arch="gb10", note="extra")
    assert timesim.MODEL_VERSION.startswith("pipeline-v")
    assert rows and all(f"model={timesim.MODEL_VERSION} " in r.note for r in rows)
    assert all(("pipeline(prefetch=1" in r.note) == pipeline for r in rows)

"""The pipeline model: each build's step, latencies and prefetch depth (analysis.models.steptime),
the event loop's prefetch (analysis.cache.timeloop), a hand-computed two-CTA case, the convoy
force it adds, and the reference steps read back from the committed runs."""
import statistics
from dataclasses import replace

import pytest

from analysis.cache import timesim
from analysis.cache.timesim import TimeParams
from analysis.data import csv_rows
from analysis.models import steptime
from analysis.models.timemodel import critical_steps
from spec import Backend, CtaSchedule, Problem, ScanOrder, TileGrid, Tiles, Variant, get_arch
from spec.case import Case
from spec.trace import work_table

TILE = 256          # sectors of one 64x64 fp16 tile at D=64


def _pipe(prefetch, hit, miss, cap=1 << 20):
    return TimeParams(cap, compute=1.0, hit_latency=hit, miss_ratio=miss, prefetch=prefetch,
                      step_source="test")


def _two_ctas(n_q=2):
    return work_table(TileGrid(Problem(1, 1, 64 * n_q, 64), Tiles(64, 64)),
                      CtaSchedule.persistent(2), ScanOrder.linear())


def test_two_ctas_hand_computed_pipeline():
    # Each CTA has two items of two steps. No prefetch, hit 0.5, fill 2 (step units):
    # t=0 CTA0 misses Q0, K0, V0 (ready 2), computes 2..3; CTA1 misses Q1 (ready 2) and finds
    # K0, V0 in flight (ready 2): 2..3. t=3: CTA0 misses K1, V1 (ready 5): 5..6; CTA1 waits on
    # them too: 5..6. Then the second items (Q2/Q3 misses, K0/V0 hits...).
    c = timesim.simulate(_two_ctas(4), 2, _pipe(0, 0.5, 2.0))
    d = timesim.simulate(_two_ctas(4), 2, _pipe(1, 0.5, 2.0))
    # one step ahead hides the K1/V1 fills of the first item behind its first step
    assert d.makespan < c.makespan
    assert (c.tex_sectors, c.tex_misses) == (d.tex_sectors, d.tex_misses)
    first = timesim.simulate(_two_ctas(2), 2, _pipe(0, 0.5, 2.0))
    assert first.makespan == 6.0


# The timeline below, derived by hand from analysis.cache.timeloop, for _two_ctas(3): three Q
# tiles (keys Q0, Q1, Q2), three K/V tiles (K0-K2, V0-V2), 256 sectors each; slot 0 runs the items
# of Q0 then Q2, slot 1 the item of Q1; every item scans K0..K2 (three steps); each item's last
# step also stores its O tile (a miss: stores_miss). Compute 1, hit h = 0.25, fill m = 2.5.
# An event (t, slot, step) issues the loads of its steps (the prologue st..st+p at an item's
# first step, else step st+p), each load ready at t + h (hit), at the fill's end (a tile in
# flight) or at t + m (miss); the step then runs from max(t, its loads' ready) for 1. Events go in
# (t, slot) order.
#
# prefetch 1, L2 of 1 MiB (nothing evicted):
#   (0, s0, 0)    Q0 K0 V0 K1 V1 miss, ready 2.5          -> 3.5
#   (0, s1, 0)    Q1 miss; K0 V0 K1 V1 in flight (2.5)     -> 3.5
#   (3.5, s0, 1)  K2 V2 miss (6.0); step 1 ready 2.5       -> 4.5
#   (3.5, s1, 1)  K2 V2 in flight (6.0)                    -> 4.5
#   (4.5, s0, 2)  store O miss; step 2 ready 6.0           -> 7.0, next item (Q2)
#   (4.5, s1, 2)  store O miss                             -> 7.0, slot 1 done
#   (7.0, s0, 0)  Q2 miss (9.5); K0 V0 K1 V1 hit           -> 10.5
#   (10.5, s0, 1) K2 V2 hit (10.75); step 1 ready 7.25     -> 11.5
#   (11.5, s0, 2) store O miss; step 2 ready 10.75         -> 12.5 = makespan
#   24 lookups; 12 misses (the 12 first touches, 9 of them loads: DRAM fills); 12 hits, 6 of
#   them on tiles in flight.
# prefetch 2, 1 MiB: the prologue issues all three steps: (0, s0) 7 misses -> 3.5; (0, s1) Q1
#   miss, 6 in flight -> 3.5; steps 1 and 2 of both issue nothing (ready 2.5): -> 4.5, -> 5.5
#   with the two O stores; (5.5, s0, 0) Q2 miss (8.0), six hits -> 9.0; -> 10.0; O store
#   -> 11.0 = makespan. The same 12 misses and 12 hits (6 in flight).
# An L2 of 4 tiles (LRU over whole tiles), prefetch 1: (0, s0) Q0 K0 V0 K1 V1 miss, Q0 evicted;
#   (0, s1) Q1 K0 V0 K1 V1 all miss, each evicting the oldest (K0 V0 K1 V1 Q1 in turn); (3.5, s0)
#   K2 V2 miss (6.0); (3.5, s1) K2 V2 in flight (6.0); the two O stores miss (-> 7.0); (7.0, s0)
#   Q2 K0 V0 K1 V1 miss (9.5) -> 10.5; K2 V2 miss (13.0) -> 11.5; O miss, step 2 ready 13.0
#   -> 14.0 = makespan. 22 misses (19 loads), 2 hits, both in flight.
# 4 tiles, prefetch 2: a prologue's seven tiles do not fit in four, so each load of slot 1's
#   prologue finds its tile already evicted by the loads after it in slot 0's (every lookup
#   misses, none waits on a fill); the timeline is the 1 MiB one: 11.0; 24 misses (21 loads).
HAND = [  # prefetch, L2 bytes, makespan, misses, hits, in flight, loads from DRAM (tiles)
    (1, 1 << 20, 12.5, 12, 12, 6, 9),
    (2, 1 << 20, 11.0, 12, 12, 6, 9),
    (1, 4 * TILE * 32, 14.0, 22, 2, 2, 19),
    (2, 4 * TILE * 32, 11.0, 24, 0, 0, 21),
]


@pytest.mark.parametrize("prefetch, cap, makespan, misses, hits, inflight, dram", HAND)
def test_two_ctas_hand_derived_prefetch_timeline(prefetch, cap, makespan, misses, hits,
                                                 inflight, dram):
    c = timesim.simulate(_two_ctas(3), 2, replace(_pipe(prefetch, 0.25, 2.5), capacity_bytes=cap))
    assert c.makespan == makespan
    assert (c.tex_sectors, c.tex_misses, c.tex_hits, c.inflight_hits, c.dram_fills,
            c.cold_misses) == (24 * TILE, misses * TILE, hits * TILE, inflight * TILE,
                               dram * TILE, 12 * TILE)


def test_validation_of_the_pipeline_fields():
    with pytest.raises(ValueError, match="step model"):
        TimeParams(1 << 20, prefetch=1)
    with pytest.raises(ValueError, match="hit_latency <= miss_ratio"):
        TimeParams(1 << 20, compute=1.0, hit_latency=0.5, miss_ratio=0.2, step_source="x")
    with pytest.raises(ValueError, match="step_source"):
        TimeParams(1 << 20, compute=1.0, hit_latency=0.1, miss_ratio=0.3)
    assert "pipeline(prefetch=2" in _pipe(2, 0.1, 0.3).note()


def test_exposed_fills_hold_a_causal_convoy_together():
    """The mechanism the model adds: a causal persistent launch whose K/V does not fit misses
    far less when fills are exposed (no prefetch) than when a double buffer hides them; a
    non-causal one (CTAs start their items together) hardly changes."""
    arch = get_arch("h100")
    for causal, lo, hi in ((True, 3.0, None), (False, 0.8, 1.25)):
        g = TileGrid(Problem(1, 1, 24576, 64, causal=causal), Tiles(64, 64))
        tab = work_table(g, CtaSchedule.persistent(16), ScanOrder.linear())
        cap = 2 << 20                                   # K+V per head: 6 MiB, 3x the cache
        exposed = timesim.simulate(tab, 16, _pipe(0, 0.12, 0.3, cap)).tex_misses
        hidden = timesim.simulate(tab, 16, _pipe(1, 0.12, 0.3, cap)).tex_misses
        if hi is None:
            assert hidden > lo * exposed, (causal, exposed, hidden)
        else:
            assert lo < hidden / exposed < hi, (causal, exposed, hidden)
    assert arch.num_sms == 132


def _case(backend, tiles, stages=None, resident=132, D=64):
    v = Variant(backend, ScanOrder.linear(), CtaSchedule.persistent(resident), tiles,
                stages=stages)
    return Case(Problem(1, 1, 65536, D), v, resident, "t")


def test_step_timing_of_builds():
    h100, gb10 = get_arch("h100"), get_arch("gb10")
    c = _case(Backend.CUDA, Tiles(80, 80), stages=1)
    t = steptime.step_timing(c, h100)
    assert t.prefetch == 0 and t.step_s == pytest.approx(1.186e-6)
    assert t.hit_s == pytest.approx(143.4e-9) and t.miss_s == pytest.approx(348.7e-9)
    assert steptime.step_timing(_case(Backend.CUDA, Tiles(80, 80)), h100).prefetch == 1
    assert steptime.step_timing(_case(Backend.CUTILE, Tiles(64, 64)), h100).prefetch == 1
    # twice the tile, twice the step; two CTAs per SM, twice again
    big = steptime.step_timing(_case(Backend.CUTILE, Tiles(128, 64)), h100).step_s
    assert big == pytest.approx(2 * 0.534e-6)
    shared = steptime.step_timing(_case(Backend.CUTILE, Tiles(64, 64), resident=264), h100)
    assert shared.step_s == pytest.approx(2 * 0.534e-6)
    # GB10: every range ordered, spills add time, the note says what was assumed
    g = _case(Backend.CUTILE, Tiles(64, 64), resident=48)
    lo, mid, hi = (steptime.step_timing(g, gb10, p) for p in ("lo", "mid", "hi"))
    assert lo.step_s < mid.step_s < hi.step_s and lo.miss_s < mid.miss_s < hi.miss_s
    spilled = steptime.step_timing(g, gb10, spills=steptime.BuildCosts(80, 456, 64 << 10))
    added = 80 * steptime.SPILL_S_PER_ACCESS * steptime.SPEED['gb10'].mid
    assert spilled.step_s - mid.step_s == pytest.approx(added)
    assert spilled.step_s > mid.step_s and "spills" in spilled.source
    # 456 B x 256 threads = 114 KiB of stack per CTA; 64 KiB of the 128 KiB L1 is left for it
    assert spilled.stack_l2_bytes == 48 * (456 * 256 - (64 << 10))
    assert "assumed range" in mid.source
    with pytest.raises(ValueError, match="no step speed"):
        steptime.step_timing(g, get_arch("b200"))


def _median_time(path, variant, **match):
    rows = csv_rows(path, typed=False)
    xs = [float(r["value"]) for r in rows if r["variant"] == variant
          and r["metric"] == "kernel_time_ms" and r["source"] == "measured"
          and all(r[k] == v for k, v in match.items())]
    return statistics.median(xs)


def test_reference_steps_are_the_committed_measurements():
    """steptime.REFERENCE restates two measured steps; recompute them from the committed runs."""
    ms = _median_time("profiles/h100/sawtooth-20261123/timing.csv.xz",
                      "cutile.linear.static132.m64n64d64.occ2", causal="False")
    steps = critical_steps(Problem(8, 1, 262144, 64), Tiles(64, 64), CtaSchedule.parse("static132"))
    assert steptime.REFERENCE[Backend.CUTILE][1] == pytest.approx(ms * 1e-3 / steps, rel=2e-3)
    from analysis.data import read_run
    from analysis.findings.misscost import per_run, step_time
    runs = [read_run(f"profiles/h100/misscost-20261123{s}") for s in ("", "-r2", "-r3")]
    t_c = step_time([per_run(r.get("counters.csv", []), r.get("timing.csv", [])) for r in runs])
    assert steptime.REFERENCE[Backend.CUDA][1] == pytest.approx(t_c, rel=1e-2)


def test_pipeline_units_make_the_step_the_time_unit():
    t = steptime.StepTiming(1e-6, 1e-7, 5e-7, 1, "x")
    u = t.units()
    assert u["compute"] == 1.0 and u["hit_latency"] == pytest.approx(0.1)
    assert u["miss_ratio"] == pytest.approx(0.5) and u["prefetch"] == 1
    tp = replace(TimeParams(1 << 20), **u)
    assert tp.compute == 1.0


def test_spill_cost_is_the_committed_measurement():
    """steptime.SPILL_S_PER_ACCESS restates the spills run: the occupancy-1 linear build's added
    time per step over its spill-free twin, per in-loop local access
    (experiments.registry.studies)."""
    from experiments.registry.plans import SM90_BUILDS
    path = "profiles/h100/spills-20261127/timing.csv.xz"
    spilled = _median_time(path, "cutile.linear.static132.m64n64d64.occ1")
    free = _median_time(path, "cutile.linear.static132.m64n64d64.occ2")
    steps = critical_steps(Problem(8, 1, 262144, 64, causal=True), Tiles(64, 64),
                           CtaSchedule.parse("static132"))
    n = SM90_BUILDS[("persistent", "linear", True, 1)].local_accesses
    assert steptime.SPILL_S_PER_ACCESS == pytest.approx((spilled - free) * 1e-3 / steps / n,
                                                        rel=5e-3)


def test_sm90_builds_are_the_compiled_builds():
    """experiments.registry.plans.SM90_BUILDS restates the sm_90 rows of the builds-toolchains
    run."""
    from analysis.data.steps import step_costs
    from experiments.registry.plans import SM90_BUILDS
    costs = step_costs()
    for order in ("linear", "sawtooth"):
        b = costs[(f"cutile.{order}.static48.m64n64d64.occ1.causal", "1.7.0", "sm_90")]
        mine = SM90_BUILDS[("persistent", order, True, 1)]
        assert (mine.local_accesses, mine.stack_bytes) == (b.bulk_spill_per_step, b.stack)
        assert abs(mine.smem_bytes - b.shared) <= 1024


def test_the_authors_builds_prefetch_as_their_shared_memory_allows():
    """The paper's causal linear builds hold three K/V pairs (58,496 B of shared memory: loads two
    steps ahead); their sawtooth builds and every non-causal build one (33,920 B: none ahead)."""
    from experiments.registry.plans import build_costs, sawtooth_plan
    gb10 = get_arch("gb10")
    seen = {}
    for c in sawtooth_plan(gb10):
        if c.variant.backend != Backend.CUTILE:
            continue
        b = build_costs(c, gb10)
        seen[(c.variant.schedule.is_persistent, c.variant.order.label, c.problem.causal)] = (
            b.prefetch(64 * 64 * 2), b.local_accesses)
    assert seen[(True, "linear", True)] == (2, 50.0)
    assert seen[(False, "linear", True)] == (2, 43.0)
    assert {v for k, v in seen.items() if k[1] == "sawtooth" or not k[2]} == {(0, 0.0)}

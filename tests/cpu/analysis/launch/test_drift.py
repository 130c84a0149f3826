"""The drift study on the CPU: the spread arithmetic (analysis.launch.drift) on hand-made traces,
sampling, the study's plan, and the rows ``experiments.measurement.measure.drift_rows`` writes (the
columns and metrics of the committed profiles/h100/drift-20261121b/drift.csv.xz)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from analysis.launch import drift as dr
from experiments.measurement.measure import drift_rows
from experiments.registry.plans import DRIFT_FEW_CTAS, scaled_seq
from experiments.registry.studies import get_study
from spec import (
    Backend,
    Case,
    CtaSchedule,
    Problem,
    ScanOrder,
    TileGrid,
    Tiles,
    Variant,
    get_arch,
    known_archs,
)
from spec.records import COLUMNS, Metric, read_bytes, read_csv, write_csv
from spec.schedules import ScheduleKind
from tests.conftest import ROOT

EPOCH_NS = 1_763_700_000_123_456_789     # %globaltimer reads ns since the epoch (late 2025)


# -- drift() --------------------------------------------------------------------------------------

def test_drift_with_padding_and_ctas_of_different_lengths():
    # CTA 0 runs 4 steps, CTA 1 three, CTA 2 one; step 3 has a single CTA and is dropped
    t = np.array([[100, 130, 150, 190],
                  [110, 125, 160, -1],
                  [160, -1, -1, -1]], dtype=np.int64)
    d = dr.drift(t)
    np.testing.assert_array_equal(d.step, [0, 1, 2])
    np.testing.assert_array_equal(d.spread_ns, [60, 5, 10])     # 160-100, 130-125, 160-150
    # durations: CTA 0: 30, 20, 40; CTA 1: 15, 35; CTA 2: none -> median of 15 20 30 35 40
    assert d.median_step_ns == 30
    np.testing.assert_allclose(d.spread_steps, [2.0, 5 / 30, 10 / 30])


def test_drift_ignores_padding_in_the_extrema():
    # a -1 pad must not count as an early start (min) nor the pad's diff as a duration
    t = np.array([[1000, 1010, 1020], [1004, -1, -1], [1002, 1012, -1]], dtype=np.int64)
    d = dr.drift(t)
    np.testing.assert_array_equal(d.step, [0, 1])
    np.testing.assert_array_equal(d.spread_ns, [4, 2])
    assert d.median_step_ns == 10


def test_drift_is_exact_at_epoch_timestamps():
    """Real stamps are ~1.8e18 ns, where float64 resolves only 256 ns: spreads of a few ns must
    survive (they were rounded to multiples of 256 ns before times were made relative)."""
    t = EPOCH_NS + np.array([[0, 1000, 2010], [37, 1050, 0]], dtype=np.int64)
    t[1, 2] = -1
    d = dr.drift(t)
    np.testing.assert_array_equal(d.step, [0, 1])
    np.testing.assert_array_equal(d.spread_ns, [37, 50])
    assert d.median_step_ns == 1010                     # durations 1000, 1010, 1013


def test_sparse_drift_reports_step_indices_and_per_step_time():
    # records every 4th step: CTA 1 starts 8 ns late and each record is 4 steps of 10 ns
    t = EPOCH_NS + np.array([[0, 40, 80], [8, 48, 92]], dtype=np.int64)
    d = dr.drift(t, every=4)
    np.testing.assert_array_equal(d.step, [0, 4, 8])
    np.testing.assert_array_equal(d.spread_ns, [8, 8, 12])
    assert d.median_step_ns == 10.0                     # record gaps 40, 40, 40, 44 over 4
    gt = dr.step_time_by_gap(t, edges=(0.0, 0.5), every=4)
    np.testing.assert_array_equal(gt.count, [2, 2])     # CTA 1 is 0.8 and 0.8 steps behind
    np.testing.assert_allclose(gt.mean_ns, [10.0, (10 + 11) / 2])   # CTA 1: 40/4, 44/4


def test_drift_of_a_single_cta_has_no_spread():
    d = dr.drift(np.array([[5, 15, 35]], dtype=np.int64))
    assert d.step.size == 0 and d.spread_ns.size == 0
    assert d.median_step_ns == 15


# -- step_time_by_gap() ---------------------------------------------------------------------------

def test_step_time_by_gap_by_hand():
    # A leader whose steps last 12 ns and a follower 30 ns behind whose steps last 10 ns until
    # it catches up (then both last 12: it waits behind the leader). Median step 12 ns.
    lead = EPOCH_NS + np.array([0, 12, 24, 36, 48, 60, 72])
    follow = EPOCH_NS + np.array([30, 40, 50, 60, 72, 84, 96])
    gt = dr.step_time_by_gap(np.stack([lead, follow]), edges=(0.0, 0.5, 2.0))
    # gaps of the follower at steps 0..5 (in 12 ns steps): 30/12=2.5, 28/12, 26/12, 24/12=2.0,
    # 24/12, 24/12 -> all in the open bin [2, inf); the leader's six gaps are 0
    np.testing.assert_array_equal(gt.count, [6, 0, 6])
    assert gt.mean_ns[0] == 12.0
    assert np.isnan(gt.mean_ns[1])
    assert gt.mean_ns[2] == pytest.approx((10 + 10 + 10 + 12 + 12 + 12) / 6)


def test_step_time_by_gap_skips_padding_and_needs_two_ctas():
    t = np.array([[0, 10, 20, 30], [5, 15, -1, -1]], dtype=np.int64)
    gt = dr.step_time_by_gap(t, edges=(0.0, 0.25))
    # step 0: CTA 0 leads, CTA 1 is 0.5 steps behind; step 1: CTA 0 leads and times its step,
    # CTA 1 has no step 2 to end it; step 2 has one CTA. All durations 10 ns.
    np.testing.assert_array_equal(gt.count, [2, 1])
    np.testing.assert_array_equal(gt.mean_ns, [10.0, 10.0])
    with pytest.raises(ValueError, match="two CTAs"):
        dr.step_time_by_gap(np.array([[0, 10, 20]], dtype=np.int64))


# -- kv_step_bytes, sample_steps ------------------------------------------------------------------

def test_kv_step_bytes_by_hand():
    # K and V tiles of n=64 rows, D=128, fp16: 2 * 64 * 128 * 2 bytes (m=128 must not enter)
    assert TileGrid(Problem(1, 1, 1024, 128), Tiles(128, 64)).kv_step_bytes == 32768
    assert TileGrid(Problem(1, 1, 1024, 64), Tiles(80, 80)).kv_step_bytes == 20480


@pytest.mark.parametrize("n", [1, 2, 3, 7, 300, 301, 1000, 4097])
@pytest.mark.parametrize("points", [2, 3, 7, 300])
def test_sample_steps_keeps_ends_sorted_unique_and_at_most_points(n, points):
    s = dr.sample_steps(n, points)
    assert s.dtype.kind == "i"
    assert 1 <= len(s) <= points
    assert s[0] == 0 and s[-1] == n - 1
    assert np.all(np.diff(s) > 0)                        # sorted and unique
    assert s.min() >= 0 and s.max() <= n - 1
    if n <= points:
        np.testing.assert_array_equal(s, np.arange(n))
    else:
        assert len(s) == points                          # evenly spaced, none lost to rounding


@pytest.mark.parametrize("points", [1, 0, -3])
def test_sample_steps_needs_two_points(points):
    with pytest.raises(ValueError, match="at least 2"):
        dr.sample_steps(10, points)


# -- plan -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", known_archs())
def test_plan_is_persistent_twins_at_the_scaled_sequence(name):
    arch = get_arch(name)
    cases = get_study("drift").plan(arch)
    assert len(cases) == 4 * (2 + len(DRIFT_FEW_CTAS))
    full = (1, arch.num_sms), (4, arch.num_sms)
    few = tuple((1, p) for p in DRIFT_FEW_CTAS)
    assert {(c.problem.B, c.variant.schedule.num_ctas, c.problem.causal) for c in cases} == {
        (b, p, causal) for b, p in full + few for causal in (False, True)}
    for c in cases:
        p, v = c.problem, c.variant
        assert p.S_q == p.S_kv == scaled_seq(arch) and p.H == 1 and p.D == 64
        assert v.backend == Backend.CUDA and v.tiles == Tiles(80, 80)
        assert v.schedule.kind == ScheduleKind.PERSISTENT and c.resident == v.schedule.num_ctas
    for lin, saw in zip(cases[::2], cases[1::2]):
        assert lin.problem == saw.problem
        assert lin.variant.order == ScanOrder.linear() and saw.variant.order == ScanOrder.sawtooth()
        assert dataclasses.replace(lin.variant, order=saw.variant.order) == saw.variant
    assert len({c.id for c in cases}) == len(cases)


def test_plan_on_h100_holds_the_committed_datasets_cases_in_order():
    """The study measures the cases of profiles/h100/drift-20261121b, in its order, and the
    few-CTA cases added since."""
    import json
    manifest = json.loads(read_bytes(ROOT / "profiles/h100/drift-20261121b/manifest.json.xz"))
    ids = [c.id for c in get_study("drift").plan(get_arch("h100"))]
    assert [i for i in ids if f"static{get_arch('h100').num_sms}." in i] == manifest["cases"]


def test_drift_study_is_measured_only_into_drift_csv():
    s = get_study("drift")
    assert s.measure is not None and s.rows_file == "drift.csv"
    assert not s.timed and not s.profiled


# -- rows -----------------------------------------------------------------------------------------

def _case():
    arch = get_arch("h100")
    return arch, Case(Problem(1, 1, 1024, 64), Variant(Backend.CUDA, ScanOrder.sawtooth(),
                                                       CtaSchedule.persistent(2), Tiles(64, 64)),
                      2, "drift-noncausal")


def test_drift_rows_by_hand():
    # 2 CTAs, 16 K/V tiles per work item; step start times 100 ns apart, CTA 1 starts 30 ns late
    arch, case = _case()
    steps = 40
    t = EPOCH_NS + np.stack([np.arange(steps) * 100, 30 + np.arange(steps) * 100])
    t[1, -5:] = -1                                       # CTA 1 ran 35 steps
    rows, line = drift_rows(case, t, arch, run="r", study="drift", points=7, note="trace build x")
    step = [r for r in rows if r.metric == Metric.STEP_NS]
    spread = [r for r in rows if r.metric == Metric.CTA_START_SPREAD_NS]
    assert len(step) == 1 and step[0].value == 100 and step[0].note == "trace build x"
    assert step[0].unit == "ns" and step[0].source == "measured"
    assert len(spread) == 7 and all(r.value == 30 for r in spread)
    assert [r.x for r in spread] == sorted(r.x for r in spread)
    assert spread[0].x == 0 and spread[-1].x == 34       # the last step two CTAs share
    assert all(r.variant == "cuda.sawtooth.static2.m64n64d64" and r.study == "drift"
               for r in rows)
    # 30 ns = 0.3 steps; K/V step of 64 rows at D=64 fp16 = 16 KiB
    assert "spread 0.3 steps after one work item (16 steps)" in line
    assert "max 0.3 steps = 0.0 MiB" in line
    # the follower (CTA 1, 0.3 steps behind) and the leader both step 100 ns
    gap = [r for r in rows if r.metric == Metric.STEP_NS_BY_GAP]
    # steps 0..34 have both CTAs: CTA 0 times 35 of them, CTA 1 34 (its step 34 is its last)
    assert [(r.x, r.value, r.note) for r in gap] == [(0.0, 100.0, "69 steps")]


def test_drift_rows_round_trip_with_the_committed_columns(tmp_path):
    arch, case = _case()
    t = np.stack([np.arange(10) * 50, np.arange(10) * 50 + 7]).astype(np.int64)
    rows, _ = drift_rows(case, t, arch, run="r", study="drift", points=3, note="n")
    write_csv(tmp_path / "drift.csv", rows)
    committed = read_bytes(ROOT / "profiles/h100/drift-20261121b/drift.csv.xz").decode()
    committed = committed.splitlines()[0]
    mine = (tmp_path / "drift.csv").read_text().splitlines()[0].split(",")
    # the committed file's columns are a prefix of the schema's (newer columns read as empty)
    assert mine[:len(committed.split(","))] == committed.split(",") and tuple(mine) == COLUMNS
    back = read_csv(tmp_path / "drift.csv")
    xs = [r["x"] for r in back if r["metric"] == Metric.CTA_START_SPREAD_NS]
    assert len(xs) == 3 and xs[0] == 0.0 and xs[-1] == 9.0          # first and last step kept
    assert {r["value"] for r in back if r["metric"] == Metric.CTA_START_SPREAD_NS} == {7.0}


def test_completions_give_each_ctas_speed_and_position():
    # 3 CTAs, 10 items of 100 steps each, at 1, 1.01 and 0.99 steps per ns: the slopes come back
    # exactly, the step factors are mean/speed, and half-way through (t = 500 ns of the 0..990 ns
    # window that ends when CTA 1 runs out) CTA 1 has done 1.01x CTA 0's steps.
    cta = np.repeat(np.arange(3), 10)
    it = np.tile(np.arange(10), 3)
    rate = np.array([1.0, 1.01, 0.99])
    t = (it + 1) * 100 / rate[cta]
    c = dr.Completions(cta, it, np.full(30, 100), t)
    np.testing.assert_allclose(c.speeds(0.0, 1.0), rate, rtol=1e-12)
    np.testing.assert_allclose(dr.step_factors(rate), 1.0 / rate, rtol=1e-12)
    a, b = c.window(0.0, 1.0)
    assert (a, b) == (pytest.approx(100 / 1.01), pytest.approx(1000 / 1.01))
    pos = c.positions([0.5])[0]
    np.testing.assert_allclose(pos / pos[0], rate, rtol=1e-9)
    with pytest.raises(ValueError, match="positive"):
        dr.step_factors(np.array([1.0, np.nan]))

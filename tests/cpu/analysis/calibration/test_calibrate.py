"""Calibration: at most two free parameters, a fixed grid, parameters written with their data."""
import csv
import math
from pathlib import Path

import pytest

from analysis import calibration as cal
from analysis.cache.merge import merged_sector_accesses
from analysis.cache.timesim import TimeParams
from analysis.models.traffic import sector_accesses
from spec import Backend, CtaSchedule, Problem, ScanOrder, Tiles, Variant, get_arch
from spec.case import Case
from spec.records import data_path, read_csv, read_dicts
from spec.schedules import ScheduleKind

CASE = Case(Problem(1, 1, 2048, 64), Variant(Backend.CUDA, ScanOrder.linear(),
                                                CtaSchedule.persistent(8), Tiles(64, 64)), 8, "t")


def _measured(value):
    return cal.MeasuredCase("divergence", CASE, ("r1",), (value,))


def test_fit_refuses_more_than_two_free_parameters():
    grid = {"capacity_fraction": [0.5], "miss_ratio": [1.0], "jitter": [0.0]}
    with pytest.raises(ValueError, match="at most 2"):
        cal.fit([_measured(1.0)], lambda c, p: 1.0, grid, {})


def test_fit_refuses_unknown_or_doubly_given_parameters():
    with pytest.raises(ValueError, match="not fittable"):
        cal.fit([_measured(1.0)], lambda c, p: 1.0, {"jitter": [0.0]}, {})
    with pytest.raises(ValueError, match="free and fixed"):
        cal.fit([_measured(1.0)], lambda c, p: 1.0, {"miss_ratio": [1.0]}, {"miss_ratio": 2.0})


def test_fit_picks_the_grid_point_of_least_relative_rms():
    # prediction = 10 * f * r; measured 6: the best grid point is f*r = 0.6
    best, err, points = cal.fit([_measured(6.0)], lambda c, p: 10 * p["capacity_fraction"] *
                                p["miss_ratio"], {"capacity_fraction": [0.2, 0.3, 0.5],
                                                  "miss_ratio": [1.0, 2.0]}, {"jitter": 0.0})
    assert (best["capacity_fraction"], best["miss_ratio"]) == (0.3, 2.0)
    assert err == 0.0 and len(points) == 6 and best["jitter"] == 0.0


def test_params_round_trip(tmp_path: Path):
    p = cal.ArchParams("h100", 0.5, 4.0, 0.04, 2, cal.FITTABLE, "divergence", ("d-1",), ("c",),
                       0.2, {"capacity_fraction": [0.5]}, ((0.5, 4.0, 0.2),), "test")
    path = cal.write_params(p, tmp_path / "h100.json")
    assert cal.read_params("h100", path) == p
    assert p.time_params(get_arch("h100")).capacity_bytes == get_arch("h100").l2_bytes // 2


def test_expected_normal_range():
    assert cal.expected_normal_range(2) == pytest.approx(2 / math.sqrt(math.pi), rel=1e-4)
    assert cal.expected_normal_range(1) == pytest.approx(0.0, abs=1e-9)


def test_merge_term_lowers_sectors_below_the_loads():
    loads = sector_accesses(CASE.problem, CASE.variant.tiles).total
    p = TimeParams(1 << 20)
    assert merged_sector_accesses(CASE, p, window=0.0) == loads
    merged = merged_sector_accesses(CASE, p, window=1.0)
    # 8 CTAs in lock-step on the same K/V: 7 of every 8 K/V requests merge
    assert merged < 0.2 * loads


def test_jitter_from_drift_separates_speed_and_random_walk(tmp_path: Path):
    # Synthetic drift of 132 CTAs: spread = range(132) * sqrt(sr^2 x^2 + ss^2 x) steps, with
    # sr = 0.001 and ss = 0.02; both come back.
    from spec import Variant
    from spec.records import Metric, Row, case_fields, write_csv
    var = Variant(Backend.CUDA, ScanOrder.linear(), CtaSchedule.persistent(132), Tiles(80, 80))
    prob = Problem(1, 1, 262144, 64)
    rng = cal.expected_normal_range(132)
    rows = [Row(run="d", study="drift", arch="h100", metric=Metric.STEP_NS, value=1000.0,
                unit="ns", source="measured", **case_fields(prob, var))]
    for x in (100, 1000, 5000, 20000, 80000):
        v = rng * math.sqrt(0.001 ** 2 * x * x + 0.02 ** 2 * x) * 1000.0
        rows.append(Row(run="d", study="drift", arch="h100", metric=Metric.CTA_START_SPREAD_NS,
                        value=v, unit="ns", source="measured", x=x, **case_fields(prob, var)))
    write_csv(tmp_path / "drift.csv", rows)
    ss, sr, note = cal.jitter_from_drift(tmp_path / "drift.csv")
    assert ss == pytest.approx(0.02, rel=1e-6) and sr == pytest.approx(0.001, rel=1e-6)
    assert "1 non-causal cases" in note


def test_miss_ratio_from_timing_is_the_exposed_latency_ratio(tmp_path: Path):
    # Hand-computed with L_hit = 100 ns, L_dram = 400 ns. Steps of 1000 and 1200 ns: t_c is the
    # shortest, 1000 ns. Depth 2 hides both loads behind 1000 ns of compute: r = 1. Depth 1
    # exposes them in full: r = (1000 + 400) / (1000 + 100) = 14/11. Steps of 250 ns at depth
    # 2: a hit (100 ns) is hidden, a DRAM fill shows 400 - 250 = 150 ns: r = 400 / 250 = 1.6.
    from analysis.models.timemodel import MemoryFacts
    from spec.records import Metric, Row, case_fields, write_csv
    facts = MemoryFacts("t", 1, 1e12, 100e-9, 400e-9, "test")
    var = Variant(Backend.CUDA, ScanOrder.linear(), CtaSchedule.persistent(132), Tiles(80, 80))
    prob = Problem(1, 1, 262144, 64)

    def drift(steps_ns):
        path = tmp_path / f"drift{steps_ns[0]}.csv"
        write_csv(path, [Row(run="d", study="drift", arch="h100", metric=Metric.STEP_NS, value=v,
                             unit="ns", source="measured", **case_fields(prob, var))
                         for v in steps_ns])
        return path

    assert cal.miss_ratio_from_timing(drift([1200.0, 1000.0]), facts)[0] == pytest.approx(1.0)
    assert cal.miss_ratio_from_timing(drift([1200.0, 1000.0]), facts, stages=1)[0] == \
        pytest.approx(14 / 11)
    assert cal.miss_ratio_from_timing(drift([250.0, 300.0]), facts)[0] == pytest.approx(1.6)


def test_h100_miss_ratio_is_derived_not_fitted():
    # The committed drift step (>= 1.29 us) hides the measured DRAM latency (349 ns) at the
    # default depth: r = 1 is fixed before the fit, which searches the capacity fraction only.
    from analysis.calibration import fitting, simcheck
    fixed, why = fitting._fixed(get_arch("h100"), Path("profiles/h100"))
    assert fixed["miss_ratio"] == 1.0 and "t_c 1.29 us" in why
    assert list(simcheck.FIT_GRID) == ["capacity_fraction"]


def test_load_measured_takes_every_launch_of_the_repeats(tmp_path: Path):
    """Each launch in counters_repeats.csv is a run of its own, whether the metric is the group's
    home metric (also summarised in counters.csv) or a companion (only in the repeats); the
    file's ``stat=median`` summary rows are not launches."""
    import shutil
    src = Path("profiles/h100/holdout-20261125f/active-sms-20261125d")     # one-pass dram group
    d = tmp_path / "active-sms-20261125d"
    shutil.copytree(src, d)
    reps = read_dicts(data_path(src, "counters_repeats.csv"))      # stored compressed

    def launches(metric):
        return sorted(float(r["value"]) for r in reps if r["metric"] == metric and not r["stat"])

    for metric in ("lts__t_sectors_srcunit_tex_lookup_miss.sum",      # home metric
                   "dram__bytes_read.sum"):                           # companion
        ms = cal.load_measured(tmp_path, get_arch("h100"), "active-sms", metric)
        assert len(ms) == 4 and len(launches(metric)) == 12
        assert sorted(v for m in ms for v in m.values) == pytest.approx(launches(metric))
        assert all(m.runs == tuple(f"{d.name}#{i}" for i in (1, 2, 3)) for m in ms)
    p4 = next(m for m in cal.load_measured(tmp_path, get_arch("h100"), "active-sms")
              if m.case.resident == 4 and m.case.variant.order == ScanOrder.linear())
    assert len(p4.values) == 3 and p4.median == 1510984692.0     # the launches; their median


@pytest.mark.parametrize("run, study", [
    ("holdout-20261124/active-sms-20261124", "active-sms"),   # misses from the 4-pass tex group
    ("traffic-20261121", "traffic"),                          # the 4-pass hopper set, no repeats
])
def test_load_measured_refuses_counts_from_several_replay_passes(tmp_path: Path, run, study):
    """The 2026-11-21 runs and the tex group read every counter over 4 replay passes
    (``profiler__replayer_passes`` = 4, or not recorded): none of their counts is a measured case.
    The same run with its pass records set to 1 gives every case (the rule, not the files,
    decides)."""
    import shutil
    d = tmp_path / Path(run).name
    shutil.copytree(Path("profiles/h100") / run, d)
    assert cal.load_measured(tmp_path, get_arch("h100"), study) == []
    rep = data_path(d, "counters_repeats.csv")                  # stored compressed, if any
    if rep is not None:
        rows = read_dicts(rep)
        rep.unlink()
        assert {r["value"] for r in rows if r["metric"] == "profiler__replayer_passes"} == {"4.0"}
        for r in rows:
            if r["metric"] == "profiler__replayer_passes":
                r["value"] = "1.0"
        with open(d / "counters_repeats.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        assert len(cal.load_measured(tmp_path, get_arch("h100"), study)) == 8

def test_resident_ctas_are_the_builds_occupancy_at_its_launch_size(tmp_path: Path):
    """A non-persistent launch shares the L2 among SMs x the *compiled* kernel's CTAs per SM (the
    run's ``ctas_per_sm`` resource rows), not the variant's occupancy hint, but only where the
    run recorded the CTA size that occupancy was asked at (``threads``): the committed sawtooth
    run asked the driver about its cuTile builds at 512 threads (answer 1) while they launch
    with 256 (ncu: 2 per SM), so its cuTile values are not used and the hint (2) stands in. With
    ``threads`` rows the recorded value counts; a persistent launch keeps its P either way."""
    import shutil
    src = Path("profiles/h100/sawtooth-20261123")
    d = tmp_path / src.name
    shutil.copytree(src, d)
    per_sm = cal.measured_ctas_per_sm(d)
    assert per_sm and all(k[0].startswith("cuda.") for k in per_sm)

    def tile_x():
        cases = cal.load_measured(tmp_path, get_arch("h100"), "sawtooth")
        assert all(m.case.resident == 132 for m in cases
                   if m.case.variant.schedule.is_persistent)
        return [m.case for m in cases if m.case.variant.schedule.kind == ScheduleKind.TILE_X]
    assert tile_x() and all(c.variant.occupancy == 2 and c.resident == 264 for c in tile_x())
    stored = data_path(d, "timing.csv")                          # compressed in the tree
    rows = read_csv(stored)
    stored.unlink()
    sized = [{**r, "metric": "threads", "value": 256.0, "unit": "thread"} for r in rows
             if r["metric"] == "ctas_per_sm" and r["backend"] == "cutile"]
    with open(d / "timing.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows + sized)
    assert all(c.resident == 132 for c in tile_x())          # the recorded 1 per SM now counts
    (d / "timing.csv").unlink()
    assert cal.measured_ctas_per_sm(d) == {}
    assert all(c.resident == 264 for c in tile_x())


def test_pair_slowdown_is_the_median_odd_minus_even_lag_per_step(tmp_path: Path):
    # launch a: one busy pair (0, 1), lags -5 / +5 at step 1000 -> 0.01; launch b: SMs 2 and 4,
    # no busy pair -> no value; launch c: pairs (0, 1) and (2, 3), odd-even 2 and 4 at step 100
    # -> 0.03. Median of 0.01 and 0.03: 0.02.
    rows = [("a", 0, -5.0, 1000), ("a", 1, 5.0, 1000), ("b", 2, 0.0, 500), ("b", 4, 1.0, 500),
            ("c", 0, 0.0, 100), ("c", 1, 2.0, 100), ("c", 2, 0.0, 100), ("c", 3, 4.0, 100)]
    path = tmp_path / "lags.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["case", "launch", "n_ctas", "cta", "sm", "step", "lag_steps"])
        for i, (case, sm, lag, step) in enumerate(rows):
            w.writerow([case, 0, 2, i, sm, step, lag])
    delta, note = cal.pair_slowdown_from_lags(path)
    assert delta == pytest.approx(0.02) and "2 launches" in note
    (tmp_path / "none.csv").write_text("case,launch,n_ctas,cta,sm,step,lag_steps\nb,0,2,0,2,5,0\n")
    with pytest.raises(ValueError, match="pair"):
        cal.pair_slowdown_from_lags(tmp_path / "none.csv")


def test_load_measured_selects_runs_by_gpu_and_pools_them_across_gpus(tmp_path: Path):
    """The seventh holdout measured the same cases on three H100s (the manifests' device uuid):
    ``device`` keeps one chip's runs, no ``device`` pools every chip's launches (the spread
    across chips). On chip 800ee51b the first 2 CTAs miss 1.5x what they miss on 5c0fead6 (a
    launch whose first CTAs straddle the two L2 partitions), which only the pooled view shows."""
    from analysis.calibration.__main__ import main as calibration_main
    root = Path("profiles/h100/holdout-20261125f")
    h100 = get_arch("h100")
    assert cal.run_device(root / "active-sms-20261125") == "800ee51b-46c3-11ad-e866-167bf58b32d3"
    assert cal.run_device(tmp_path) is None

    def p2(device=None):
        return next(m for m in cal.load_measured(root, h100, "active-sms", device=device)
                    if m.case.resident == 2 and m.case.variant.order == ScanOrder.linear())

    a, b, pooled = p2("800ee51b"), p2("5c0fead6"), p2()
    assert len(a.values) == len(b.values) == 3 and len(pooled.values) == 9      # + chip 8c6f14f0
    assert {r.split("#")[0] for r in a.runs} == {"active-sms-20261125"}
    assert a.median / b.median == pytest.approx(1.5, abs=0.02)
    assert a.spread < 0.15 and b.spread < 0.15 and pooled.spread > 0.15
    assert cal.load_measured(root, h100, "active-sms", device="ffffffff") == []
    out = tmp_path / "v"
    assert calibration_main(["validate", "--arch", "h100", "--root", str(root), "--studies",
                          "active-sms", "--device", "ffffffff", "--out", str(out)]) == 2
    assert not out.exists()

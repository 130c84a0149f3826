"""CPU checks of the CTA placement records: the CUDA trace build's per-CTA buffer layout
(cuda_baseline.host.backend.unpack_trace) and the placement / drift statistics of
analysis.launch.placement on hand-made launches."""
from __future__ import annotations

import math

import numpy as np
import pytest

from cuda_baseline.host.backend import unpack_trace


def _buffers(n_ctas: int, steps: int, used: list[int]):
    """Flat trace buffers as the kernel leaves them: CTA c ran ``used[c]`` steps, step s of CTA c
    visited (0, 0, c, s) at 1000 c + 10 s ns, on SM 7 c, started at 1000 c - 5,
    ended 1000 c + 500."""
    visits = np.full(4 * n_ctas * steps + n_ctas, -1, dtype=np.int32)
    times = np.full(n_ctas * (steps + 2), -1, dtype=np.int64)
    for c in range(n_ctas):
        for s in range(used[c]):
            visits[4 * (c * steps + s):4 * (c * steps + s) + 4] = (0, 0, c, s)
            times[c * steps + s] = 1000 * c + 10 * s
        visits[4 * n_ctas * steps + c] = 7 * c
        times[n_ctas * steps + c] = 1000 * c - 5
        times[n_ctas * steps + n_ctas + c] = 1000 * c + 500
    return visits, times


def test_unpack_trace_reads_per_step_then_per_cta_records():
    visits, times = _buffers(3, 5, used=[3, 2, 0])
    tr = unpack_trace(visits, times, 3, 5)
    assert tr["visits"].shape == (3, 3, 4)            # 2 step columns nobody used are dropped
    assert tr["visits"][1, 1].tolist() == [0, 0, 1, 1]
    assert (tr["visits"][1, 2] == -1).all() and (tr["visits"][2] == -1).all()
    assert tr["time_ns"].tolist() == [[0, 10, 20], [1000, 1010, -1], [-1, -1, -1]]
    assert tr["smid"].tolist() == [0, 7, 14] and tr["smid"].dtype == np.int32
    assert tr["start_ns"].tolist() == [-5, 995, 1995] and tr["start_ns"].dtype == np.int64
    assert tr["end_ns"].tolist() == [500, 1500, 2500]


def test_unpack_trace_refuses_buffers_of_another_shape():
    visits, times = _buffers(3, 5, used=[1, 1, 1])
    with pytest.raises(ValueError, match="3 CTAs x 4 steps"):
        unpack_trace(visits, times, 3, 4)
    with pytest.raises(ValueError, match="do not hold"):
        unpack_trace(visits[:-1], times, 3, 5)


# -- analysis.launch.placement -------------------------------------------------------------------

from analysis.launch.drift import drift  # noqa: E402
from analysis.launch.placement import (  # noqa: E402
    STATISTICS,
    UNITS,
    Placement,
    compact,
    correlations,
    from_arrays,
    placement,
    spearman,
    step_spread_ns,
    to_arrays,
)

BASE = 1_800_000_000_000_000_000   # an epoch-size %globaltimer stamp (float64 resolves 256 ns)


def _launch(smid, start, step_ns=100, steps=6, lag=None, end=None):
    """Full trace arrays of a hand-made launch: CTA c starts at BASE + start[c], runs ``steps``
    steps of ``step_ns`` each, plus ``lag[c]`` ns extra per step (a slow CTA)."""
    n = len(smid)
    lag = lag or [0] * n
    t = np.array([[BASE + start[c] + s * (step_ns + lag[c]) for s in range(steps)]
                  for c in range(n)], dtype=np.int64)
    end = end or [start[c] + steps * (step_ns + lag[c]) for c in range(n)]
    return t, np.array(smid), BASE + np.array(start, dtype=np.int64), \
        BASE + np.array(end, dtype=np.int64)


def test_placement_of_the_worked_example():
    # 4 CTAs on SMs 0, 1, 1, 3; starts 0, 32, 64, 96 ns; CTAs 1 and 2 (sharing SM 1) are slow
    t, smid, start, end = _launch([0, 1, 1, 3], [0, 32, 64, 96], lag=[0, 50, 50, 0])
    tr = compact(t, smid, start, end, keep_steps=[3], points=2)
    assert tr.steps.tolist() == [0, 3, 5] and tr.base_ns == BASE
    assert tr.start_ns.tolist() == [0, 32, 64, 96]
    p = placement(tr, n_kv=3)
    assert (p.n_ctas, p.sms_used, p.max_ctas_per_sm, p.shared_sms) == (4, 3, 2, 1)
    assert (p.pairs_used, p.max_ctas_per_pair) == (2, 3)     # pairs {0, 1} and {2, 3}
    assert p.start_spread_ns == 96 and p.start_order_rho == 1.0
    # step 3 starts at 300, 32 + 450, 64 + 450, 396: spread 514 - 300 = 214 ns
    # steps of 100 ns (CTAs 0, 3) and 150 ns (1, 2): median 125 ns
    assert p.median_step_ns == drift(t).median_step_ns == 125
    assert p.drift_one_item_steps == pytest.approx(214 / 125)
    assert p.max_drift_steps == pytest.approx((64 + 750 - 500) / 125)   # at step 5
    assert p.span_ns == 64 + 900                                        # CTA 2 ends last
    # shared CTAs end at 932 and 964, the others at 600 and 696: lag 948 - 648
    assert p.shared_end_lag_ns == 300


def test_compact_spreads_equal_analysis_drift():
    rng = np.random.default_rng(1)
    t = BASE + np.cumsum(rng.integers(90, 130, size=(8, 40)), axis=1)
    t[3, 30:] = -1                       # a CTA with fewer steps
    tr = compact(t, np.arange(8), t[:, 0] - 5, t.max(axis=1) + 7, keep_steps=[17], points=9)
    d = drift(t)
    np.testing.assert_array_equal(step_spread_ns(tr), d.spread_ns[tr.steps])
    assert 17 in tr.steps and tr.median_step_ns == d.median_step_ns


def test_one_cta_per_sm_has_no_shared_sm_and_no_lag():
    t, smid, start, end = _launch([5, 0, 9], [0, 0, 0])
    p = placement(compact(t, smid, start, end), n_kv=100)   # n_kv past the end: the last step
    assert (p.sms_used, p.max_ctas_per_sm, p.shared_sms) == (3, 1, 0)
    assert math.isnan(p.shared_end_lag_ns) and math.isnan(p.start_order_rho)  # equal starts
    assert p.drift_one_item_steps == 0 and p.start_spread_ns == 0


def test_bad_arrays_are_refused():
    t, smid, start, end = _launch([0, 1], [0, 10])
    with pytest.raises(ValueError, match="smid has shape"):
        compact(t, smid[:1], start, end)
    with pytest.raises(ValueError, match="negative SM ids"):
        compact(t, np.array([-1, 1]), start, end)
    with pytest.raises(ValueError, match="no CTA recorded a start"):
        compact(t, smid, np.array([-1, -1]), end)
    with pytest.raises(ValueError, match="expected \\[n_ctas"):
        compact(t[0], smid, start, end)


def test_spearman_ties_and_undefined_cases():
    assert spearman([80, 81, 89, 80, 82], [0, 0, 3, 0, 1]) == pytest.approx(
        np.corrcoef([1.5, 3, 5, 1.5, 4], [2, 2, 5, 2, 4])[0, 1])   # average ranks of ties
    assert spearman([1, 2, 3, 4], [40, 30, 20, 10]) == -1.0
    assert math.isnan(spearman([1, 2, 3], [7, 7, 7]))            # constant: nothing to say
    assert math.isnan(spearman([1, 2], [3, 4]))                  # too few launches
    assert math.isnan(spearman([1, 2, float("nan")], [3, 4, 5]))
    with pytest.raises(ValueError, match="one length"):
        spearman([1, 2, 3], [1, 2])


def _placements(shared: list[int]) -> list[Placement]:
    out = []
    for k, s in enumerate(shared):
        smid = list(range(8 - s)) + list(range(s))      # s SMs hold two CTAs
        t, sm, start, end = _launch(smid, [0] * 8, end=[600 + 10 * k] * 8)
        out.append(placement(compact(t, sm, start, end), n_kv=3))
    return out


def test_correlations_rank_misses_against_each_statistic():
    stats = _placements([0, 0, 3, 0, 1])
    rho = correlations([80e6, 81e6, 89e6, 80e6, 82e6], stats)
    assert set(rho) == set(STATISTICS) == set(UNITS) - {"n_ctas"}
    assert rho["shared_sms"].rho == pytest.approx(0.9176629, abs=1e-6)
    assert rho["sms_used"].rho == pytest.approx(-0.9176629, abs=1e-6)
    assert rho["shared_sms"].n == 5 and 0 < rho["shared_sms"].p < 0.05
    assert math.isnan(rho["start_spread_ns"].rho)                # all launches start together
    # a failed launch (NaN misses) is left out, not counted as a low one
    rho = correlations([80e6, float("nan"), 89e6, 80e6, 82e6], stats)
    assert rho["shared_sms"].rho == pytest.approx(spearman([80, 89, 80, 82], [0, 3, 0, 1]))
    assert rho["shared_sms"].n == 4
    with pytest.raises(ValueError, match="4 miss counts for 5 launches"):
        correlations([1, 2, 3, 4], stats)


def test_arrays_round_trip_through_npz(tmp_path):
    traces = []
    for k in range(3):
        t, smid, start, end = _launch([0, 1, 1, 3], [0, 32 * k, 64, 96])
        traces.append(compact(t + k * 10**9, smid, start + k * 10**9, end + k * 10**9,
                              points=4))
    np.savez(tmp_path / "p.npz", **to_arrays(traces))
    back = from_arrays(np.load(tmp_path / "p.npz"))
    assert len(back) == 3
    for a, b in zip(traces, back):
        assert placement(a, 3) == placement(b, 3)
        assert a.base_ns == b.base_ns and b.step_ns.dtype == np.int64
    other = compact(*_launch([0, 1], [0, 0]))
    with pytest.raises(ValueError, match="one case per file"):
        to_arrays([traces[0], other])
    with pytest.raises(ValueError, match="lack base_ns"):
        from_arrays({k: v for k, v in to_arrays(traces).items() if k != "base_ns"})


# -- explorations.variance: the placement condition (CPU parts, fake ncu) ------------------------

from experiments.measurement import target  # noqa: E402
from explorations import variance  # noqa: E402
from profiles.counters import Observation  # noqa: E402
from spec import get_arch  # noqa: E402
from spec.records import Metric, read_csv  # noqa: E402
from tests.cpu.profiles.ncu_helpers import fake_ncu, fixture_cases  # noqa: E402

H100 = get_arch("h100")
PLACEMENT = variance.CONDITIONS["placement"]


def _cuda_cases():
    return [c for c in fixture_cases() if c.variant.backend.value == "cuda"]


def _save(case, path, smid, start=None):
    """What the target writes for one launch: a full trace of 4 steps per CTA, saved compact."""
    n = len(smid)
    t, sm, st, end = _launch(smid, start or [0] * n, steps=4)
    target.save_trace({"time_ns": t, "smid": sm, "start_ns": st, "end_ns": end,
                       "every": 1}, case, path)


def test_placement_condition_profiles_the_trace_build_and_keeps_each_launch(tmp_path,
                                                                            csv_reader):
    cases = fixture_cases()      # the cases of the committed report (its cuTile ones included)
    pre = tmp_path / "pre"
    pre.mkdir()
    for ci, case in enumerate(cases):
        for launch in range(2):
            _save(case, pre / f"c{ci}-l{launch}.npz", [0, 1, 1, 3])
    # the fake ncu plays the target: it leaves the per-launch traces in the plan's trace_dir
    tool = fake_ncu(tmp_path, f'echo "$@" > "{tmp_path}/args"; '
                              f'cp "{pre}"/*.npz "{tmp_path}/placement-traces/"')
    obs = variance.run_condition(tool, PLACEMENT, cases, H100, tmp_path, n=2, sessions=1, seed=0,
                                 log=lambda *_: None)
    args = (tmp_path / "args").read_text().split()
    assert args[args.index("--kernel-name") + 1] == "regex:flash_fwd"
    assert args[args.index("--metrics") + 1].split(",") == [
        Metric.L2_TEX_MISSES, Metric.DRAM_READ_BYTES, Metric.L2_TEX_READ_MISSES,
        Metric.REPLAY_PASSES]
    plan = __import__("json").loads((tmp_path / "placement.plan.json").read_text())
    assert plan["trace_dir"] == str(tmp_path / "placement-traces")
    assert sorted(p.name for p in (tmp_path / "placement-traces-s0").iterdir()) == [
        f"c{ci}-l{launch}.npz" for ci in range(4) for launch in range(2)]
    rows, lines = variance.placement_rows(PLACEMENT, cases, obs, tmp_path, n=2, sessions=1,
                                          run="r", arch="h100")
    assert not (tmp_path / "placement-traces-s0").exists()      # merged, then removed
    for case in cases:
        with np.load(tmp_path / "placement" / variance.case_file(case)) as z:
            assert z["launch"].tolist() == [0, 1] and str(z["case"]) == case.id
            assert z["smid"].shape == (2, 4)
            assert z["n_kv"] == -(-16384 // case.variant.tiles.n)     # K/V tiles per head
    shared = [r for r in rows if r.metric == "shared_sms" and r.stat == ""]
    assert [(r.sample, r.value) for r in shared] == [(0, 1.0), (1, 1.0)] * 4
    # the fixture report's launch 0 took the old 4-pass set; launch 1 has no counters at all
    assert [r.flags for r in shared[:2]] == ["multipass=4", "no counters"]
    assert all(math.isnan(r.value) for r in rows if r.stat == "spearman")   # 1 launch counted
    first = next(o for o in obs if o.case_id == cases[0].id and o.repeat == 0)
    assert lines[1] == cases[0].id
    assert lines[3].split()[:2] == ["0", f"{first.values[Metric.L2_TEX_READ_MISSES][0] / 1e9:.4f}"]


def test_placement_rows_rank_misses_against_the_statistics(tmp_path):
    case = _cuda_cases()[0]
    d = variance.trace_session_dir(tmp_path, PLACEMENT, 0)
    d.mkdir()
    shared = [0, 2, 1, 3, 0]
    for launch, s in enumerate(shared[:4]):                      # launch 4 left no trace
        _save(case, d / f"c0-l{launch}.npz", list(range(8 - s)) + list(range(s)))
    misses = [10e6, 30e6, 20e6, 40e6, 5e6]
    obs = [Observation(case.id, "placement", r, {PLACEMENT.metrics[2]: (m, "sector"),
                                                 Metric.REPLAY_PASSES: (1, "")})
           for r, m in enumerate(misses)]
    rows, lines = variance.placement_rows(PLACEMENT, [case], obs, tmp_path, n=5, sessions=1,
                                          run="r", arch="h100")
    rho = {r.metric: r for r in rows if r.stat == "spearman"}
    assert rho["shared_sms"].value == 1.0 and rho["max_ctas_per_sm"].value == pytest.approx(
        spearman(misses[:4], [1, 2, 2, 2]))
    assert rho["sms_used"].value == -1.0 and "over 4 launches" in rho["sms_used"].note
    assert sorted({r.sample for r in rows if r.stat == ""}) == [0, 1, 2, 3]
    assert all(r.flags == "" for r in rows)
    assert lines[-2].startswith("  Spearman rho vs read misses over 4 launches: shared_sms "
                                "+1.00 (p 0.00)")
    back = read_csv_rows(rows, tmp_path)
    assert {(d["stat"], d["unit"]) for d in back if d["metric"] == "start_spread_ns"} == {
        ("", "ns"), ("spearman", "rho")}


def read_csv_rows(rows, tmp_path):
    from spec.records import write_csv
    write_csv(tmp_path / "placement.csv", rows)
    return read_csv(tmp_path / "placement.csv")


def test_placement_takes_cuda_cases_only_and_cutile_traces_are_refused(tmp_path):
    ids = [c.id for c in variance.cases_for(H100, PLACEMENT, None)]
    assert ids == ["cuda.linear.static132.m80n80d64 b1h1s262144d64.fp16.full",
                   "cuda.linear.static132.m80n80d64 b4h1s262144d64.fp16.full"]
    mixed = variance.cases_for(H100, PLACEMENT, [r"linear\.static132\..* b1h1"])
    assert [c.variant.backend.value for c in mixed] == ["cuda"]
    with pytest.raises(variance.UsageError, match="needs CUDA cases"):
        variance.cases_for(H100, PLACEMENT, [r"^cutile\.linear"])
    with pytest.raises(target.TraceError, match="records no SM ids"):
        target.save_trace({"time_ns": None, "smid": None}, _cuda_cases()[0], tmp_path / "x")
    assert "placement" not in variance.DEFAULT_CONDITIONS
    longer = variance.cases_for(H100, PLACEMENT, [r"linear\.static132\..* b1h1"], seq=(327680,))
    assert [(c.problem.S_q, c.problem.S_kv) for c in longer] == [(327680, 327680)]
    assert variance.main(["--out", str(tmp_path / "s"), "--conditions", "placement",
                          "--seq", "0"]) == 2
    assert not (tmp_path / "s").exists()
    assert variance.main(["--out", str(tmp_path / "v"), "--conditions", "placement",
                          "--cases", "^cutile"]) == 2
    assert not (tmp_path / "v").exists()


from analysis.launch.placement import LaunchTrace, lags  # noqa: E402


def test_lags_at_the_last_step_every_cta_ran():
    # 3 CTAs, steps of 10 ns; CTA 2 has no last sample, so step 5 is the last common one
    t = LaunchTrace(np.array([0, 1, 2], np.int32), np.zeros(3, np.int64), np.zeros(3, np.int64),
                       np.array([0, 5, 9]), np.array([[0, 50, 90], [0, 70, 110], [0, 60, -1]]),
                       10.0, 0)
    step, lag = lags(t)
    assert step == 5
    np.testing.assert_allclose(lag, [-1.0, 1.0, 0.0])     # 5, 7, 6 steps; median 6

"""CPU checks of the CTA placement records: the CUDA trace build's per-CTA buffer layout
(cuda_baseline.backend.unpack_trace) and the placement / drift statistics of analysis.placement
on hand-made launches."""
from __future__ import annotations

import math

import numpy as np
import pytest

from cuda_baseline.backend import unpack_trace


def _buffers(n_ctas: int, steps: int, used: list[int]):
    """Flat trace buffers as the kernel leaves them: CTA c ran ``used[c]`` steps, step s of CTA c
    visited (0, 0, c, s) at 1000 c + 10 s ns, on SM 7 c, started at 1000 c - 5, ended 1000 c + 500."""
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


# -- analysis.placement ------------------------------------------------------------------------

from analysis.drift import drift                                       # noqa: E402
from analysis.placement import (STATISTICS, UNITS, Placement, compact, correlations,  # noqa: E402
                                from_arrays, placement, spearman, step_spread_ns, to_arrays)

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

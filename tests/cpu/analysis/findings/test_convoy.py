"""Section V: the convoy grid's scoring (synthetic rows with hand-computed scores) and the halves
fixed before measuring."""
from __future__ import annotations

import math

import pytest

from analysis.findings import convoy
from spec.records import Metric

M = Metric.L2_TEX_MISSES


def _row(variant, causal, s, value, stat="median"):
    return dict(variant=variant, causal=str(causal), S_q=str(s), metric=M, value=value,
                stat=stat)


V2 = "cuda.linear.static96.m80n80d64"
V3 = V2 + ".st3"
V48 = "cuda.linear.static48.m80n80d64"


def test_the_halves_are_the_plans():
    from experiments.registry.plans import convoy_half, convoy_plan
    from spec import get_arch
    arch = get_arch("h200")
    for c in convoy_plan(arch):
        key = (c.variant.id(c.problem), str(c.problem.causal), c.problem.S_q)
        assert convoy.half_of(key) == convoy_half(c, arch), c.id
    halves = [convoy_half(c, arch) for c in convoy_plan(arch)]
    assert halves.count("fit") == halves.count("judged") == 32


def test_scores_by_hand():
    occ = [("o1", [_row(V2, True, 368640, 100.0), _row(V3, True, 368640, 300.0),
                   _row(V2, True, 368640, 1.0, stat="lo"),              # not a median row
                   _row(V48, True, 245760, 50.0)]),
           ("o2", [_row(V2, True, 368640, 110.0), _row(V3, True, 368640, 330.0),
                   _row(V48, True, 245760, 60.0)]),
           ("o3", [_row(V2, True, 368640, 90.0), _row(V3, True, 368640, 270.0),
                   _row(V48, True, 245760, 40.0)])]
    meas = convoy.measured(occ)
    preds = {"v": convoy.predicted([_row(V2, True, 368640, 125.0), _row(V3, True, 368640, 150.0),
                                    _row(V48, True, 245760, 25.0)])}
    rows = convoy.case_rows(preds, meas, convoy.half_of)
    by = {r["variant"]: r for r in rows}
    assert by[V2]["measured"] == 100.0 and by[V2]["occasions"] == 3
    assert by[V2]["spread_pct"] == pytest.approx(100 * (110 / 90 - 1))
    assert (by[V2]["v_err_pct"] == pytest.approx(25.0)
            and by[V3]["v_err_pct"] == pytest.approx(-50.0))
    assert by[V2]["half"] == "fit" and by[V48]["half"] == "judged"
    s = {(r["half"]): r for r in convoy.summary(rows, ["v"])}
    assert s["fit"]["rel_rms_pct"] == pytest.approx(math.sqrt((25 ** 2 + 50 ** 2) / 2))
    assert s["judged"]["rel_rms_pct"] == pytest.approx(50.0) and s["all"]["cases"] == 3
    assert s["fit"]["within_25pct"] == 1
    (d,) = convoy.depth_changes(rows, ["v"])
    assert d["measured_ratio"] == pytest.approx(3.0) and d["v_ratio"] == pytest.approx(1.2)
    assert d["v_direction_ok"] is True
    assert d["v_size_err_pct"] == pytest.approx(100 * (1.2 / 3.0 - 1))


def test_a_fitted_version_is_scored_on_the_judged_half_only():
    rows = [dict(variant=V2, causal="True", S_q=368640, half="fit", occasions=1, measured=1.0,
                 spread_pct=0.0, **{"pipeline-v2": 1.0, "pipeline-v2_err_pct": 0.0}),
            dict(variant=V48, causal="True", S_q=245760, half="judged", occasions=1,
                 measured=1.0, spread_pct=0.0,
                 **{"pipeline-v2": 2.0, "pipeline-v2_err_pct": 100.0})]
    (s,) = convoy.summary(rows, ["pipeline-v2"])
    assert s["half"] == "judged" and s["rel_rms_pct"] == pytest.approx(100.0)


def test_small_changes_read_as_none():
    assert convoy._direction(1.03) == 0 and convoy._direction(0.97) == 0
    assert convoy._direction(1.2) == 1 and convoy._direction(0.8) == -1


def test_dqpair_rows_by_hand():
    from analysis.findings.backward import dqpair_rows
    lin = "cutile.linear.static132.m64n128d64.occ2.dq"
    saw = "cutile.sawtooth.static132.m64n128d64.occ2.dq"
    pred = [dict(variant=v, causal="False", S_q="327680", metric=M, value=x)
            for v, x in ((lin, 100.0), (saw, 35.0))]
    T = Metric.KERNEL_TIME_MS

    def occ(name, ml, ms, tl, ts):
        counters = [dict(variant=v, causal="False", S_q="327680", metric=M, value=x,
                         stat="median") for v, x in ((lin, ml), (saw, ms))]
        timing = [dict(variant=v, causal="False", S_q="327680", metric=T, value=x,
                       source="measured") for v, xs in ((lin, tl), (saw, ts)) for x in xs]
        return name, counters, timing
    (row,) = dqpair_rows(pred, [occ("a", 200.0, 140.0, [10.0, 10.2], [9.0, 9.4]),
                                occ("b", 200.0, 130.0, [10.0, 10.0], [9.9, 10.1])])
    assert row["order"] == "sawtooth" and row["pred_miss_ratio"] == pytest.approx(0.35)
    assert row["a_miss_ratio"] == pytest.approx(0.7) and row["b_miss_ratio"] == pytest.approx(0.65)
    assert row["a_time_ratio"] == pytest.approx(9.2 / 10.1) and row["a_apart"] is True
    assert row["b_time_ratio"] == pytest.approx(1.0) and row["b_apart"] is False
    assert (row["time_ratio_lo"], row["time_ratio_hi"]) == pytest.approx((9.2 / 10.1, 1.0))


def test_the_committed_grid_was_predicted_first_and_scores_as_reported():
    """On the committed runs: no prediction entered the history after a measurement it is
    scored on (None only where the clone lacks the history), every case of the grid was
    measured on at least two occasions, and pipeline-v2's judged score is what REPORT states."""
    s = convoy.sections("h200")
    order = s["sV_convoy_order"][1]
    assert order and not any(r["prediction_first"] is False for r in order)
    rows = s["sV_convoy"][1]
    assert len(rows) == 64 and min(r["occasions"] for r in rows) >= 2
    (v2,) = [r for r in s["sV_convoy_summary"][1] if r["version"] == "pipeline-v2"]
    assert v2["half"] == "judged" and v2["cases"] == 32
    assert round(v2["rel_rms_pct"], 1) == 18.8

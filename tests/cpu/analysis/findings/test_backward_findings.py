"""Section B (analysis.findings.backward): the comparison logic on hand-made rows, and the claims
the REPORT makes, read from the committed runs (the prediction, the H100 run, the forward's)."""
from __future__ import annotations

import pytest

from analysis.findings.backward import backward_check, forward_pairs, sections
from spec.records import Metric

V = "cutile.{o}.static132.m64n64d64.occ2.{p}"


def _row(metric, order, value, p="dkdv", causal=False, **kw):
    return dict(variant=V.format(o=order, p=p), causal=str(causal), metric=metric,
                value=str(value), **kw)


def test_ratios_ranges_and_the_time_bound_from_hand_made_rows():
    pred = [_row(Metric.L2_TEX_MISSES, "linear", 100), _row(Metric.L2_TEX_MISSES, "sawtooth", 40),
            _row(Metric.DRAM_SECONDS_OF_MISSES, "linear", 0.004),
            _row(Metric.DRAM_SECONDS_OF_MISSES, "sawtooth", 0.001)]
    cnt = [_row(Metric.L2_TEX_MISSES, "linear", 200, stat="median", lo="190", hi="210"),
           _row(Metric.L2_TEX_MISSES, "sawtooth", 150, stat="median", lo="140", hi="195"),
           _row(Metric.DRAM_READ_BYTES, "linear", 3e9, stat="median"),
           _row(Metric.DRAM_READ_BYTES, "sawtooth", 2e9, stat="median")]
    tim = ([_row(Metric.KERNEL_TIME_MS, "linear", t) for t in (10, 11, 12)]
           + [_row(Metric.KERNEL_TIME_MS, "sawtooth", t) for t in (8, 9, 9.5)])
    (r,) = backward_check(pred, cnt, tim, 1e12)
    assert r["pred_ratio"] == pytest.approx(0.4) and r["meas_ratio"] == pytest.approx(0.75)
    assert r["ranges_apart"] is False                      # 140..195 overlaps 190..210
    assert r["max_saving_ms"] == pytest.approx(3.0)
    assert r["dram_saving_ms"] == pytest.approx(1.0)       # 1 GB at 1 TB/s
    assert r["time_ratio"] == pytest.approx(9 / 11) and r["time_apart"] is True


@pytest.fixture(scope="module")
def report():
    return sections("h100")


def test_the_sections_exist_for_the_h100_only(report):
    assert set(report) == {"sB_backward", "sB_backward_peers", "sB_forward"}
    assert sections("gb10") == {}


def test_the_clean_pair_dkdv_noncausal(report):
    """The spill-free pair: the prediction said about a third of linear's misses; the H100 kept
    four fifths (the launches' ranges overlap), read 21% less DRAM and ran 1.0% faster with the
    samples apart, about the DRAM time of the reads it removed."""
    rows = {(r["pass_"], r["causal"]): r
            for r in report["sB_backward"][1] if r["tiles"] == "m64n64"}
    r = rows[("dkdv", False)]
    assert r["pred_ratio"] == pytest.approx(0.383, abs=0.001)
    assert 0.7 < r["meas_ratio"] < 0.9 and not r["ranges_apart"]
    assert r["dram_sawtooth_gb"] / r["dram_linear_gb"] == pytest.approx(0.79, abs=0.02)
    assert r["time_apart"] and 0.985 < r["time_ratio"] < 0.995
    assert 0.5 < r["saving_ms"] / r["dram_saving_ms"] < 2
    assert r["saving_ms"] > r["max_saving_ms"]             # the predicted bound is exceeded


def test_the_confounded_pairs(report):
    """The causal dK/dV sawtooth build (larger stack) misses more and runs 2.6x longer; the
    persistent dQ builds read over ten times the dK/dV pass's DRAM (their spills)."""
    rows = {(r["pass_"], r["causal"]): r
            for r in report["sB_backward"][1] if r["tiles"] == "m64n64"}
    assert rows[("dkdv", True)]["meas_ratio"] > 1.3 and rows[("dkdv", True)]["time_ratio"] > 2
    assert rows[("dq", False)]["dram_linear_gb"] > 10 * rows[("dkdv", False)]["dram_linear_gb"]


def test_the_fair_dq_pairs(report):
    """dQ at 64x128 (twins with the same resources), measured after its prediction: non-causal,
    sawtooth removes a third of the misses (predicted two thirds) and runs over 5% faster, far
    more than the removed DRAM reads can cost; causal, faster with no fewer misses."""
    rows = {r["causal"]: r for r in report["sB_backward"][1]
            if r["pass_"] == "dq" and r["tiles"] == "m64n128"}
    nc, c = rows[False], rows[True]
    assert 0.6 < nc["meas_ratio"] < 0.75 and nc["ranges_apart"] and nc["pred_ratio"] < 0.4
    assert nc["time_ratio"] < 0.95 and nc["time_apart"]
    assert nc["saving_ms"] > 10 * max(nc["max_saving_ms"], nc["dram_saving_ms"])
    assert c["meas_ratio"] > 1.0 and c["time_ratio"] < 1.0 and c["time_apart"]


def test_the_forward_comparison(report):
    """The forward (same problem class) removed three quarters of its misses and kept its
    time; its linear build read five times the DRAM of the backward's dK/dV linear build."""
    f = {r["causal"]: r for r in report["sB_forward"][1]}["False"]
    assert f["miss_ratio"] < 0.3 and not f["time_apart"]
    b = {(r["pass_"], r["causal"]): r
         for r in report["sB_backward"][1] if r["tiles"] == "m64n64"}[("dkdv", False)]
    assert f["dram_linear_gb"] > 4 * b["dram_linear_gb"]


def test_forward_pairs_reads_only_static_cutile_rows():
    cnt = [dict(variant="cutile.linear.static132.m64n64d64.occ2", causal="False",
                metric=Metric.L2_TEX_MISSES, value="10", stat="median"),
           dict(variant="cutile.sawtooth.static132.m64n64d64.occ2", causal="False",
                metric=Metric.L2_TEX_MISSES, value="5", stat="median"),
           dict(variant="cutile.sawtooth.tile2.m64n64d64.occ2", causal="False",
                metric=Metric.L2_TEX_MISSES, value="1", stat="median")]
    tim = [dict(variant=v, causal="False", metric=Metric.KERNEL_TIME_MS, value=str(t))
           for v, t in (("cutile.linear.static132.m64n64d64.occ2", 2),
                        ("cutile.sawtooth.static132.m64n64d64.occ2", 1))]
    (r,) = forward_pairs(cnt, tim)
    assert r["miss_ratio"] == 0.5 and r["time_ratio"] == 0.5

"""analysis.findings: the report's numbers from hand-made rows, and a smoke run on committed data."""
from __future__ import annotations

import math

import numpy as np
import pytest

from analysis import findings as F
from analysis.models import sector_accesses
from spec.records import Metric


def row(metric, value, *, order="linear", schedule="static132", S=4096, B=1, causal=False,
        backend="cuda", tiles=(80, 80), sample=0, study="x", source="measured"):
    return dict(run="r", study=study, arch="h100",
                variant=f"{backend}.{order}.{schedule}.m{tiles[0]}n{tiles[1]}d64",
                backend=backend, order=order, schedule=schedule, tile_m=tiles[0],
                tile_n=tiles[1], occupancy=None, B=B, H=1, H_kv=1, S_q=S, S_kv=S, D=64,
                dtype="fp16", causal=causal, metric=metric, value=float(value), unit="",
                source=source, sample=sample, note="", x=None)


def test_time_verdict_no_difference_within_spread():
    lin = [10.0, 10.5, 11.0]
    assert F.time_verdict(lin, [10.4, 10.6, 10.9]) == "no difference"
    assert F.time_verdict(lin, [9.0, 9.1, 9.2]) == "sawtooth faster"     # 1.4 ms > 1.0 spread
    assert F.time_verdict(lin, [12.5, 12.6, 12.7]) == "sawtooth slower"
    assert F.time_verdict([], [1.0]) == "not measured"


def test_hit_vs_active_table():
    rows = []
    for n, (h, m) in {1: (0, 100), 4: (75, 25), 10: (80, 20)}.items():
        rows += [row(Metric.L2_TEX_HITS, h, schedule=f"static{n}"),
                 row(Metric.L2_TEX_MISSES, m, schedule=f"static{n}")]
    t = F.hit_vs_active(rows, "active-sms")
    assert [r["ctas"] for r in t] == [1, 4, 10]
    assert [round(r["hit_rate_pct"], 6) for r in t] == [0.0, 75.0, 80.0]
    assert [round(r["diff_pp"], 6) for r in t] == [0.0, 0.0, -10.0]


def test_model_error_mape():
    rows = []
    for S, f in ((2048, 1.0), (4096, 1.1), (8192, 0.5)):
        exact = sector_accesses(F.shape_of(dict(S_q=S, S_kv=S, D=64, tile_m=80, tile_n=80,
                                                causal=False, B=1, H=1, H_kv=1))).total
        rows += [row(Metric.L1_SECTORS, exact * f, S=S), row(Metric.L2_SECTORS, exact, S=S)]
    t = {r["counter"]: r for r in F.model_error(rows)}
    l1 = t["L1 sectors (loads)"]
    # |1 - 1/f| per point: 0, 0.0909, 1.0
    assert l1["mape_pct"] == pytest.approx(100 * (0 + 0.1 / 1.1 + 1.0) / 3)
    assert l1["points"] == 3
    assert t["L2 sectors (lts__t_sectors)"]["mape_pct"] == pytest.approx(0.0, abs=1e-12)


def test_sawtooth_vs_linear_row():
    rows, times = [], []
    for order, miss, cold, ms in (("linear", 300, 100, [10, 11, 12]),
                                  ("sawtooth", 150, 100, [10.5, 11.2, 11.4])):
        rows += [row(Metric.L2_TEX_MISSES, miss, order=order),
                 row(Metric.NONCOMPULSORY_MISSES, miss - cold, order=order)]
        times += [row(Metric.KERNEL_TIME_MS, t, order=order, sample=i) for i, t in enumerate(ms)]
    (r,) = F.sawtooth_vs_linear(rows, times)
    assert r["misses_change_pct"] == pytest.approx(-50.0)
    assert r["noncomp_change_pct"] == pytest.approx(-75.0)
    assert r["ms_linear"] == 11 and r["ms_sawtooth"] == 11.2
    assert (r["ms_linear_min"], r["ms_linear_max"]) == (10, 12)
    assert r["time_verdict"] == "no difference"
    flops = 4.0 * 4096 * 4096 * 64
    assert r["tflops_linear"] == pytest.approx(flops / 11e-3 / 1e12)


def test_l1_passthrough_and_consistency():
    rows = [row(Metric.L1_SECTORS, 1000, study="l1l2"), row(Metric.L1_HITS, 1, study="l1l2"),
            row(Metric.L2_TEX_SECTORS, 500, study="l1l2"),
            row(Metric.L2_TEX_HITS, 300, study="l1l2"), row(Metric.L2_TEX_MISSES, 150, study="l1l2")]
    (t,) = F.l1_passthrough(rows)
    assert t["l1_hit_pct"] == pytest.approx(0.1) and t["l2_tex_over_l1"] == pytest.approx(0.5)
    (c,) = F.consistency({"l1l2": rows})
    assert c["ratio_median"] == pytest.approx(0.9) and c["off_by_more_than_5pct"] == 1


def test_extrapolate_b_and_capacity_fit():
    assert F.extrapolate_b(10, 25, 8).tolist() == 10 + 7 * 15

    class Fake:                         # misses fall by 10 per sector of capacity down to 0
        def __init__(self, measured, offset):
            self.measured, self.offset = measured, offset

        def misses(self, cap):
            return np.maximum(0.0, 1000.0 - 10 * np.asarray(cap)) + self.offset

    cases = [Fake(1000.0 - 10 * 40 + o, o) for o in (5.0, 50.0, 500.0)]   # all fit cap = 40
    fit = F.fit_capacity(cases, 0, 90 * 32, sector_bytes=32, grid=91)
    assert fit["capacity_bytes"] // 32 == 40
    assert fit["rel_rms_pct"] == pytest.approx(0.0, abs=1e-9)


def test_curve_matches_reuse_mrc():
    from analysis import reuse
    k = np.array([0, 1, 2, 0, 1, 2], np.int32)
    mrc = reuse.miss_ratio_curve(reuse.stack_distances(k), k)
    c = F.Curve(mrc.need, mrc.hits_upto, mrc.total, mrc.cold)
    assert c.misses(np.array([0, 2, 3, 100])).tolist() == [6, 6, 3, 3]


def test_command_on_committed_data(tmp_path, capsys):
    """Smoke: sections 0-5 on the committed H100 runs (no simulator), files written."""
    if F.find_study_dir("h100", "sawtooth") is None:
        pytest.skip("no committed h100 data")
    assert F.main(["--arch", "h100", "--no-sim", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "5. Sawtooth vs linear" in out
    assert (tmp_path / "findings-h100.md").exists()
    t = {r["config"]: r for r in F.sawtooth_vs_linear(*F.load_study("h100", "sawtooth")[:2])}
    r = t["cutile static132 64x64 B=8 non-causal"]
    assert r["misses_change_pct"] < -50 and r["n_linear"] == 10
    assert all(not math.isnan(x["l1_hit_pct"]) for x in
               F.l1_passthrough(F.load_study("h100", "l1l2")[0]))


def test_simulator_section_small(tmp_path):
    """Section 7 end to end on the cheapest divergence cases (two S, both orders)."""
    if F.find_study_dir("h100", "divergence") is None:
        pytest.skip("no committed h100 data")
    rows, fit = F.simulator_vs_measured(
        "h100", cache_dir=None, studies=("divergence",),
        filt=lambda c: c.problem.S_q <= 126976, log=lambda s: None)
    assert len(rows) == 4 and fit["n_cases"] == 4
    assert 0 < fit["capacity_bytes"] <= 2 * 50 * 2**20
    assert all(r["how"] == "direct" for r in rows)

"""analysis.findings: the report's numbers from hand-made rows, and a smoke run on
committed data."""
from __future__ import annotations

import math

import numpy as np
import pytest

from analysis import data as DS
from analysis.data import rows as R
from analysis.findings import (
    active,
    consistency,
    dram,
    drift,
    l1,
    longseq,
    sawtooth,
    simulator,
    traffic,
)
from analysis.findings.__main__ import main
from analysis.models.traffic import sector_accesses
from spec import get_arch
from spec.records import Metric


def row(metric, value, *, order="linear", schedule="static132", S=4096, B=1, causal=False,
        backend="cuda", tiles=(80, 80), sample=0, study="x", source="measured", D=64, H=1, x=None):
    peer = backend.startswith("sdpa")
    variant = backend if peer else f"{backend}.{order}.{schedule}.m{tiles[0]}n{tiles[1]}d{D}"
    return dict(run="r", study=study, arch="h100", variant=variant,
                backend=backend, order="" if peer else order, schedule="" if peer else schedule,
                tile_m=0 if peer else tiles[0], tile_n=0 if peer else tiles[1], occupancy=None,
                B=B, H=H, H_kv=H, S_q=S, S_kv=S, D=D, dtype="fp16", causal=causal, metric=metric,
                value=float(value), unit="", source=source, sample=sample, note="", x=x)


def load(arch: str, study: str) -> tuple[list[dict], list[dict]]:
    """(counter rows, timing rows) of the run the findings read for ``study``."""
    t = DS.read_run(DS.select(arch, study, source="measured").path)
    return t.get("counters.csv", []), t.get("timing.csv", [])


def labelled_repeats(arch: str, study: str) -> list[tuple[str, list[dict], list[dict]]]:
    reps = DS.repeated_runs(arch, study)
    return [(f"r{i}", *(lambda t: (t.get("counters.csv", []), t.get("timing.csv", [])))(
        DS.read_run(d.path))) for i, d in enumerate(reps, 1)]


def times(ms, **kw):
    """Timing sample rows (kernel_time_ms, samples 0..n-1)."""
    return [row(Metric.KERNEL_TIME_MS, t, sample=i, **kw) for i, t in enumerate(ms)]


def test_time_verdict_no_difference_within_spread():
    lin = [10.0, 10.5, 11.0]
    assert R.time_verdict(lin, [10.4, 10.6, 10.9]) == "no difference"
    assert R.time_verdict(lin, [9.0, 9.1, 9.2]) == "sawtooth faster"     # 1.4 ms > 1.0 spread
    assert R.time_verdict(lin, [12.5, 12.6, 12.7]) == "sawtooth slower"
    assert R.time_verdict([], [1.0]) == "not measured"


def test_hit_vs_active_table():
    rows = []
    for n, (h, m) in {1: (0, 100), 4: (75, 25), 10: (80, 20)}.items():
        rows += [row(Metric.L2_TEX_HITS, h, schedule=f"static{n}"),
                 row(Metric.L2_TEX_MISSES, m, schedule=f"static{n}")]
    t = active.hit_vs_active(rows, "active-sms")
    assert [r["ctas"] for r in t] == [1, 4, 10]
    assert [round(r["hit_rate_pct"], 6) for r in t] == [0.0, 75.0, 80.0]
    assert [round(r["diff_pp"], 6) for r in t] == [0.0, 0.0, -10.0]


def test_model_error_mape():
    rows = []
    for S, f in ((2048, 1.0), (4096, 1.1), (8192, 0.5)):
        exact = sector_accesses(*R.problem_tiles(dict(S_q=S, S_kv=S, D=64, tile_m=80, tile_n=80,
                                                      causal=False, B=1, H=1, H_kv=1))).total
        rows += [row(Metric.L1_SECTORS, exact * f, S=S), row(Metric.L2_SECTORS, exact, S=S)]
    t = {r["counter"]: r for r in traffic.traffic_model_error(rows)}
    l1 = t["L1 sectors (loads)"]
    # |1 - 1/f| per point: 0, 0.0909, 1.0
    assert l1["mape_pct"] == pytest.approx(100 * (0 + 0.1 / 1.1 + 1.0) / 3)
    assert l1["points"] == 3
    assert t["L2 sectors (lts__t_sectors)"]["mape_pct"] == pytest.approx(0.0, abs=1e-12)


def test_sawtooth_vs_linear_row():
    rows, times = [], []
    for order, miss, lo, hi, cold, fills, ms in (
            ("linear", 300, 290, 330, 100, 200, [10, 11, 12]),
            ("sawtooth", 150, 149, 151, 100, 90, [10.5, 11.2, 11.4])):
        rows += [dict(row(Metric.L2_TEX_MISSES, miss, order=order), stat="median", lo=lo, hi=hi),
                 row(Metric.NONCOMPULSORY_MISSES, miss - cold, order=order),
                 row(Metric.DRAM_FILL_SECTORS, fills, order=order)]
        times += [row(Metric.KERNEL_TIME_MS, t, order=order, sample=i) for i, t in enumerate(ms)]
    (r,) = sawtooth.sawtooth_vs_linear(rows, times)
    assert r["misses_change_pct"] == pytest.approx(-50.0)
    assert r["noncomp_change_pct"] == pytest.approx(-75.0)
    assert r["fills_change_pct"] == pytest.approx(-55.0)
    assert r["misses_spread_pct"] == pytest.approx(100 * 40 / 300)   # linear's 290..330 of 300
    assert r["misses_verdict"] == "fewer" and r["D"] == 64
    assert r["ms_linear"] == 11 and r["ms_sawtooth"] == 11.2
    assert (r["ms_linear_min"], r["ms_linear_max"]) == (10, 12)
    assert r["time_verdict"] == "no difference"
    flops = 4.0 * 4096 * 4096 * 64
    assert r["tflops_linear"] == pytest.approx(flops / 11e-3 / 1e12)


def test_l1_passthrough_and_consistency():
    rows = [row(Metric.L1_SECTORS, 1000, study="l1l2"), row(Metric.L1_HITS, 1, study="l1l2"),
            row(Metric.L2_TEX_SECTORS, 500, study="l1l2"),
            row(Metric.L2_TEX_HITS, 300, study="l1l2"),
            row(Metric.L2_TEX_MISSES, 150, study="l1l2")]
    (t,) = l1.l1_passthrough(rows)
    assert t["l1_hit_pct"] == pytest.approx(0.1) and t["l2_tex_over_l1"] == pytest.approx(0.5)
    (c,) = consistency.consistency({"l1l2": rows})
    assert c["ratio_median"] == pytest.approx(0.9) and c["off_by_more_than_5pct"] == 1


def test_extrapolate_b_and_capacity_fit():
    assert simulator.extrapolate_b(10, 25, 8).tolist() == 10 + 7 * 15

    class Fake:                         # misses fall by 10 per sector of capacity down to 0
        def __init__(self, measured, offset):
            self.measured, self.offset = measured, offset

        def misses(self, cap):
            return np.maximum(0.0, 1000.0 - 10 * np.asarray(cap)) + self.offset

    cases = [Fake(1000.0 - 10 * 40 + o, o) for o in (5.0, 50.0, 500.0)]   # all fit cap = 40
    fit = simulator.fit_capacity(cases, 0, 90 * 32, sector_bytes=32, grid=91)
    assert fit["capacity_bytes"] // 32 == 40
    assert fit["rel_rms_pct"] == pytest.approx(0.0, abs=1e-9)


def test_command_on_committed_data(tmp_path, capsys):
    """Smoke: sections 0-5 on the committed H100 runs (no simulator), files written."""
    assert DS.select("h100", "sawtooth") is not None          # this repository commits its data
    assert main(["--arch", "h100", "--no-sim", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "5. Sawtooth vs linear" in out
    assert (tmp_path / "h100" / "findings-h100.md").exists()
    t = {r["config"]: r for r in sawtooth.sawtooth_vs_linear(*load("h100", "sawtooth"))}
    r = t["cutile static132 64x64 B=8 non-causal"]
    assert r["misses_change_pct"] < -50 and r["n_linear"] == 10
    assert all(not math.isnan(x["l1_hit_pct"]) for x in
               l1.l1_passthrough(load("h100", "l1l2")[0]))


def test_simulator_section_small(tmp_path):
    """Section 7 end to end on the cheapest divergence cases (two S, both orders)."""
    d = DS.select("h100", "divergence")                       # committed: never skipped
    cnt = DS.read_run(d.path)["counters.csv"]
    arch = get_arch("h100")
    cases = simulator.run_cases(d.path, cnt, arch, "divergence")
    assert len(cases) == 26 and all(c.resident == 132 for c in cases)
    sims = simulator.measured_cases("divergence", cases, cnt,
                                    filt=lambda c: c.problem.S_q <= 126976)
    rows, fit = simulator.simulator_vs_measured(sims, arch, cache_dir=None, log=lambda s: None)
    assert len(rows) == 4 and fit["n_cases"] == 4
    assert 0 < fit["capacity_bytes"] <= 2 * 50 * 2**20
    assert all(r["how"] == "direct" for r in rows)


# --------------------------------------------------------------------------------------------
# section 5c: repeats
# --------------------------------------------------------------------------------------------
def test_repeat_verdict_rule():
    # noise = 100 * max(range lin 20, range saw 11.5) / mean lin 100 = 20; min |change| 30 > 20
    assert sawtooth.repeat_verdict([-30, -40, -35], [100, 110, 90], [70, 66, 58.5]) == \
        (20.0, "sawtooth fewer")
    assert sawtooth.repeat_verdict([30, 40, 35], [100, 100, 100], [130, 140, 135]) == \
        (10.0, "sawtooth more")
    # the same changes when the sawtooth twin itself moves by 32.5 (% of the linear mean) between
    # runs: the smallest change, 30%, is inside that noise
    assert sawtooth.repeat_verdict([30, 40, 35], [100, 110, 90], [130, 154, 121.5]) == \
        (pytest.approx(32.5), "no difference")
    # one run of the other sign: no difference, whatever the sizes
    _, v = sawtooth.repeat_verdict([-30, -40, 35], [100, 110, 90], [70, 66, 121.5])
    assert v == "no difference"
    # smallest change (10%) inside the noise (100 * 60 / 100 = 60%): no difference
    noise, v = sawtooth.repeat_verdict([-10, -30, -20], [100, 130, 70], [90, 91, 56])
    assert noise == pytest.approx(60.0) and v == "no difference"
    # time: also every run's own verdict, in the same direction
    slow = ["sawtooth slower"] * 3
    assert sawtooth.repeat_verdict([1, 1, 1], [100] * 3, [101] * 3, slow,
                            ("sawtooth faster", "sawtooth slower")) == (0.0, "sawtooth slower")
    assert sawtooth.repeat_verdict([1, 1, 1], [100] * 3, [101] * 3, slow[:2] + ["no difference"],
                            ("sawtooth faster", "sawtooth slower"))[1] == "no difference"
    # a single run is never a verdict
    n, v = sawtooth.repeat_verdict([-50], [100], [50])
    assert math.isnan(n) and v == "no difference"


def _run(miss_lin, miss_saw, ms_lin, ms_saw, cold=10):
    c, t = [], []
    for order, miss, ms in (("linear", miss_lin, ms_lin), ("sawtooth", miss_saw, ms_saw)):
        c += [row(Metric.L2_TEX_MISSES, miss, order=order),
              row(Metric.NONCOMPULSORY_MISSES, miss - cold, order=order)]
        t += times(ms, order=order)
    return c, t


def test_sawtooth_repeats_table():
    runs = [("r1", *_run(110, 66, [10, 10, 10], [10.5, 10.5, 10.5])),
            ("r2", *_run(100, 70, [10, 10, 10], [10.4, 10.5, 10.6])),
            ("r3", *_run(90, 58.5, [10, 10.1, 10.2], [10.7, 10.8, 10.9]))]
    t = {r["quantity"]: r for r in sawtooth.sawtooth_repeats(runs)}
    assert set(t) == {"misses", "noncomp misses", "median time"}
    m = t["misses"]
    assert m["config"] == "cuda static132 80x80 B=1 non-causal"
    assert (m["r1_pct"], m["r2_pct"], m["r3_pct"]) == pytest.approx((-40, -30, -35))
    assert (m["mean_pct"], m["min_pct"], m["max_pct"]) == pytest.approx((-35, -40, -30))
    assert m["noise_pct"] == pytest.approx(20.0) and m["verdict"] == "sawtooth fewer"
    nc = t["noncomp misses"]                       # 100 -> 56, 90 -> 60, 80 -> 48.5
    assert nc["r1_pct"] == pytest.approx(-44.0) and nc["verdict"] == "sawtooth fewer"
    tm = t["median time"]                          # +5%, +5%, +6.86%; noise 100*0.3/10.033
    assert tm["r1_pct"] == pytest.approx(5.0) and tm["r3_pct"] == pytest.approx(100 * 0.7 / 10.1)
    assert tm["noise_pct"] == pytest.approx(100 * 0.3 / np.mean([10, 10, 10.1]))
    # r2: 0.5 ms apart, sawtooth samples span 0.2 -> slower; all three runs say so
    assert tm["within"] == "+ + +" and tm["verdict"] == "sawtooth slower"
    assert sawtooth.sawtooth_repeats(runs[:1]) == []


# --------------------------------------------------------------------------------------------
# section 6: drift
# --------------------------------------------------------------------------------------------
def test_drift_table():
    kw = dict(S=800, order="sawtooth", study="drift")      # 80x80 tiles: n_kv = 10 steps
    rows = [row(Metric.STEP_NS, 100, **kw)]
    rows += [row(Metric.CTA_START_SPREAD_NS, ns, x=x, **kw)
             for x, ns in ((0, 0), (4, 200), (11, 400), (9, 300), (12, 1000), (20, 500))]
    (d,) = drift.drift_table(rows, l2_bytes=2 * 2**20)
    assert d["step_us"] == pytest.approx(0.1) and d["n_kv"] == 10
    assert d["at_step"] == 9 and d["spread_after_one_item"] == pytest.approx(3.0)  # 9 and 11 tie
    assert d["spread_max"] == pytest.approx(10.0) and d["at_step_max"] == 12
    # 10 steps × (K + V tile: 2 × 80 × 64 × 2 B = 20480 B) = 204800 B
    assert d["max_spread_kv_mib"] == pytest.approx(204800 / 2**20)
    assert d["max_spread_over_l2"] == pytest.approx(204800 / (2 * 2**20))
    assert d["steps_sampled"] == 6 and d["l2_mib"] == 2.0


# --------------------------------------------------------------------------------------------
# sections 8 and 9: long sequences
# --------------------------------------------------------------------------------------------
def test_longseq_best():
    kw = dict(S=4096, study="longseq")
    rows = (times([10, 11, 12], backend="cutile", order="linear", schedule="grid", **kw)
            + times([9.0, 9.5, 9.6], backend="cutile", order="sawtooth", schedule="grid", **kw)
            + times([10.5] * 3, order="linear", **kw) + times([12] * 3, order="sawtooth", **kw)
            + times([8] * 3, backend="sdpa-cudnn", **kw)
            + times([16] * 3, backend="sdpa-flash", **kw))
    (r,) = longseq.longseq_best(rows)
    flops = 4.0 * 4096 * 4096 * 64
    assert r["best"] == "cutile sawtooth grid 80x80" and r["best_saw"] == r["best"]
    assert r["best_lin"] == "cuda linear static132 80x80"
    assert r["best_tflops"] == pytest.approx(flops / 9.5e-3 / 1e12)
    assert r["lin_tflops"] == pytest.approx(flops / 10.5e-3 / 1e12)
    assert r["best_over_cudnn"] == pytest.approx(8 / 9.5)
    assert r["best_over_flash"] == pytest.approx(16 / 9.5)
    assert r["lin_over_cudnn"] == pytest.approx(8 / 10.5)
    assert r["saw_vs_lin_time_pct"] == pytest.approx(100 * (9.5 - 10.5) / 10.5)
    assert r["saw_vs_lin"] == "sawtooth faster"           # 1.0 ms apart, spreads 0 and 0.6
    # a causal problem is its own group, with half the flops
    (c,) = longseq.longseq_best(times([10.0] * 3, order="linear", causal=True, **kw))
    assert c["causal"] and c["best_tflops"] == pytest.approx(flops / 2 / 10e-3 / 1e12)
    assert math.isnan(c["saw_tflops"]) and "saw_vs_lin" not in c


def test_dram_bound():
    kw = dict(backend="cutile", tiles=(128, 128), D=128)
    cnt = [row(Metric.DRAM_READ_BYTES, 4e9, order="linear", **kw),
           row(Metric.L2_TEX_MISSES, 5e7, order="linear", **kw),
           row(Metric.DRAM_READ_BYTES, 1e9, order="sawtooth", **kw),
           row(Metric.L2_TEX_MISSES, 2e7, order="sawtooth", **kw)]
    tim = (times([10, 10, 10], order="linear", **kw)
           + times([9.8, 9.9, 10.0], order="sawtooth", **kw))
    lin, saw = dram.dram_bound(cnt, tim, peak_bytes_per_s=1e12)
    assert lin["order"] == "linear" and lin["dram_GB"] == 4.0 and lin["ms"] == 10
    assert lin["dram_GBps"] == pytest.approx(400.0) and lin["dram_peak_pct"] == pytest.approx(40.0)
    assert math.isnan(lin["saving_bound_pct"]) and lin["misses"] == 5e7
    assert saw["dram_GBps"] == pytest.approx(1e9 / 9.9e-3 / 1e9)
    assert saw["time_change_pct"] == pytest.approx(-1.0)
    # (4e9 - 1e9) B at 1e12 B/s = 3 ms = 30% of the linear 10 ms
    assert saw["saving_bound_pct"] == pytest.approx(30.0)


def test_spill_artifact():
    kw = dict(backend="cutile", tiles=(128, 128), D=128)

    def run(lin_miss, lin_l1, lin_ms):
        c = [row(Metric.L2_TEX_MISSES, lin_miss, order="linear", **kw),
             row(Metric.DRAM_READ_BYTES, 10 * lin_miss, order="linear", **kw),
             row(Metric.L1_SECTORS, lin_l1, order="linear", **kw),
             row(Metric.L2_TEX_MISSES, 100, order="sawtooth", **kw),
             row(Metric.DRAM_READ_BYTES, 1000, order="sawtooth", **kw),
             row(Metric.L1_SECTORS, 0, order="sawtooth", **kw)]
        return c, times(lin_ms, order="linear", **kw) + times([1.0], order="sawtooth", **kw)

    lin, saw = dram.spill_artifact(run(5000, 777, [2.0, 2.0]), run(200, 0, [1.0]))
    assert (lin["schedule"], lin["order"], saw["order"]) == ("static132", "linear", "sawtooth")
    assert (lin["misses_forloop"], lin["misses_fixed"]) == (5000, 200)
    assert (lin["dram_GB_forloop"], lin["dram_GB_fixed"]) == (5e-5, 2e-6)
    assert (lin["l1_sectors_forloop"], lin["l1_sectors_fixed"]) == (777, 0)
    flops = 4.0 * 4096 * 4096 * 128
    assert lin["tflops_forloop"] == pytest.approx(flops / 2e-3 / 1e12)
    assert lin["tflops_fixed"] == pytest.approx(flops / 1e-3 / 1e12)
    assert saw["misses_forloop"] == saw["misses_fixed"] == 100


def test_new_sections_on_committed_data(tmp_path, capsys):
    """Smoke on the committed H100 data: the repeats are read run by run (never pooled), the spill
    artifact is no dataset, and every new section is printed and written."""
    assert len(DS.repeated_runs("h100", "sawtooth")) >= 2     # committed: never skipped
    assert all("spill" not in d.path.name for d in DS.discover("h100"))
    runs = labelled_repeats("h100", "sawtooth")
    rep = sawtooth.sawtooth_repeats(runs)
    s5 = {r["config"]: r for r in sawtooth.sawtooth_vs_linear(runs[0][1], runs[0][2])}
    assert len(rep) == 3 * len(s5)
    for r in rep:                                    # r1 of 5c is section 5 (run r1 alone)
        key = {"misses": "misses_change_pct", "noncomp misses": "noncomp_change_pct",
               "median time": "time_change_pct"}[r["quantity"]]
        assert r["r1_pct"] == pytest.approx(s5[r["config"]][key])
        assert r["min_pct"] <= r["mean_pct"] <= r["max_pct"]
        assert r["verdict"] in ("no difference", "sawtooth fewer", "sawtooth more",
                                "sawtooth faster", "sawtooth slower")
    assert main(["--arch", "h100", "--no-sim", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for title in ("5c. Sawtooth vs linear across repeated runs", "6. CTA drift",
                  "8. Best configuration at long S", "8b. Sawtooth vs linear at long S",
                  "9a. DRAM bound", "9b. Spill artifact"):
        assert title in out
    for name in ("s5_repeats", "s6_drift", "s8_longseq_best", "s8_longseq_counters",
                 "s9_dram_bound", "s9_spill_artifact"):
        assert (tmp_path / "h100" / f"{name}.csv").stat().st_size > 10
    rows = DS.csv_rows(DS.stored(DS.select("h100", "drift").path, "drift.csv"))
    table = drift.drift_table(rows, 50 * 2**20)
    assert len(table) == sum(r["metric"] == Metric.STEP_NS for r in rows)
    assert all(d["spread_max"] >= d["spread_after_one_item"] for d in table)


def test_other_arch_without_new_data(capsys):
    """h200 has no repeats, drift, longseq or hints runs: those sections are named in one line, not
    printed as empty tables."""
    assert DS.select("h200", "sawtooth") is not None          # committed: never skipped
    assert main(["--arch", "h200", "--no-sim"]) == 0
    out = capsys.readouterr().out
    assert "5c. Sawtooth vs linear across repeated runs" not in out          # no table of nothing
    assert "No data for 13 section(s): P5, P5b, P7, P7b, P8, P8b, 5c, 6, 8, 8b, 9a, 9b, 10" in out


def test_section_7d_reads_the_committed_validations_and_names_the_holdout():
    from analysis.findings.validation import simcheck_summaries
    rows = simcheck_summaries("h100")
    got = {(r["validation"], r["study"], r["sample"]): r for r in rows}
    hold = got[("simcheck-h100-holdout-20261124", "all", "out")]
    assert (hold["stable"], hold["rel_rms_pct"], hold["unstable"]) == (19, 25.6, 5)
    assert hold["standing"].startswith("holdout")
    seen = got[("simcheck-h100-20261124", "all", "in")]
    assert seen["rel_rms_pct"] == 18.0 and seen["standing"].startswith("measured before")
    assert ("simcheck-h100-20261124", "all", "out") in got
    assert all(r["source"] == "simulated vs measured" for r in rows)
    assert not any(r["validation"].startswith("simcheck-h200") for r in rows)
    chip = got[("simcheck-h100-holdout-20261125f/gpu-800ee51b", "all", "out")]   # one chip's runs
    assert (chip["stable"], chip["rel_rms_pct"]) == (17, 17.4)
    assert chip["standing"].startswith("holdout")
    assert got[("simcheck-h100-holdout-20261125f", "all", "out")]["rel_rms_pct"] == 6.6
    # summaries committed gzipped (since 2026-11-25) are read too, one chip's beside the pool
    assert got[("simcheck-h100-holdout-20261125i", "all", "out")]["rel_rms_pct"] == 38.5
    pool = got[("simcheck-h100-holdout-20261125i-3chips", "all", "out")]
    assert (pool["stable"], pool["rel_rms_pct"]) == (8, 17.9)
    assert got[("simcheck-h100-holdout-20261125i-3chips/gpu-99e51e9f", "all", "out")][
        "stable"] == 11

"""The GB10 mechanism study's evidence holds together: the committed candidate scores (history,
printed when the scan still scored against the published counts) are what the committed rows
give, the scan now reports counts beside the published ones and scores nothing, the candidate
that is the committed model reproduces the main command's GB10 run, and the findings P5 / P6
arithmetic does what its docstrings say."""
from __future__ import annotations

import re

import numpy as np
import pytest

from analysis.data import csv_rows, read_file
from analysis.data.published import key_of_row, read_published
from analysis.findings.paper import by_occupancy, hints_builds, speedup_needs
from analysis.findings.sawtooth import sawtooth_repeats
from explorations import gb10_mechanism as mech
from spec.records import Metric
from tests.conftest import ROOT

RUN = ROOT / "profiles/cpu/mechanism-gb10-20261126"


def _rows(arch: str) -> list[dict]:
    out = []
    for r in csv_rows(RUN / f"{arch}.csv", typed=False):
        for k in ("simulated", "truth", "truth_spread", "rel_err"):
            r[k] = float(r[k])
        out.append(r)
    return out


def test_the_committed_scores_are_what_the_committed_rows_give():
    """The committed summary is history (docs/model-changelog.md cites it): its GB10 scores were
    printed by the scan when it still scored against the published counts. They are what the
    committed rows give, recomputed here; the H100 lines are what the scan prints today."""
    gb10, h100 = _rows("gb10"), _rows("h100")
    committed = read_file(RUN / "summary.txt").decode().splitlines()
    names = {n for n, *_ in mech.candidates("gb10")} | {"committed"}
    assert {r["candidate"] for r in gb10} == names
    scored = 0
    for line in committed:
        m = re.match(r"gb10 (.+?)\s+(\d+)/16 within 10%, median \|err\|\s+([\d.]+)%", line)
        if not m:
            continue
        per: dict[str, list[float]] = {}
        for r in gb10:
            if r["candidate"] == m[1]:
                per.setdefault(r["case"], []).append(r["simulated"] / r["truth"] - 1)
        err = [abs(float(np.median(v))) for v in per.values()]
        assert len(err) == 16 and sum(e <= 0.10 for e in err) == int(m[2])
        assert 100 * float(np.median(err)) == pytest.approx(float(m[3]), abs=0.05)
        scored += 1
    assert scored == len(names)
    lines = mech.summarise(gb10 + h100)
    assert [x for x in lines if x.startswith("h100")] == \
        [x for x in committed if x.startswith("h100")]


def test_the_scan_reports_counts_and_never_scores_the_published_ones():
    """On GB10 the scan prints each candidate's counts beside the published ones: no count
    within a bound, no median error, no worst factor, no ranking (the model card says why)."""
    lines = [x for x in mech.summarise(_rows("gb10")) if x.startswith("gb10")]
    assert len(lines) == 2 + 14                    # the case list, the published line, 14 each
    for word in ("within", "median", "worst", "best", "score"):
        assert not any(word in x for x in lines), word
    published = lines[1].split("|")[0].split()[2:]
    assert sorted(float(x) for x in published) == \
        sorted(round(c.misses / 1e6, 1) for c in read_published())
    assert lines[1].endswith("-84.9%")


def test_the_occupancy_candidate_is_the_step_model_of_the_gb10_study():
    """The candidate every other one builds on is the step model (every step one unit) of the
    GB10 study with the authors' occupancy: its CUDA B=1 counts are what ``timed_rows`` gives
    with the step model today, and its score was 8 of 16 (the pipeline model, the main command's
    default since, scores 10: findings P2)."""
    from experiments.registry.plans import sawtooth_plan
    from experiments.simulation.simulate import model_params, timed_rows
    from spec import get_arch
    from spec.records import case_fields
    arch = get_arch("gb10")
    occ = [r for r in _rows("gb10") if r["candidate"] == "occupancy"]
    assert len(occ) == 16
    assert sum(abs(r["rel_err"]) <= 0.10 for r in occ) == 8
    pub = {c.key: c for c in read_published()}
    sim = {}
    for c in sawtooth_plan(arch):
        if c.variant.backend.value == "cuda" and c.problem.B == 1:
            rows = timed_rows(c, arch, model_params(arch), run="check", study="sawtooth",
                              point=None, sample=True)   # the committed scan was sampled
            (m,) = [x.value for x in rows if x.metric == Metric.L2_TEX_MISSES]
            sim[key_of_row(case_fields(c.problem, c.variant))] = m
    assert len(sim) == 2
    for r in occ:
        (key,) = [k for k, c in pub.items() if abs(c.misses - r["truth"]) < 0.5]
        if key in sim:
            assert r["simulated"] == sim[key]


def _row(variant, metric, value, occ, order, lo=None, hi=None, stat=None, source="measured"):
    return dict(variant=variant, metric=metric, value=value, occupancy=occ, order=order,
                lo=lo, hi=hi, stat=stat, source=source)


def test_hints_builds_pools_runs_and_scores_the_prediction():
    v = "cutile.linear.tile2.m64n64d64.occ1"
    runs = [(f"r{i}", [_row(v, Metric.L2_TEX_MISSES, m, "1", "linear", lo, hi, "median")],
             [_row(v, Metric.KERNEL_TIME_MS, t, "1", "linear") for t in ts])
            for i, (m, lo, hi, ts) in enumerate([(100.0, 95.0, 104.0, [2.0, 3.0, 4.0]),
                                                 (102.0, 99.0, 130.0, [5.0])], 1)]
    pred = [_row(v, Metric.L2_TEX_MISSES, 110.0, "1", "linear", source="simulated")]
    (row,) = hints_builds(runs, pred)
    assert (row["misses"], row["misses_lo"], row["misses_hi"]) == (101.0, 95.0, 130.0)
    assert row["stable"] is False                       # (130 - 95) / 101 > 15%
    assert row["predicted_err_pct"] == pytest.approx(100 * (110 / 101 - 1))
    assert (row["r1_ms"], row["r2_ms"]) == (3.0, 5.0)


def test_by_occupancy_never_pairs_builds_of_different_hints():
    seen = []

    def repeats(runs):
        seen.append({r["occupancy"] for _, c, t in runs for r in c + t})
        return [dict(config="x")]
    rows = [_row("a", Metric.KERNEL_TIME_MS, 1.0, occ, "linear") for occ in ("1", "2")]
    out = by_occupancy([("r1", [], rows), ("r2", [], rows)], repeats)
    assert seen == [{"1"}, {"2"}] and [r["occupancy"] for r in out] == ["1", "2"]
    assert by_occupancy([("r1", [], rows)], sawtooth_repeats) == []      # one run: no verdict


def test_speedup_needs_reads_the_published_numbers_through_the_time_model():
    rows = {r["case"]: r for r in speedup_needs(read_published())}
    assert len(rows) == 8
    st = rows["cuTile Static causal"]
    # time = the paper's FLOPs (x0.5 causal) over its TFLOPS; the stall is the time change per step
    assert st["ms_linear"] == pytest.approx(1e3 * 2 * 8 * 131072 ** 2 * 64 / 32.21e12)
    assert st["stall_us_per_step"] == pytest.approx(
        1e3 * (st["ms_linear"] - st["ms_sawtooth"]) / st["steps"])
    assert st["f_linear"] > 1 > st["f_sawtooth"]            # the causal linear convoy breaks
    # bandwidth cannot be the channel: every linear build reads DRAM far below 273 GB/s
    assert all(r["dram_pct_of_peak_linear"] < 15 for r in rows.values())
    assert rows["CUDA B=1 non-causal"]["stall_us_per_step"] > 20

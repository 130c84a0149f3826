"""The backward figure draws the committed runs' numbers: the measured misses (ncu medians) beside
the committed prediction, the kernels' median times with their sample ranges, and for a
simulated-only run (GB10) the DRAM time of the simulated misses."""
from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from analysis.data import read_run
from paper_figures import backward as fig
from spec.records import Metric

H100 = Path("profiles/h100/backward-20261127")
PRED = Path("profiles/h100/backward-prediction-20261127")
GB10 = Path("profiles/gb10/backward-20261127")


def _rows(run: Path) -> list[dict]:
    t = read_run(run)
    return t.get("counters.csv", []) + t.get("timing.csv", [])


def _group(variant: str, causal) -> int:
    return fig.group_of(variant, str(causal) == "True")


def test_measured_bars_are_the_ncu_medians_and_the_prediction():
    d = fig.load(_rows(H100))
    for run, source, want in ((H100, "measured", "median"), (PRED, "predicted", "")):
        for r in read_run(run)["counters.csv"]:
            if r["metric"] == Metric.L2_TEX_MISSES and (r.get("stat") or "") == want:
                key = (r["variant"].split(".")[1], source)
                assert d["misses"][key][_group(r["variant"], r["causal"])] == \
                    pytest.approx(float(r["value"]) / 1e6)


def test_time_bars_are_the_median_samples_with_their_range():
    d = fig.load(_rows(H100))
    samples: dict = {}
    for r in read_run(H100)["timing.csv"]:
        if r["metric"] == Metric.KERNEL_TIME_MS and r["variant"].startswith("cutile."):
            samples.setdefault((r["variant"], r["causal"]), []).append(float(r["value"]))
    for (v, c), s in samples.items():
        key, g = (v.split(".")[1], "measured"), _group(v, c)
        assert d["times"][key][g] == pytest.approx(statistics.median(s))
        assert (d["errors"][key][0][g], d["errors"][key][1][g]) == (min(s), max(s))
    assert set(d["peers"]) == {("sdpa-flash", "measured"), ("sdpa-cudnn", "measured")}


def test_a_simulated_run_draws_the_dram_time_of_its_misses():
    d = fig.load(_rows(GB10))
    assert not d["measured"] and not d["errors"]
    for r in read_run(GB10)["counters.csv"]:
        if r["metric"] == Metric.DRAM_SECONDS_OF_MISSES:
            key = (r["variant"].split(".")[1], "simulated")
            assert d["times"][key][_group(r["variant"], r["causal"])] == \
                pytest.approx(float(r["value"]) * 1e3)
    fig.plot(d, "gb10")


def test_the_64x128_dq_pairs_are_groups_of_their_own():
    """A run holding the dQ pass at both tile sizes (here the two committed predictions as one
    run) keeps each build's misses in its own group; the drawn groups are the six it has."""
    pred_b = Path("profiles/h100/backward-prediction-20261127b")
    rows = [dict(r, run="both") for p in (PRED, pred_b) for r in read_run(p)["counters.csv"]]
    d = fig.load(rows)
    n = 0
    for r in rows:
        if r["metric"] == Metric.L2_TEX_MISSES:
            key = (r["variant"].split(".")[1], "simulated")
            assert d["misses"][key][_group(r["variant"], r["causal"])] == \
                pytest.approx(float(r["value"]) / 1e6)
            n += 1
    assert n == 12
    f = fig.plot(d, "h100")
    assert len(f.axes[0].get_xticklabels()) == len(fig.GROUPS) == 6

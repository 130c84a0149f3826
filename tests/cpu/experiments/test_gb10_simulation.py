"""The committed GB10 simulation is what the code computes now: every one of its 16 cases
recomputed exactly (slow), the sampled path with prefetch recomputed against the SHARDS check's
record (fast: it is the path that back-dates late prefetches after a skip), and what a sampled
row says about itself."""
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from analysis.data import csv_rows, load_rows, read_manifest, select
from experiments.registry.studies import get_study
from experiments.simulation.simulate import (
    SHARDS_RUN,
    model_params,
    resident_of_build,
    shards_check,
    timed_counts,
    timed_rows,
)
from spec import get_arch

MISSES = "lts__t_sectors_srcunit_tex_lookup_miss.sum"


def _plan():
    arch = get_arch("gb10")
    return arch, model_params(arch), get_study("sawtooth").plan(arch)


@pytest.mark.slow
def test_every_committed_gb10_case_is_what_the_exact_simulator_gives_now():
    """All 16 cases of the main command, exact, on two threads (about 20 s on two idle cores):
    every metric's value and every note equal the committed run's, and that run says it is
    exact. A change to the model, its parameters, the plan or a build's facts fails here until
    the committed run is regenerated (and README, REPORT and findings P restated from it)."""
    arch, params, plan = _plan()
    ds = select("gb10", "sawtooth", source="simulated")
    p = read_manifest(ds.path)["parameters"]
    assert p["exact"] is True and p["sampled"] is False
    committed = {(r["variant"], r["B"], r["causal"], r["metric"]): (r["value"], r["note"])
                 for r in load_rows([ds])}
    assert len(committed) == 16 * 14
    with ThreadPoolExecutor(max_workers=2) as pool:
        rows = [r for rs in pool.map(lambda c: timed_rows(c, arch, params, run="check",
                                                          study="sawtooth"), plan) for r in rs]
    got = {(r.variant, r.B, r.causal, r.metric): (r.value, r.note) for r in rows}
    assert got.keys() == committed.keys()
    bad = [(k, got[k][0], committed[k][0]) for k in got if got[k] != committed[k]]
    assert not bad, bad[:5]


def _shards_rows():
    return {(r["case"], int(r["seed"])): r
            for r in csv_rows(f"{SHARDS_RUN}/shards.csv", typed=False)}


@pytest.mark.parametrize("pick", [
    "cutile.linear.static48.m64n64d64.occ1 b8h1s131072d64.fp16.causal",
    "cuda.sawtooth.static48.m80n80d64 b8h1s131072d64.fp16.full"])
def test_sampled_cases_with_prefetch_are_what_the_shards_check_recorded(pick):
    """Two sampled cases whose builds load ahead (the cuTile causal linear build two steps, the
    CUDA one one step): after every skip of unsampled steps their prefetches are issued late and
    back-dated (``analysis.cache.timeloop``). Seed 0's sampled misses equal the committed SHARDS
    check's; its exact ones are checked by the slow test above."""
    arch, params, plan = _plan()
    (case,) = [c for c in plan if c.id == pick]
    case = resident_of_build(case, arch)[0]
    counts = timed_counts(case, arch, params, seed=0, sample=True)
    assert counts.params.prefetch >= 1 and counts.params.sample_rate < 1
    want = _shards_rows()[case.id, 0]
    assert counts.tex_misses == int(want["sampled_misses"])
    assert counts.params.sample_rate == float(want["sample_rate"])


def test_the_shards_check_summary_is_its_rows():
    """The range a sampled row quotes is the check's rows' range, under the model that runs."""
    from analysis.cache.timesim import MODEL_VERSION
    rows = list(_shards_rows().values())
    m = shards_check()
    assert len(rows) == 16 * len(m["seeds"]) and len(m["seeds"]) >= 5
    errs = [float(r["sampled_err_pct"]) for r in rows]
    assert (m["err_pct_min"], m["err_pct_max"]) == (min(errs), max(errs))
    assert m["model_version"] == MODEL_VERSION


def test_a_sampled_row_states_its_seed_spread_and_an_exact_one_nothing():
    """``timed_rows(sample=True)`` runs the case at five seeds and its note says what they span
    and the check's range; the exact row of the same case says neither."""
    arch, params, plan = _plan()
    (case,) = [c for c in plan if c.id.startswith("cutile.sawtooth.static48")
               and c.problem.causal]
    case = replace(case, problem=replace(case.problem, S_q=16384, S_kv=16384))
    sampled = timed_rows(case, arch, params, run="r", study="s", sample=True)
    exact = timed_rows(case, arch, params, run="r", study="s")
    (note,) = {r.note for r in sampled}
    assert "SHARDS R=" in note and "sampled, not exact: tex misses over seeds 0-4 span" in note
    m = shards_check()
    name = SHARDS_RUN.rsplit("/", 1)[-1]
    assert f"{m['err_pct_min']:+.1f}..{m['err_pct_max']:+.1f}% ({name})" in note
    assert all("SHARDS" not in r.note and "sampled" not in r.note for r in exact)

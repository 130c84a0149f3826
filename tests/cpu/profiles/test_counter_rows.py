"""Pass-aware, repeated ncu counters without a GPU: metric groups, repeat statistics,
consistency flags, what a miss is (DRAM fills vs local tex misses), the rows of a collection
(per repeat, summaries, one home row per case and metric) and their CSV schema."""
from __future__ import annotations

import math

import pytest

from profiles import counters, metrics
from profiles.counters import Observation, summarize
from profiles.ingest import parse_raw_csv
from spec.records import Metric, read_bytes
from tests.conftest import ROOT
from tests.cpu.profiles.ncu_helpers import RAW_CSV, fixture_cases, pick


def test_groups_are_small_disjoint_by_home_and_cover_the_old_sets():
    homes = [m for g in metrics.GROUPS.values() for m in g.metrics]
    assert len(homes) == len(set(homes)), "a metric is home in two groups"
    assert set(metrics.HOPPER) <= set(homes)
    for g in metrics.GROUPS.values():
        assert g.collect[-1] == Metric.REPLAY_PASSES and len(g.collect) <= 4
        assert not set(g.also) & set(g.metrics)
    tex = metrics.GROUPS["tex"]
    assert set(tex.collect) == {Metric.L2_TEX_SECTORS, Metric.L2_TEX_HITS, Metric.L2_TEX_MISSES,
                                Metric.REPLAY_PASSES}
    # the miss count is read from the one-pass session beside the DRAM bytes
    assert metrics.home_group(Metric.L2_TEX_MISSES, metrics.get_groups(("tex", "dram"))) == "dram"
    assert metrics.home_group(Metric.L2_TEX_MISSES, metrics.get_groups(("tex",))) is None
    with pytest.raises(ValueError, match="unknown metric group.*nope"):
        metrics.get_groups(("tex", "nope"))
    with pytest.raises(ValueError, match="distinct"):
        metrics.get_groups(("tex", "tex"))


def test_summary_is_median_and_min_max_of_the_repeats_that_succeeded():
    s = summarize([20.7e9, math.nan, 12.7e9, 21.7e9])
    assert (s.median, s.lo, s.hi, s.n) == (20.7e9, 12.7e9, 21.7e9, 3)
    assert s.spread == pytest.approx(9.0 / 20.7)
    assert summarize([math.nan]).n == 0 and math.isnan(summarize([]).median)
    assert summarize([4.0, 1.0]).median == 2.5


def test_derive_dram_fills_and_same_pass_ratios():
    v = {Metric.DRAM_READ_BYTES: 67.1e6, Metric.L2_TEX_MISSES: 3.15e6}
    d = counters.derive(v, 32)
    assert d[Metric.DRAM_FILL_SECTORS] == pytest.approx(2.096875e6)
    assert d[Metric.CHECK_DRAM_PER_TEX_MISS] == pytest.approx(2.096875e6 / 3.15e6)
    d = counters.derive({Metric.L2_TEX_SECTORS: 100, Metric.L2_TEX_HITS: 60,
                         Metric.L2_TEX_MISSES: 37}, 32)
    assert d == {Metric.CHECK_TEX_LOOKUPS: pytest.approx(0.97)}
    # nothing to compare: no denominator
    assert counters.derive({Metric.L2_FABRIC_SECTORS: 0, Metric.L2_FABRIC_HITS: 0,
                            Metric.L2_FABRIC_MISSES: 0}, 32) == {}


def test_dram_per_tex_miss_flags_only_fills_above_the_misses():
    check = counters.SAME_PASS_CHECKS[2]
    assert check.metric == Metric.CHECK_DRAM_PER_TEX_MISS
    assert not check.fails(0.67, 0.02)        # fabric hits explain fewer fills than misses
    assert check.fails(1.05, 0.02)
    tex = counters.SAME_PASS_CHECKS[0]
    assert tex.fails(0.97, 0.02) and tex.fails(1.03, 0.02) and not tex.fails(1.019, 0.02)


def obs(case, group, repeat, values, passes=1, error=""):
    vals = {} if error else {m: (v, "sector") for m, v in values.items()} | {
        Metric.REPLAY_PASSES: (passes, "pass")}
    return Observation(case.id, group, repeat, vals, kernel="" if error else "fmha", error=error)


def synthetic():
    """Two cases x groups tex, fabric, dram x 3 repeats. Case a: consistent, one multi-pass
    repeat of fabric; case b: repeat 1 of tex fails, repeat 2 of tex has hits + misses 5% short."""
    a, b = fixture_cases()[:2]
    out = []
    for r, miss in enumerate((100.0, 110.0, 90.0)):
        out.append(obs(a, "tex", r, {Metric.L2_TEX_SECTORS: 1000, Metric.L2_TEX_HITS: 1000 - miss,
                                      Metric.L2_TEX_MISSES: miss}))
        out.append(obs(a, "fabric", r, {Metric.L2_FABRIC_SECTORS: 50, Metric.L2_FABRIC_HITS: 30,
                                         Metric.L2_FABRIC_MISSES: 20}, passes=2 if r == 1 else 1))
        out.append(obs(a, "dram", r, {Metric.DRAM_READ_BYTES: 70 * 32,
                                       Metric.L2_TEX_MISSES: miss}))
    out.append(obs(b, "tex", 0, {Metric.L2_TEX_SECTORS: 1000, Metric.L2_TEX_HITS: 800,
                                  Metric.L2_TEX_MISSES: 200}))
    out.append(obs(b, "tex", 1, {}, error="ncu failed: The application returned an error code"))
    out.append(obs(b, "tex", 2, {Metric.L2_TEX_SECTORS: 1000, Metric.L2_TEX_HITS: 750,
                                  Metric.L2_TEX_MISSES: 200}))
    return (a, b), out


def rows_of(observations, cases, groups=("tex", "fabric", "dram")):
    return counters.rows(observations, list(cases), metrics.get_groups(groups), repeats=3,
                         run="r", study="s", arch="h100", sector_bytes=32)


def test_rows_per_repeat_summary_and_flags():
    (a, b), observations = synthetic()
    rows = rows_of(observations, (a, b))
    assert {r.source for r in rows} == {"measured"}
    # per repeat: every collected metric of the group, sample = repeat index
    per = [r for r in rows if r.variant == a.variant.id(a.problem) and r.group == "tex"
           and r.stat == "" and r.metric == Metric.L2_TEX_MISSES]
    assert [(r.sample, r.value) for r in per] == [(0, 100.0), (1, 110.0), (2, 90.0)]
    s = pick(rows, a, Metric.L2_TEX_MISSES, "tex")
    assert (s.value, s.lo, s.hi) == (100.0, 90.0, 110.0) and s.note.startswith("n=3 of 3")
    assert s.flags == ""
    # the multi-pass repeat is flagged, and so is the group's summary
    assert pick(rows, a, Metric.L2_FABRIC_HITS, "fabric", stat="", sample=1).flags == "multipass=2"
    assert pick(rows, a, Metric.L2_FABRIC_HITS, "fabric").flags == "multipass=2"
    assert pick(rows, a, Metric.REPLAY_PASSES, "fabric").hi == 2
    # the same tex miss counter in two groups stays two series
    assert pick(rows, a, Metric.L2_TEX_MISSES, "dram").value == 100.0
    # failed repeat: NaN rows with the reason, counted in the summary, never averaged in
    failed = pick(rows, b, Metric.L2_TEX_MISSES, "tex", stat="", sample=1)
    assert math.isnan(failed.value) and failed.flags == "failed"
    assert "returned an error code" in failed.note
    sb = pick(rows, b, Metric.L2_TEX_MISSES, "tex")
    assert sb.value == 200.0 and sb.note.startswith("n=2 of 3")
    assert sb.flags.split(";") == ["failed=1", f"inconsistent={Metric.CHECK_TEX_LOOKUPS}"]


def test_consistency_checks_and_the_two_meanings_of_a_miss():
    (a, b), observations = synthetic()
    rows = rows_of(observations, (a, b))
    chk = pick(rows, a, Metric.CHECK_TEX_LOOKUPS, "tex")
    assert chk.value == 1.0 and chk.flags == ""
    bad = pick(rows, b, Metric.CHECK_TEX_LOOKUPS, "tex", stat="", sample=2)
    assert bad.value == pytest.approx(0.95) and "inconsistent=check_tex_lookups" in bad.flags
    assert pick(rows, b, Metric.CHECK_TEX_LOOKUPS, "tex", stat="", sample=0).flags == ""
    # DRAM fills: measured (bytes / 32) and estimated (tex misses - fabric hits = 100 - 30)
    assert pick(rows, a, Metric.DRAM_FILL_SECTORS, "dram").value == 70
    est = pick(rows, a, Metric.DRAM_FILL_ESTIMATE_SECTORS)
    assert (est.value, est.lo, est.hi, est.group) == (70, 60, 80, "derived")
    assert "cross-pass" in est.note
    ratio = pick(rows, a, Metric.CHECK_DRAM_PER_ESTIMATE)
    assert ratio.value == 1.0 and ratio.flags == "" and (ratio.lo, ratio.hi) == (70 / 80, 70 / 60)
    per_miss = pick(rows, a, Metric.CHECK_DRAM_PER_TEX_MISS, "dram")
    assert per_miss.value == pytest.approx(0.7) and per_miss.flags == ""
    # case b has no fabric or dram group: no estimate rows, and its failing check is listed
    assert not [r for r in rows if r.variant == b.variant.id(b.problem) and r.group == "derived"]
    failing = counters.failing_checks(rows)
    assert [(r.variant, r.metric) for r in failing] == [
        (b.variant.id(b.problem), Metric.CHECK_TEX_LOOKUPS)]
    assert {r.metric for r in counters.flagged(rows)} >= {Metric.L2_FABRIC_HITS,
                                                          Metric.CHECK_TEX_LOOKUPS}


def test_estimate_check_flags_a_fill_model_that_does_not_hold():
    (a, _), observations = synthetic()
    observations = [o if o.group != "dram" else
                    obs(a, "dram", o.repeat, {Metric.DRAM_READ_BYTES: 90 * 32,
                                              Metric.L2_TEX_MISSES: 100}) for o in observations
                    if o.case_id == a.id]
    rows = rows_of(observations, (a,))
    ratio = pick(rows, a, Metric.CHECK_DRAM_PER_ESTIMATE)
    assert ratio.value == pytest.approx(90 / 70) and ratio.flags == \
        f"inconsistent={Metric.CHECK_DRAM_PER_ESTIMATE}"
    assert counters.failing_checks(rows) == [ratio]


def test_rows_reject_observations_of_unknown_cases_or_groups():
    (a, b), observations = synthetic()
    with pytest.raises(ValueError, match="not in the case list"):
        rows_of(observations, (a,))
    with pytest.raises(ValueError, match="unknown metric group"):
        rows_of(observations, (a, b), groups=("tex", "fabric"))


def test_real_export_checks_hits_plus_misses_against_sectors():
    """The committed H100 export (old 'hopper' set, 4 passes): every row is flagged multipass,
    and the tex check flags exactly the kernels whose lookups miss the sectors by > 2%."""
    tex = metrics.GROUPS["tex"]
    ks = parse_raw_csv(read_bytes(RAW_CSV).decode(), tex.collect)
    cases = fixture_cases()
    observations = [Observation(k.nvtx_range, "tex", 0, dict(k.values), kernel=k.kernel)
                    for k in ks]
    rows = counters.rows(observations, cases, (tex,), repeats=1, run="r", study="s",
                         arch="h100", sector_bytes=32)
    for k, case in zip(ks, [next(c for c in cases if c.id == k.nvtx_range) for k in ks]):
        v = {m: x for m, (x, _) in k.values.items()}
        ratio = (v[Metric.L2_TEX_HITS] + v[Metric.L2_TEX_MISSES]) / v[Metric.L2_TEX_SECTORS]
        r = pick(rows, case, Metric.CHECK_TEX_LOOKUPS, "tex", stat="", sample=0)
        assert r.value == pytest.approx(ratio)
        assert r.flags.split(";")[0] == "multipass=4"
        assert ("inconsistent=check_tex_lookups" in r.flags) == (abs(ratio - 1) > 0.02)


def test_schema_3_round_trip_and_schema_2_files_read_with_defaults(tmp_path):
    from spec.records import data_path, read_csv, write_csv
    (a, b), observations = synthetic()
    rows = rows_of(observations, (a, b))
    write_csv(tmp_path / "c.csv", rows)
    back = read_csv(tmp_path / "c.csv")
    assert len(back) == len(rows)
    for r, d in zip(rows, back):
        assert (d["group"], d["stat"], d["flags"], d["sample"]) == (r.group, r.stat, r.flags,
                                                                    r.sample)
        for k in ("value", "lo", "hi"):
            x, y = getattr(r, k), d[k]
            assert (x is None and y is None) or (math.isnan(x) and math.isnan(y)) or x == y
    old = read_csv(data_path(ROOT / "profiles/h100/sawtooth-20261121",
                             "counters.csv"))
    assert old and all(d["group"] == d["stat"] == d["flags"] == "" and d["lo"] is None
                       and d["hi"] is None for d in old)


def test_home_summaries_give_one_row_per_case_and_metric():
    (a, b), observations = synthetic()
    groups = metrics.get_groups(("tex", "fabric", "dram"))
    rows = counters.home_summaries(rows_of(observations, (a, b)), groups)
    keys = [(r.variant, r.metric) for r in rows]
    assert len(keys) == len(set(keys))
    miss = [r for r in rows if r.metric == Metric.L2_TEX_MISSES]
    assert [(r.group, r.value) for r in miss] == [("dram", 100.0)]   # case b has no dram group
    got = {r.metric for r in rows if r.variant == a.variant.id(a.problem)}
    assert got == {Metric.L2_TEX_HITS, Metric.L2_TEX_MISSES, Metric.DRAM_READ_BYTES,
                   Metric.L2_FABRIC_SECTORS, Metric.L2_FABRIC_HITS, Metric.L2_FABRIC_MISSES,
                   Metric.DRAM_FILL_SECTORS, Metric.DRAM_FILL_ESTIMATE_SECTORS,
                   Metric.CHECK_TEX_LOOKUPS, Metric.CHECK_FABRIC_LOOKUPS,
                   Metric.CHECK_DRAM_PER_TEX_MISS, Metric.CHECK_DRAM_PER_ESTIMATE}

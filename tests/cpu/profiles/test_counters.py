"""Pass-aware, repeated ncu counters without a GPU: metric groups, repeat statistics, consistency
flags, what a miss is (DRAM fills vs local tex misses), the repeated collector driven through fake
``ncu`` executables that print ncu's messages, and the ``ncu_report`` reader."""
from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

import pytest

from profiles import collect, counters, metrics, ncu, report
from profiles.counters import Observation, summarize
from profiles.ingest import IngestError, KernelResult, parse_raw_csv
from spec import Backend, CtaSchedule, Problem, ScanOrder, Tiles, Variant, get_arch
from spec.case import Case
from spec.records import Metric, read_bytes
from tests.conftest import ROOT

# the four cases of the committed raw export
from tests.cpu.profiles.test_ingest import fixture_cases

FIXTURES = ROOT / "tests" / "fixtures"
RAW_CSV = FIXTURES / "ncu_raw_h100.csv.xz"      # stored compressed (spec.records.read_bytes)
H100 = get_arch("h100")


# ---------------------------------------------------------------- groups

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


# ---------------------------------------------------------------- statistics and checks

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


def pick(rows, case, metric, group=None, stat="median", sample=None):
    got = [r for r in rows if r.variant == case.variant.id(case.problem) and r.metric == metric
           and (group is None or r.group == group) and r.stat == stat
           and (sample is None or r.sample == sample)]
    assert len(got) == 1, (metric, group, stat, sample, len(got))
    return got[0]


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


# ---------------------------------------------------------------- collector with fake ncu

def fake_ncu(tmp_path: Path, body: str) -> ncu.Ncu:
    """An executable named ncu: ``--import`` prints the committed raw export; a profiling call
    runs ``body`` (shell), then creates the --export report file unless body exited."""
    exe = tmp_path / "bin" / "ncu"
    exe.parent.mkdir(exist_ok=True)
    raw = tmp_path / "bin" / "raw.csv"
    raw.write_bytes(read_bytes(RAW_CSV))
    exe.write_text(f"""#!/bin/sh
if [ "$1" = "--version" ]; then echo "Version 2025.3.1.0 (build 1)"; exit 0; fi
if [ "$1" = "--import" ]; then cat "{raw}"; exit 0; fi
n=$(cat "{tmp_path}/calls" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "{tmp_path}/calls"
{body}
while [ $# -gt 0 ]; do if [ "$1" = "--export" ]; then touch "$2.ncu-rep"; fi; shift; done
echo "==PROF== Disconnected"
""")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return ncu.Ncu(exe, (2025, 3, 1))


def test_collector_runs_one_session_per_group_and_repeat_and_records_failures(tmp_path,
                                                                             csv_reader):
    tool = fake_ncu(tmp_path, 'if [ $n = 2 ]; then echo "==ERROR== The application returned '
                              'an error code (1)."; exit 1; fi')
    cases = fixture_cases()
    seen = []
    plan = tmp_path / "plan.json"
    plan.write_text('{"arch": "h100", "cases": []}')
    col = collect.profile_cases(tool, ["python", "-m", "target", str(plan)],
                                [c.id for c in cases], tmp_path / "ncu", ("tex", "dram"), 2,
                                sessions=2, progress=seen.append)
    assert seen == ["ncu tex session 1/2 (1 launches per case)",
                    "ncu dram session 1/2 (1 launches per case)",
                    "ncu tex session 2/2 (1 launches per case)",
                    "ncu dram session 2/2 (1 launches per case)"]
    assert [(s.group, s.first_repeat, bool(s.error)) for s in col.sessions] == [
        ("tex", 0, False), ("dram", 0, True), ("tex", 1, False), ("dram", 1, False)]
    assert (tmp_path / "ncu" / "dram-s0.log").read_text().startswith("==ERROR== The app")
    # each session's target got a copy of the plan with its launch count
    assert json.loads((tmp_path / "ncu" / "plan-s1.json").read_text())["launches"] == 1
    assert col.settings["reader"] == "csv" and col.settings["sessions_failed"] == 1
    assert col.settings["groups"]["dram"][-1] == Metric.REPLAY_PASSES
    rows = collect.to_rows(col, cases, run="r", study="s", arch=H100)
    c = cases[2]
    failed = pick(rows, c, Metric.DRAM_READ_BYTES, "dram", stat="", sample=0)
    assert math.isnan(failed.value) and failed.flags == "failed"
    summ = pick(rows, c, Metric.DRAM_READ_BYTES, "dram")
    assert summ.note.startswith("n=1 of 2") and "failed=1" in summ.flags
    raw = parse_raw_csv(read_bytes(RAW_CSV).decode(), (Metric.DRAM_READ_BYTES,))
    assert summ.value == next(k.values[Metric.DRAM_READ_BYTES][0] for k in raw
                              if k.nvtx_range == c.id)
    # the same command again: reports are never overwritten
    with pytest.raises(ncu.NcuError, match="never overwritten"):
        collect.profile_cases(tool, ["t", str(plan)], [c.id for c in cases], tmp_path / "ncu",
                              ("tex",), 1)


def test_collector_splits_repeats_into_launches_per_session(tmp_path, csv_reader):
    tool = fake_ncu(tmp_path, "")
    plan = tmp_path / "plan.json"
    plan.write_text('{"arch": "h100", "cases": []}')
    ids = [c.id for c in fixture_cases()]
    seen = []
    with pytest.raises(ValueError, match="sessions must be 1..repeats"):
        collect.profile_cases(tool, ["t", str(plan)], ids, tmp_path / "x", ("dram",), 2,
                              sessions=3)
    col = collect.profile_cases(tool, ["t", str(plan)], ids, tmp_path / "ncu", ("dram",), 5,
                                sessions=2, progress=seen.append)
    assert seen == ["ncu dram session 1/2 (3 launches per case)",
                    "ncu dram session 2/2 (2 launches per case)"]
    assert [(s.first_repeat, s.launches) for s in col.sessions] == [(0, 3), (3, 2)]
    assert col.settings["launches_per_session"] == [3, 2]
    # the fake report holds one kernel per case, not 3 or 2: every repeat is recorded as failed
    obs_ = col.observations()
    assert sorted({o.repeat for o in obs_}) == [0, 1, 2, 3, 4]
    assert all(o.error.startswith("1 kernels in its NVTX range, ") for o in obs_)


def test_collector_setup_errors_stop_with_the_fix(tmp_path, csv_reader):
    ids = [c.id for c in fixture_cases()]
    plan = tmp_path / "plan.json"
    plan.write_text('{"arch": "h100", "cases": []}')
    perm = fake_ncu(tmp_path, 'echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have '
                              'permission to access NVIDIA GPU Performance Counters on the target '
                              'device 0. For instructions on enabling permissions and to get more '
                              'information see https://developer.nvidia.com/ERR_NVGPUCTRPERM"; '
                              'exit 1')
    with pytest.raises(ncu.NcuError, match="NVreg_RestrictProfilingToAdminUsers=0") as e:
        collect.profile_cases(perm, ["t", str(plan)], ids, tmp_path / "a", ("tex",), 3)
    assert not isinstance(e.value, ncu.NcuRunFailed) and "\n" not in str(e.value)
    unknown = fake_ncu(tmp_path, 'echo "==ERROR== Failed to find metric '
                                 'lrc__lrc2xbar_sectors_op_read.sum"; exit 1')
    with pytest.raises(ncu.NcuError, match="does not know metric lrc__lrc2xbar_sectors_op_read"
                                           ".sum.*query-metrics.*grep lrc__lrc2xbar"):
        collect.profile_cases(unknown, ["t", str(plan)], ids, tmp_path / "b", ("lrc",), 3)
    broken = fake_ncu(tmp_path, 'echo "==ERROR== The application returned an error code (1)."; '
                                'exit 1')
    with pytest.raises(ncu.NcuRunFailed, match="every ncu session failed"):
        collect.profile_cases(broken, ["t", str(plan)], ids, tmp_path / "c", ("tex",), 2)
    with pytest.raises(ValueError, match="repeats"):
        collect.profile_cases(perm, ["t", str(plan)], ids, tmp_path / "e", ("tex",), 0)


def test_metric_reported_na_for_every_kernel_is_unavailable():
    """ncu 2025.3 on an H100 prints ``(!) n/a`` for a metric the GPU lacks and exits 0; the
    collector turns that into an NcuError naming the metric."""
    k = lambda v: KernelResult(0, "fmha", "r", {"a.sum": (v, "sector"), "b.sum": (1.0, "")})
    assert collect.unavailable_metrics([k(math.nan), k(math.nan)], ("a.sum", "b.sum")) == ["a.sum"]
    assert collect.unavailable_metrics([k(math.nan), k(2.0)], ("a.sum", "b.sum")) == []
    assert collect.unavailable_metrics([], ("a.sum",)) == []


def test_timeout_is_a_failed_session(tmp_path):
    slow = fake_ncu(tmp_path, "sleep 5")
    with pytest.raises(ncu.NcuRunFailed, match="within 1 s"):
        ncu.profile(slow, ["t"], tmp_path / "x.ncu-rep", ("a",), nvtx_ranges=["r"], timeout=1)


def test_observations_pair_kernels_by_nvtx_range():
    a, b, c, d = [x.id for x in fixture_cases()]
    k = lambda i, rng: KernelResult(i, "fmha", rng, {Metric.L2_TEX_MISSES: (1.0, "sector")})
    col = collect.Collected((a, b, c), metrics.get_groups(("tex",)), 2, (
        collect.Session("tex", 0, 1, "tex-s0", (k(0, b), k(1, a), k(2, a))),
        collect.Session("tex", 1, 1, "tex-s1", error="ncu exited with 139")))
    got = {(o.case_id, o.repeat): o.error for o in col.observations()}
    one = " launched (each launch of a case must run exactly one kernel)"
    assert got == {(a, 0): "2 kernels in its NVTX range, 1" + one,
                   (b, 0): "", (c, 0): "0 kernels in its NVTX range, 1" + one,
                   (a, 1): "ncu exited with 139", (b, 1): "ncu exited with 139",
                   (c, 1): "ncu exited with 139"}
    # a session of 2 launches: the kernels of a range are repeats in launch order
    two = collect.Collected((a, b), col.groups, 2, (
        collect.Session("tex", 0, 2, "tex-s0", (k(0, a), k(1, b), k(2, a), k(3, b))),))
    assert [(o.case_id, o.repeat, o.kernel) for o in two.observations()] == [
        (a, 0, "fmha"), (a, 1, "fmha"), (b, 0, "fmha"), (b, 1, "fmha")]
    stray = collect.Collected((a,), col.groups, 1,
                              (collect.Session("tex", 0, 1, "x", (k(0, d),)),))
    with pytest.raises(IngestError, match="not a case of this plan"):
        stray.observations()


def test_command_line_per_replay_mode(tmp_path):
    tool = ncu.Ncu(Path("/x/ncu"), (2025, 3))
    cmd = ncu.command(tool, ["python", "t.py"], tmp_path / "r.ncu-rep", ("m.sum",),
                      nvtx_ranges=["a b"], replay_mode="application")
    assert cmd[cmd.index("--replay-mode") + 1] == "application"
    assert cmd[cmd.index("--app-replay-match") + 1] == "grid"
    assert cmd[cmd.index("--nvtx-include") + 1] == "a b/" and cmd[-2:] == ["python", "t.py"]
    assert "--app-replay-match" not in ncu.command(tool, ["t"], tmp_path / "r", ("m",),
                                                   nvtx_ranges=["a"])
    with pytest.raises(ValueError, match="replay mode"):
        ncu.command(tool, ["t"], tmp_path / "r", ("m",), nvtx_ranges=["a"], replay_mode="range")


# ---------------------------------------------------------------- ncu_report reader

SMALL = FIXTURES / "ncu_small_h100"       # .ncu-rep and its raw-page CSV export (see .md), .xz


@pytest.fixture(scope="module")
def small_rep(tmp_path_factory) -> Path:
    """The committed report decompressed (ncu_report opens a plain .ncu-rep file)."""
    p = tmp_path_factory.mktemp("ncu") / "ncu_small_h100.ncu-rep"
    p.write_bytes(read_bytes(FIXTURES / "ncu_small_h100.ncu-rep.xz"))
    return p


SMALL_METRICS = (Metric.L2_TEX_SECTORS, Metric.L2_TEX_HITS, Metric.L2_TEX_MISSES,
                 Metric.L2_FABRIC_SECTORS, Metric.L2_FABRIC_HITS, Metric.L2_FABRIC_MISSES,
                 Metric.DRAM_READ_BYTES, Metric.REPLAY_PASSES)


def test_both_readers_agree_on_a_real_h100_report(small_rep):
    pytest.importorskip("ncu_report")
    rep = report.read_report(small_rep, SMALL_METRICS)
    exp = parse_raw_csv(read_bytes(FIXTURES / "ncu_small_h100.csv.xz").decode(), SMALL_METRICS)
    assert len(rep) == len(exp) == 2
    for a, b in zip(rep, exp):
        assert (a.index, a.nvtx_range, a.values) == (b.index, b.nvtx_range, b.values)
        assert b.kernel.startswith(f"void {a.kernel}<")     # function name vs full signature
    assert [k.nvtx_range.split(".")[1] for k in rep] == ["linear", "sawtooth"]
    # the values the fixture's note quotes (linear case)
    assert rep[0].values[Metric.L2_TEX_MISSES] == (527808.0, "sector")
    assert rep[0].values[Metric.DRAM_READ_BYTES] == (12602880.0, "byte")
    assert rep[0].values[Metric.REPLAY_PASSES] == (4.0, "pass")


def test_real_report_rows_flag_the_multipass_session_and_the_fill_estimate(small_rep):
    """One session with tex, fabric and DRAM metrics together (4 passes): split into the groups'
    views, the rows carry multipass=4, and the fill estimate (tex misses minus fabric hits) is
    0.70x the DRAM fills of the linear case (fills / estimate 1.42), so its check is flagged
    inconsistent."""
    pytest.importorskip("ncu_report")
    ks = report.read_report(small_rep, SMALL_METRICS)
    prob = Problem(B=1, H=1, S_q=32768, D=64)
    cases = [Case(prob, Variant(Backend.CUDA, o, CtaSchedule.persistent(132), Tiles(80, 80)), 132,
                  "fixture") for o in (ScanOrder.linear(), ScanOrder.sawtooth())]
    assert [c.id for c in cases] == [k.nvtx_range for k in ks]
    groups = metrics.get_groups(("dram", "tex", "fabric"))
    observations = [Observation(k.nvtx_range, g.name, 0,
                                {m: k.values[m] for m in g.collect}, kernel=k.kernel)
                    for k in ks for g in groups]
    rows = counters.rows(observations, cases, groups, repeats=1, run="r", study="s",
                         arch="h100", sector_bytes=32)
    lin = cases[0]
    fills = pick(rows, lin, Metric.DRAM_FILL_SECTORS, "dram").value
    assert fills == 12602880 / 32
    est = pick(rows, lin, Metric.DRAM_FILL_ESTIMATE_SECTORS).value
    assert est == 527808 - ks[0].values[Metric.L2_FABRIC_HITS][0]
    chk = pick(rows, lin, Metric.CHECK_DRAM_PER_ESTIMATE)
    assert chk.value == pytest.approx(fills / est)
    assert est / fills == pytest.approx(0.70, abs=0.005)      # the 0.70x of the docstring
    assert "inconsistent=" in chk.flags                       # off by more than the 2% bound
    assert pick(rows, lin, Metric.L2_TEX_MISSES, "dram").flags.startswith("multipass=4")
    per_miss = pick(rows, lin, Metric.CHECK_DRAM_PER_TEX_MISS, "dram").value
    assert per_miss == pytest.approx(fills / 527808) and per_miss < 1

class FakeMetric:
    def __init__(self, name, value, unit):
        self._n, self._v, self._u = name, value, unit

    def name(self):
        return self._n

    def value(self):
        return self._v

    def unit(self):
        return self._u


class FakeRange:
    def __init__(self, name):
        self._n = name

    def name(self):
        return self._n


class FakeDomain:
    def __init__(self, stack):
        self._s = stack

    def push_pop_ranges(self):
        return tuple(sorted(self._s))          # documented as sorted, not stack order

    def push_pop_range(self, i):
        return FakeRange(self._s[i]) if i < len(self._s) else None


class FakeState:
    def __init__(self, domains):
        self._d = domains

    def domains(self):
        return tuple(range(len(self._d)))

    def domain_by_id(self, i):
        return FakeDomain(self._d[i])


class FakeAction:
    def __init__(self, name, metrics_, domains):
        self._n, self._m, self._d = name, metrics_, domains

    def name(self):
        return self._n

    def metric_by_name(self, name):
        return FakeMetric(name, *self._m[name]) if name in self._m else None

    def nvtx_state(self):
        return FakeState(self._d) if self._d is not None else None


class FakeReportModule:
    """The documented IContext/IRange/IAction walk (PRI), for testing the reader's logic."""
    def __init__(self, ranges):
        self.ranges = ranges

    def load_report(self, path):
        mod = self

        class Ctx:
            def num_ranges(self):
                return len(mod.ranges)

            def range_by_idx(self, i):
                actions = mod.ranges[i]

                class Rng:
                    def num_actions(self):
                        return len(actions)

                    def action_by_idx(self, j):
                        return actions[j]
                return Rng()
        return Ctx()


def test_report_reader_walks_ranges_actions_metrics_and_nvtx(tmp_path):
    rep = tmp_path / "x.ncu-rep"
    rep.write_bytes(b"\0")
    m = {Metric.L2_TEX_MISSES: (123, "sector"), Metric.REPLAY_PASSES: (1, "pass")}
    mod = FakeReportModule([[FakeAction("fmha_fwd", m, [["zz outer", "aa inner"]])],
                            [FakeAction("flash_fwd", m, [[], ["only"]]),
                             FakeAction("other", m, None)]])
    ks = report.read_report(rep, (Metric.L2_TEX_MISSES, Metric.REPLAY_PASSES), mod)
    assert [(k.index, k.kernel, k.nvtx_range) for k in ks] == [
        (0, "fmha_fwd", "aa inner"), (1, "flash_fwd", "only"), (2, "other", None)]
    assert ks[0].values == {Metric.L2_TEX_MISSES: (123.0, "sector"),
                            Metric.REPLAY_PASSES: (1.0, "pass")}
    with pytest.raises(IngestError, match="lacks metric lts__nope.sum"):
        report.read_report(rep, ("lts__nope.sum",), mod)
    with pytest.raises(IngestError, match="no report at"):
        report.read_report(tmp_path / "missing.ncu-rep", ("a",), mod)


def test_ncu_report_module_is_found_beside_the_ncu_on_path(tmp_path, monkeypatch):
    install = tmp_path / "nsight-compute-2025.3.1"
    (install / "extras" / "python").mkdir(parents=True)
    (install / "extras" / "python" / "fake_ncu_report_h5.py").write_text("FOUND = 'extras'\n")
    (install / "ncu").write_text("#!/bin/sh\n")
    (tmp_path / "bin").mkdir()
    os.symlink(install / "ncu", tmp_path / "bin" / "ncu")
    monkeypatch.setattr(report, "MODULE", "fake_ncu_report_h5")
    assert report.extras_dirs(str(tmp_path / "bin" / "ncu")) == [install / "extras/python"]
    wrapper = tmp_path / "cuda" / "bin" / "ncu"      # toolkit layout: bin/ncu beside the install
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text("#!/bin/sh\n")
    os.symlink(install, tmp_path / "cuda" / "nsight-compute-2025.3.1")
    assert report.extras_dirs(str(wrapper)) == [tmp_path / "cuda/nsight-compute-2025.3.1/"
                                                "extras/python"]
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    assert report.load_module(str(tmp_path / "bin" / "ncu")).FOUND == "extras"
    monkeypatch.setattr(report, "MODULE", "fake_ncu_report_absent_h5")
    assert report.load_module(str(tmp_path / "bin" / "ncu")) is None
    assert report.extras_dirs(None) == []


def test_read_kernels_falls_back_to_the_csv_export(tmp_path, csv_reader):
    ks, reader = report.read_kernels(tmp_path / "r.ncu-rep", (Metric.L2_TEX_MISSES,),
                                     export_csv=lambda p: read_bytes(RAW_CSV).decode())
    assert reader == "csv" and len(ks) == 4
    with pytest.raises(IngestError, match="pip install ncu-report"):
        report.read_kernels(tmp_path / "r.ncu-rep", (Metric.L2_TEX_MISSES,))


# ---------------------------------------------------------------- the variance driver (CPU parts)

def test_variance_conditions_change_one_thing_and_record_missing_launches(tmp_path, csv_reader):
    from explorations import variance
    tool = fake_ncu(tmp_path, f'echo "$@" > "{tmp_path}/args"')
    cases = fixture_cases()
    cond = variance.CONDITIONS["flush_own"]
    obs_ = variance.run_condition(tool, cond, cases, H100, tmp_path, n=2, sessions=1, seed=0,
                                  log=lambda *_: None)
    args = (tmp_path / "args").read_text().split()
    assert args[args.index("--cache-control") + 1] == "none"
    assert args[args.index("--metrics") + 1] == f"{Metric.L2_TEX_MISSES},{Metric.REPLAY_PASSES}"
    plan = __import__("json").loads((tmp_path / "flush_own.plan.json").read_text())
    assert plan["flush_bytes"] == 2 * H100.l2_bytes and plan["launches"] == 2
    assert not plan["reverse"]
    # the fixture report holds one launch per case: launch 0 measured, launch 1 failed, seen
    got = sorted((o.case_id, o.repeat, o.error) for o in obs_)
    assert got == sorted([(c.id, 0, "") for c in cases] +
                         [(c.id, 1, "session=0: 1 of 2 launches profiled") for c in cases])
    rows = counters.rows(obs_, cases, (cond.group,), repeats=2, run="r", study="variance",
                         arch="h100", sector_bytes=32)
    lines = variance.table(rows)
    assert len(lines) == 1 + len(cases) and all("failed=1" in ln for ln in lines[1:])
    assert lines[1].split()[0] == "flush_own"
    others = {c.name: c for c in variance.CONDITIONS.values()}
    base = others.pop("miss_alone")
    for c in others.values():       # each condition differs from the baseline in one setting
        diff = [f for f in ("metrics", "cache_control", "replay_mode", "reverse")
                if getattr(c, f) != getattr(base, f)]
        assert diff in (["metrics"], ["cache_control"], ["reverse"],
                        ["metrics", "replay_mode"]), c.name


def test_variance_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    from explorations import variance
    out = tmp_path / "v"
    assert variance.main(["--out", str(out), "--conditions", "miss_alone,nope"]) == 2
    assert "unknown condition(s) nope" in capsys.readouterr().err
    assert variance.main(["--out", str(out), "--cases", "no_such_case"]) == 2
    assert "no case of the sawtooth study matches" in capsys.readouterr().err
    assert variance.main(["--out", str(out), "--n", "0"]) == 2
    assert not out.exists()
    ids = [c.id for c in variance.pick_cases(H100, list(variance.DEFAULT_CASES))]
    assert ids == ["cutile.linear.static132.m64n64d64.occ2 b8h1s262144d64.fp16.full",
                   "cutile.sawtooth.static132.m64n64d64.occ2 b8h1s262144d64.fp16.full",
                   "cuda.linear.static132.m80n80d64 b1h1s262144d64.fp16.full"]


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


def test_isolated_reader_matches_the_in_process_reader(small_rep):
    """The subprocess reader (used with an Nsight Compute install's module) returns what the
    in-process reader returns on the committed real report."""
    mod = report.load_module()
    if mod is None:
        pytest.skip("ncu_report (pip package ncu-report) not installed")
    rep = small_rep
    wanted = (Metric.L2_TEX_MISSES, Metric.DRAM_READ_BYTES)
    extras = Path(mod.__file__).parent.parent          # any dir: the module is importable anyway
    assert report.read_isolated(rep, wanted, extras) == report.read_report(rep, wanted, mod)
    assert report.read_isolated(rep, ("no_such.sum",), extras) is None

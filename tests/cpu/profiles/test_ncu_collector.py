"""The repeated ncu collector driven through fake ``ncu`` executables that print ncu's
messages: one session per group and repeat, launches split over sessions, failures recorded
and setup errors stopped with the fix, kernels paired with cases by NVTX range, the command
line; and the CPU parts of the variance driver (explorations.variance) built on it."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from profiles import collect, counters, metrics, ncu
from profiles.ingest import IngestError, KernelResult, parse_raw_csv
from spec import get_arch
from spec.records import Metric, read_bytes
from tests.cpu.profiles.ncu_helpers import RAW_CSV, fake_ncu, fixture_cases, pick

H100 = get_arch("h100")


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


# the variance driver (CPU parts)


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

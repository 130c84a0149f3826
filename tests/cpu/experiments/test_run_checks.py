"""``experiments.run`` as a newcomer meets it: every value checked before any output, limits that
refuse a run in one line, true messages, progress and tables that read at 80 columns, a full
disk, the debris of a killed run."""
from __future__ import annotations

import errno
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from experiments import run as R
from experiments.registry.studies import get_study
from spec import get_arch
from tests.conftest import HAS_GPU, ROOT
from tests.cpu.experiments.cli_helpers import main_cli


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def one_line_exit_2(r, *needles):
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == "", r.stdout                       # nothing printed before the error
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    for n in needles:
        assert n in r.stderr, r.stderr


@pytest.mark.parametrize("flags, message", [
    (["--gpus", "0"], "--gpus 0: pass a positive number of GPUs or all"),
    (["--gpus", "abc"], "--gpus abc: pass a positive number"),
    (["--gpus", "-3"], "--gpus -3: pass a positive number"),
    (["--reps", "-1", "--mode", "simulate"], "--reps -1 must be at least 1"),
    (["--reps", "0"], "--reps 0 must be at least 1"),
    (["--jobs", "0"], "--jobs 0 must be at least 1"),
    (["--time-limit", "0"], "--time-limit 0 must be a positive number of minutes"),
])
@pytest.mark.parametrize("dry", [True, False])
def test_every_value_is_checked_before_any_output(tmp_path, flags, message, dry):
    r = main_cli("sawtooth", "--arch", "gb10", *flags, *(["--dry-run"] if dry else []),
                 "--out", str(tmp_path / "r"))
    one_line_exit_2(r, message)
    assert not any(tmp_path.iterdir())


def test_a_billion_tokens_is_refused_at_once_and_its_dry_run_answers(tmp_path):
    t0 = time.monotonic()
    r = cli("sawtooth", "--arch", "gb10", "--seq", "1000000000", "--out", str(tmp_path / "r"))
    one_line_exit_2(r, "is estimated at about", "--force")
    assert re.search(r"about [\d,.]+ (days|h)", r.stderr) and "GiB" in r.stderr
    assert time.monotonic() - t0 < 20
    assert not any(tmp_path.iterdir())
    t0 = time.monotonic()
    d = cli("sawtooth", "--arch", "gb10", "--seq", "1000000000", "--dry-run")
    assert d.returncode == 0 and time.monotonic() - t0 < 20
    assert re.search(r"simulate \(timed model, 24 MiB L2\): about [\d,.]+ (h|days).* peak "
                     r"memory about [\d.]+ GiB",
                     " ".join(d.stdout.split()))


def test_a_plan_over_the_free_memory_is_refused_unless_forced(tmp_path, monkeypatch, capsys):
    from experiments.runner import dryrun
    monkeypatch.setattr(dryrun, "available_memory", lambda: 2**20)
    args = ["sawtooth", "--arch", "gb10", "--seq", "2048", "--filter", "cuda-batch",
            "--no-figures"]
    assert R.main([*args, "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "and this machine has 1 MiB free" in err and "--force" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "a").exists()
    assert R.main([*args, "--out", str(tmp_path / "b"), "--force"]) == 0
    assert (tmp_path / "b" / "counters.csv").exists()


def test_a_plan_over_the_time_limit_is_refused(tmp_path, capsys):
    assert R.main(["sawtooth", "--arch", "gb10", "--time-limit", "0.01",
                   "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "over --time-limit 0.01 min" in err and "--force" in err
    assert not any(tmp_path.iterdir())


def test_auto_with_slurm_names_where_it_measures():
    study = get_study("sawtooth")
    mode, why = R.resolve_mode("auto", study, True, elsewhere=True)
    assert mode == "measure" and "Slurm" in why and "GPU found" not in why


@pytest.mark.skipif(HAS_GPU, reason="measures when a GPU is present")
def test_measure_without_a_gpu_suggests_only_what_works(tmp_path):
    r = main_cli("ladder", "--arch", "h100", "--mode", "measure", "--out", str(tmp_path / "r"))
    one_line_exit_2(r, "--mode measure needs a CUDA GPU", "run it on a GPU machine")
    assert "--mode simulate" not in r.stderr
    r = main_cli("sawtooth", "--arch", "h100", "--mode", "measure", "--out", str(tmp_path / "r"))
    one_line_exit_2(r, "use --mode simulate")


def test_a_missing_torch_is_told_apart_from_a_missing_gpu(monkeypatch):
    """Without torch the reason names torch and how to install it from a clone; with torch and
    no device it names the device check. Measure mode and auto mode both carry the reason."""
    import importlib.util

    from spec import arch as A
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))
    missing = A.no_gpu_reason()
    assert "torch is not installed" in missing and "pip install -e '.[gpu]'" in missing
    assert "is_available" not in missing and "sawtooth-locality[" not in missing
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    present = A.no_gpu_reason()
    assert "no CUDA GPU found" in present and "torch is installed" in present
    study = get_study("sawtooth")
    for reason in (missing, present):
        mode, why = R.resolve_mode("auto", study, False, absent=reason)
        assert mode == "simulate" and reason in why
        with pytest.raises(R.UsageError, match="use --mode simulate") as e:
            R.resolve_mode("measure", study, False, absent=reason)
        assert reason in str(e.value)


def test_mode_has_help():
    text = " ".join(main_cli("--help").stdout.split())
    assert "--mode {auto,measure,simulate} measure: run the kernels on the GPU" in text


def test_dry_run_says_what_each_mode_costs_and_what_auto_does():
    out = " ".join(main_cli("sawtooth", "--arch", "h100", "--dry-run").stdout.split())
    if not HAS_GPU:
        from spec.arch import no_gpu_reason
        assert f"--mode auto: this command would SIMULATE ({no_gpu_reason()})" in out
    assert re.search(r"simulate \(timed model, 50 MiB L2\): about [\d.]+ (s|min) on \d+ "
                     r"thread\(s\), peak memory about [\d.]+ (MiB|GiB)", out), out
    m = re.search(r"measure \(one NVIDIA H100 80GB HBM3\): about ([\d.]+) min = start and "
                  r"compile \d+ s \+ check and time [\d.]+ (s|min) \+ ncu [\d.]+ (s|min) \(dram "
                  r"\d+ s, l1 \d+ s; 1 session\(s\) per metric group, 3 launches per case and "
                  r"group\)", out)
    assert m and float(m.group(1)) < 8, out
    full = re.search(r"with --sessions 3 \(.*?\): about ([\d.]+) min", out)
    assert full and float(full.group(1)) > float(m.group(1))
    lock = " ".join(main_cli("sawtooth", "--arch", "gb10", "--dry-run", "--model",
                             "lockstep").stdout.split())
    assert re.search(r"simulate \(lock-step model, 24 MiB L2\): about", lock)
    reuse = " ".join(main_cli("reuse", "--arch", "gb10", "--dry-run").stdout.split())
    assert "simulate (lock-step model, reuse distances, 24 MiB L2)" in reuse
    assert "measure (" not in reuse                         # simulator-only


def test_dry_run_table_reads_in_80_columns():
    from rich.console import Console

    from experiments.runner.dryrun import plan_table
    for study, arch in (("sawtooth", "gb10"), ("longseq", "h100"), ("shapes", "h100")):
        cases = get_study(study).plan(get_arch(arch))
        console = Console(width=80, record=True, color_system=None)
        table, _ = plan_table(cases, 80, "t")
        console.print(table)
        text = console.export_text()
        assert max(len(x) for x in text.splitlines()) <= 80
        assert "…" not in text
        for c in cases:
            assert c.variant.id(c.problem) in text


def test_progress_reads_in_80_columns():
    from rich.console import Console

    from experiments.runner.progress import Phase, _make_progress
    console = Console(width=80, record=True, color_system=None, force_terminal=True)
    progress = _make_progress(console)
    ph = Phase("check + time", "cases", [2.0] * 16)
    ph.done(n=3)
    ph.start(3, "cutile.sawtooth.static132.m64n64d64.occ2 b8h1s262144d64.fp16.causal")
    progress.add_task("x", total=ph.total, phase=ph)
    console.print(progress.make_tasks_table(progress.tasks))
    line = console.export_text().rstrip("\n")
    assert len(line) <= 80 and "\n" not in line
    assert "check + time" in line and "3/16 cases" in line
    assert re.search(r"\d:\d\d:\d\d ETA \d:\d\d:\d\d", line)


def test_eta_follows_the_finished_units():
    from experiments.runner.progress import Phase
    ph = Phase("ncu", "sessions", [10.0, 10.0, 20.0])
    assert ph.eta() == pytest.approx(40.0, abs=0.5)
    ph.t0 -= 20.0                      # the first 10-second unit took 20 seconds
    ph.done(0)
    assert ph.ratio() == pytest.approx(2.0, rel=0.01)
    assert ph.eta() == pytest.approx(60.0, rel=0.02)   # 30 estimated seconds left, at 2x


def test_simulated_counts_do_not_depend_on_the_threads(tmp_path):
    from spec.records import read_csv
    got = []
    for jobs in ("1", "2"):
        out = tmp_path / f"j{jobs}"
        r = cli("sawtooth", "--arch", "gb10", "--seq", "4096", "--no-figures", "--jobs", jobs,
                "--out", str(out))
        assert r.returncode == 0, r.stderr
        got.append([{k: v for k, v in x.items() if k != "run"}
                    for x in read_csv(out / "counters.csv")])
        m = json.loads((out / "manifest.json").read_text())["parameters"]
        assert m["threads"] == int(jobs) and len(m["case_seconds"]) == 16
    assert got[0] == got[1]


def test_a_full_disk_while_figures_are_written_is_one_line(tmp_path, monkeypatch, capsys):
    from matplotlib.figure import Figure

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(a[0]))

    monkeypatch.setattr(Figure, "savefig", full)
    rc = R.main(["sawtooth", "--arch", "gb10", "--seq", "2048", "--filter", "cuda-batch",
                 "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "no space left on the device while writing" in err and "--out" in err
    assert not any(tmp_path.iterdir())


def test_the_debris_of_a_killed_run_is_cleaned_by_the_next(tmp_path):
    from experiments.rundirs.rundir import reserved_run_dir
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    parent = tmp_path / "runs" / "gb10" / "sawtooth"
    parent.mkdir(parents=True)
    stale_lock = parent / ".20261126-000000-000000-simulate.lock"
    stale_lock.write_text(f"{socket.gethostname()} {dead}\n")
    (parent / ".20261126-000000-000000-simulate.partial").mkdir()
    (parent / ".orphan.partial").mkdir()
    (parent / ".live.lock").write_text(f"{socket.gethostname()} {os.getpid()}\n")
    said = []
    with reserved_run_dir(None, default=lambda: parent / "next", on_debris=said.append):
        pass
    assert sorted(p.name for p in parent.iterdir()) == [".live.lock", "next"]
    assert len(said) == 1 and ".20261126-000000-000000-simulate.lock" in said[0]
    # beside an explicit --out (a directory that is not ours) the debris is named, not removed
    (parent / ".x.lock").write_text(f"{socket.gethostname()} {dead}\n")
    said.clear()
    with reserved_run_dir(parent / "mine", on_debris=said.append):
        pass
    assert (parent / ".x.lock").exists() and "remove them with rm -r" in said[0]


def test_a_killed_default_run_leaves_nothing_after_the_next_one(tmp_path):
    """SIGKILL in the middle of a run, then a second run into the same tree: the first one's
    hidden lock and partial directory are gone and the second says so."""
    out = tmp_path / "runs" / "a"
    p = subprocess.Popen([sys.executable, "-m", "experiments.run", "sawtooth", "--arch", "gb10",
                          "--no-figures", "--out", str(out)], cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (out.parent / ".a.partial").exists():
        assert p.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=60)
    assert (out.parent / ".a.lock").exists()
    from experiments.rundirs.rundir import reserved_run_dir
    said = []
    with reserved_run_dir(None, default=lambda: out.parent / "b", on_debris=said.append):
        pass
    assert sorted(x.name for x in out.parent.iterdir()) == ["b"] and ".a.lock" in said[0]


def test_measure_shows_each_ncu_session_and_records_the_phases(tmp_path, monkeypatch, capsys):
    """Measure mode on the CPU (an H100 'present', the GPU steps replaced): the ncu phase reports
    every session with an ETA, and the manifest records what each phase took."""
    from experiments.measurement import measure
    monkeypatch.setattr(R, "detect", lambda: get_arch("h100"))
    monkeypatch.setattr(measure, "precompile", lambda cases: [])
    monkeypatch.setattr(measure, "check_and_time", lambda cases, arch, progress=None, **kw: (
        [progress(1) for _ in cases], measure.Outcome(passed=list(cases)))[1])

    def profile(cases, arch, run_dir, *, groups, sessions: int, repeats: int, progress=None,
                **kw):
        for i in range(sessions):
            for g in groups:
                progress(f"ncu {g} session {i + 1}/{sessions} ({repeats // sessions} launches "
                         "per case)")
        return [], [], {"ncu": "fake"}

    monkeypatch.setattr(measure, "profile", profile)
    monkeypatch.setattr(measure, "device_facts", lambda: {"gpu": "fake H100"})
    out = tmp_path / "run"
    assert R.main(["sawtooth", "--arch", "h100", "--mode", "measure", "--no-figures",
                   "--filter", "cuda", "--full-protocol", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    lines = [x for x in text.splitlines() if x.startswith("ncu: ")]
    assert len(lines) == 5 and lines[-1].startswith("ncu: 5/5 sessions") and "done" in lines[-1]
    assert all(re.search(r"\d:\d\d:\d\d elapsed", x) for x in lines)
    assert "ETA" in lines[0]
    assert re.search(r"check \+ time: 8/8 cases", text) and "compile: 1/1 builds" in text
    m = json.loads((out / "manifest.json").read_text())["parameters"]
    assert set(m["phase_seconds"]) == {"compile", "check_and_time", "ncu", "ncu_sessions"}
    assert len(m["phase_seconds"]["ncu_sessions"]) == 5 and m["estimate_seconds"] > 0
    est = m["estimate_phase_seconds"]              # each phase's estimate beside its wall time
    assert set(est) == set(m["phase_seconds"]) and set(est["ncu_sessions"]) == \
        set(m["phase_seconds"]["ncu_sessions"])
    assert est["ncu"] == pytest.approx(sum(est["ncu_sessions"].values()), abs=0.2)


@pytest.mark.parametrize("study, flags, groups", [
    ("sawtooth", ["--filter", "cuda"], "dram,l1"),    # what its figures and findings read
    ("sawtooth", ["--filter", "cuda", "--full-protocol"], "dram,lrc,tex,fabric,l1"),
    ("sawtooth", ["--filter", "cuda", "--groups", "dram"], "dram"),
    ("hints", [], "dram"),
    ("l1l2", ["--filter", r"static1\."], "dram,lrc,tex,fabric,l1"),   # L1 and L2 sectors, hits
])
def test_a_study_collects_the_groups_it_reads_unless_asked_for_the_full_protocol(
        tmp_path, monkeypatch, study, flags, groups):
    from experiments.measurement import measure
    monkeypatch.setattr(R, "detect", lambda: get_arch("h100"))
    monkeypatch.setattr(measure, "precompile", lambda cases: [])
    monkeypatch.setattr(measure, "check_and_time", lambda cases, arch, progress=None, **kw: (
        progress(len(cases)), measure.Outcome(passed=list(cases)))[1])
    seen = []
    monkeypatch.setattr(measure, "profile", lambda cases, arch, run_dir, *, groups, **kw: (
        seen.append(",".join(groups)), ([], [], {"ncu": "fake"}))[1])
    monkeypatch.setattr(measure, "device_facts", lambda: {"gpu": "fake H100"})
    assert R.main([study, "--arch", "h100", "--mode", "measure", "--no-figures", *flags,
                   "--out", str(tmp_path / "run")]) == 0
    assert seen == [groups]


def test_dry_run_states_the_full_protocols_time_and_each_ncu_session(capsys):
    assert R.main(["sawtooth", "--arch", "h100", "--dry-run"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    m = re.search(r"measure \(one [^)]*\): about ([\d.]+) min = .* ncu [\d.]+ s \(dram \d+ s, "
                  r"l1 \d+ s;", text)
    assert m and float(m.group(1)) <= 8, text           # the default main study, one H100
    full = re.search(r"with --full-protocol \(every metric group: dram, lrc, tex, fabric, l1; "
                     r"the study reads dram, l1\): about ([\d.]+) min, ncu dram", text)
    assert full and float(full.group(1)) > float(m.group(1))
    with pytest.raises(SystemExit) as e:                # argparse: one line, exit 2
        R.main(["sawtooth", "--arch", "h100", "--groups", "dram", "--full-protocol", "--dry-run"])
    assert e.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_a_csv_cut_inside_a_quoted_field_is_an_error(tmp_path):
    from analysis.data import DatasetError, read_table
    from spec.records import Row, TruncatedCSV, read_csv, write_csv
    whole = tmp_path / "whole.csv"
    write_csv(whole, [Row(run="r", study="s", arch="h100", metric="m", value=float(i), unit="",
                          source="measured", note=f"median of {i}, spread ±1%", variant="v",
                          backend="cuda", order="linear", schedule="static1", tile_m=64,
                          tile_n=64, occupancy=None, B=1, H=1, H_kv=1, S_q=64, S_kv=64, D=64,
                          dtype="fp16", causal=False) for i in range(20)])
    text = whole.read_text()
    cut = text[:text.index('"', len(text) // 2) + 5]      # inside a quoted note
    bad = tmp_path / "timing.csv"
    bad.write_text(cut)
    with pytest.raises(TruncatedCSV, match="ends inside the quoted field"):
        read_csv(bad)
    with pytest.raises(DatasetError):
        read_table(bad)
    assert read_csv(whole)                                # the whole file reads

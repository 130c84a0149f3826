"""Run directories of the experiments CLI: the final name, reserved before the work and carried
by the rows; a failed or interrupted run (a signal, even one whose raise is lost) leaves no
directory, lock or compiler scratch file behind."""
from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spec.records import read_csv
from tests.conftest import ROOT
from tests.cpu.experiments.cli_helpers import cli


def test_rows_carry_the_final_run_name_and_the_manifest_command_reruns(tmp_path):
    out = tmp_path / "first run"                        # a space: the command must quote it
    r = cli("sawtooth", "--arch", "gb10", "--seq", "2048", "--filter", "static|batch",
            "--no-figures", "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows = read_csv(out / "counters.csv")
    assert {x["run"] for x in rows} == {"first run"}
    cmd = json.loads((out / "manifest.json").read_text())["command"]
    assert cmd.startswith("python -m experiments.run sawtooth --arch gb10 ")
    argv = shlex.split(cmd)
    assert argv[argv.index("--filter") + 1] == "static|batch"
    assert argv[argv.index("--out") + 1] == str(out)
    # pasted back (with this interpreter and a new --out) it re-runs the same study
    argv[0] = sys.executable
    argv[argv.index("--out") + 1] = str(tmp_path / "again")
    again = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    strip = lambda rs: [{k: v for k, v in x.items() if k != "run"} for x in rs]   # noqa: E731
    assert strip(read_csv(tmp_path / "again" / "counters.csv")) == strip(rows)


def test_default_names_are_unique_within_a_second(tmp_path):
    from experiments.rundirs.rundir import default_run_dir
    names = {default_run_dir("gb10", "sawtooth", "simulate", root=tmp_path).name
             for _ in range(200)}
    assert len(names) == 200


def test_a_reserved_name_is_refused_before_the_work_and_a_default_name_moves_on(tmp_path):
    from experiments.rundirs.rundir import RunDirExists, reserved_run_dir
    taken = tmp_path / "runs" / "taken"
    with reserved_run_dir(taken) as (path, work):
        assert path == taken and work.name == ".taken.partial" and work.is_dir()
        assert (taken.parent / ".taken.lock").read_text().split()[1] == str(os.getpid())
        # an explicit --out of a run in progress: refused at once, from another process too
        r = cli("sawtooth", "--arch", "gb10", "--seq", "2048", "--no-figures",
                "--out", str(taken))
        assert r.returncode == 2 and "being written by another run" in r.stderr
        assert "simulating" not in r.stdout
        with pytest.raises(RunDirExists, match="being written by another run"):
            with reserved_run_dir(taken):
                pass
        # a default name that is taken: the next stamp is used instead
        names = iter([taken, tmp_path / "runs" / "next"])
        with reserved_run_dir(None, default=lambda: next(names)) as (other, _):
            assert other == tmp_path / "runs" / "next"
        (work / "counters.csv").write_text("x")
    assert (taken / "counters.csv").read_text() == "x"
    assert sorted(p.name for p in taken.parent.iterdir()) == ["next", "taken"]
    with pytest.raises(RunDirExists, match="already exists"):
        with reserved_run_dir(taken):
            pass


def test_a_failed_run_leaves_nothing_and_a_stale_lock_is_taken_over(tmp_path):
    from experiments.rundirs.rundir import reserved_run_dir
    target = tmp_path / "a" / "b" / "run"
    with pytest.raises(RuntimeError):
        with reserved_run_dir(target) as (_, work):
            (work / "half.csv").write_text("half")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []             # parents it created are gone too
    # a lock whose process is gone (SIGKILL) and its partial directory: taken over
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    target.parent.mkdir(parents=True)
    (target.parent / ".run.lock").write_text(f"{socket.gethostname()} {dead}\n")
    (target.parent / ".run.partial").mkdir()
    (target.parent / ".run.partial" / "old.csv").write_text("old")
    with reserved_run_dir(target) as (_, work):
        assert list(work.iterdir()) == []
    assert sorted(p.name for p in target.parent.iterdir()) == ["run"]


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_during_the_work_leaves_nothing(tmp_path, sig, code):
    out = tmp_path / "runs" / "r"
    # a shell's background job (`.ci/run &`) inherits SIGINT ignored, and Python then installs no
    # KeyboardInterrupt handler: give the child the terminal's default, as Ctrl-C would find it
    p = subprocess.Popen([sys.executable, "-m", "experiments.run", "sawtooth", "--arch", "gb10",
                          "--out", str(out), "--no-figures"], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not (out.parent / ".r.partial").exists():
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.05)
    time.sleep(0.5)                                     # inside the simulation
    p.send_signal(sig)
    stdout, stderr = p.communicate(timeout=120)
    # exit 128 + n, or (seen once under load, after the cleanup had run and said so) death by
    # the same signal: both are how a shell reports the interrupt
    assert p.returncode in (code, -sig), (stdout, stderr)
    assert "no run directory was written" in stderr
    assert list(tmp_path.iterdir()) == []


def test_a_signal_whose_raise_is_lost_still_stops_the_run():
    """A signal's raise can land in a C callback (numba's LLVM object-cache hook during a
    compile), which prints and drops it; the run records the signal and raises it again before
    it publishes its directory."""
    from experiments import run as R
    R._SIGNALLED.clear()
    for sig, exc in ((signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, R.Terminated)):
        try:
            R._on_signal(sig, None)
        except exc:
            pass                                   # what the C callback does with it
        with pytest.raises(exc):
            R._raise_if_signalled()
        R._SIGNALLED.clear()
    R._raise_if_signalled()                        # nothing recorded: nothing raised


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_leaves_no_compiler_scratch_files(tmp_path, sig):
    """cuda.tile's scratch directory (its ``probe*.cubin`` bytecode-version probes) is removed
    when the run is interrupted, even through the ``os._exit`` of an interrupted simulation. At
    S = 64K the first case is done in about 3 s and the 15 others need several more: the signal
    comes while cases are being simulated, as at the default length, a third of the wait."""
    scratch, out = tmp_path / "tmp", tmp_path / "runs" / "r"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "CUDA_TILE_TEMP_DIR"} | {
        "TMPDIR": str(scratch)}
    p = subprocess.Popen([sys.executable, "-m", "experiments.run", "sawtooth", "--arch", "gb10",
                          "--seq", "65536", "--out", str(out), "--no-figures"], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in p.stdout:                               # wait until cases are simulated
        seen.append(line)
        if line.startswith("simulate: ") and "/16 cases" in line and not line.startswith(
                "simulate: 0/"):
            break
    assert any(scratch.iterdir()), seen                 # cuda.tile made its scratch there
    p.send_signal(sig)
    stdout, stderr = p.communicate(timeout=120)
    assert "no run directory was written" in stderr, (seen, stdout, stderr)
    assert list(scratch.rglob("*")) == []


def test_the_compiler_scratch_directory_is_the_commands_own(monkeypatch):
    """``scratch_dir`` points cuda.tile at a directory it removes on leaving, and leaves a
    directory the user chose alone."""
    from kernels.build.toolchain import SCRATCH_ENV, scratch_dir
    monkeypatch.delenv(SCRATCH_ENV, raising=False)
    import tempfile
    before = tempfile.gettempdir()
    with scratch_dir() as d:
        assert os.environ[SCRATCH_ENV] == str(d / "cutile") and d.is_dir()
        assert Path(tempfile.mkdtemp()).parent == d            # every temporary file inside
        (d / "probe.cubin").write_bytes(b"x")
    assert not d.exists() and SCRATCH_ENV not in os.environ
    assert tempfile.gettempdir() == before
    monkeypatch.setenv(SCRATCH_ENV, "/somewhere/mine")
    with scratch_dir() as d:
        assert d is None and os.environ[SCRATCH_ENV] == "/somewhere/mine"


def test_provenance_without_git_names_the_version_and_a_hash_of_the_code(tmp_path, monkeypatch):
    """An installed package (no checkout) records no commit, but the package version and a
    SHA-256 of its code, which changes with any file of the packages; the run's README says so."""
    import shutil

    from analysis.data.catalogue import _tree
    from spec import install
    monkeypatch.delenv("SAWTOOTH_GIT_COMMIT", raising=False)
    monkeypatch.setattr(install, "checkout", lambda: None)
    g = install.git_state()
    assert g["commit"] is None and g["source"] == "installed package"
    assert g["package"] == "sawtooth-locality" and "version" in g
    assert len(g["source_sha256"]) == 64 and g["source_sha256"] == install.source_sha256()
    assert "code sha256 " + g["source_sha256"][:12] in _tree({"git": g})
    for pkg in install.PACKAGES:                         # a tiny copy: the hash follows the code
        (tmp_path / pkg).mkdir()
    shutil.copy(ROOT / "spec" / "install.py", tmp_path / "spec" / "install.py")
    before = install.source_sha256(tmp_path)
    (tmp_path / "spec" / "install.py").write_text("changed")
    assert install.source_sha256(tmp_path) != before


def test_a_dirty_tree_records_the_hash_of_the_code_that_ran(tmp_path, monkeypatch):
    """A dirty checkout's commit does not name what ran (a GPU machine's stale ``.git``)."""
    import subprocess

    from spec import install

    def git(*a):
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t",
                        *a], check=True, capture_output=True)
    monkeypatch.delenv("SAWTOOTH_GIT_COMMIT", raising=False)
    (tmp_path / "f").write_text("a")
    git("init", "-q")
    git("add", "f")
    git("commit", "-qm", "x")
    monkeypatch.setattr(install, "checkout", lambda: tmp_path)
    assert set(install.git_state()) == {"commit", "dirty"}
    (tmp_path / "f").write_text("b")
    g = install.git_state()
    assert g["dirty"] and g["source_sha256"] == install.source_sha256()

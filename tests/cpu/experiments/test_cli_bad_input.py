"""Bad input to the experiments CLI: one line naming the problem and the fix, exit 2, and
nothing on disk (bad arguments, capacities out of bounds, timed-only studies asked to
simulate, an ``--out`` that cannot be written, bad profiling options)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from experiments.registry.studies import STUDIES, get_study
from spec import get_arch, known_archs
from tests.conftest import HAS_GPU
from tests.cpu.experiments.cli_helpers import _nothing_left, cli, main_cli


@pytest.mark.parametrize("args, message", [
    (["sawtooth", "--arch", "a100"], "unknown arch 'a100'; known: gb10, h100, h200, b200, b300"),
    (["nope", "--arch", "gb10"], "unknown study 'nope'; known: sawtooth, l1l2"),
    (["sawtooth"], "--arch is required"),
    (["sawtooth", "--arch", "gb10", "--seq", "0"], "--seq 0 must be a positive"),
    (["sawtooth", "--arch", "gb10", "--seq", "4096,0"], "--seq 0 must be a positive"),
    (["sawtooth", "--arch", "gb10", "--seq", "4096,x"], "'4096,x' is not a sequence length"),
    (["sawtooth", "--arch", "gb10", "--reps", "abc"], "argument --reps: invalid int value"),
    (["sawtooth", "--arch", "gb10", "--capacity-mib", "-1"], "must be a positive finite number"),
    (["sawtooth", "--arch", "gb10", "--filter", "nomatch"], "matches no case"),
    (["sawtooth", "--arch", "gb10", "--mode", "measure"], "--mode measure needs a CUDA GPU"),
])
def test_bad_input_is_one_line_exit_2_and_no_output(tmp_path, args, message):
    out = tmp_path / "run"
    r = main_cli(*args, "--out", str(out))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("value, message", [
    ("nan", "must be a positive finite number of MiB"),
    ("inf", "must be a positive finite number of MiB"),
    ("0", "must be a positive finite number of MiB"),
    ("1e12", "--capacity-mib 1e+12 is outside 0.01953 .. 2016 MiB"),
    ("0.001", "--capacity-mib 0.001 is outside 0.01953 .. 2016 MiB"),
])
def test_capacity_must_be_finite_and_within_bounds(tmp_path, value, message):
    # 0.01953 MiB = one 80-row K tile and one V tile at D=64 fp16 (the CUDA cases' tiles);
    # 2016 MiB = 16 x the largest registered L2 (b200, 126 MiB)
    r = main_cli("sawtooth", "--arch", "gb10", "--capacity-mib", value, "--out",
                 str(tmp_path / "r"))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    _nothing_left(tmp_path)


def test_capacity_bounds_follow_the_plan_and_the_registry():
    from experiments.run import CAPACITY_MAX_L2S, capacity_bounds
    arch = get_arch("h100")
    cases = get_study("longseq").plan(arch)            # 128-row K/V tiles at D=128
    lo, hi = capacity_bounds(arch, cases)
    assert lo == 2 * 128 * 128 * 2
    assert hi == CAPACITY_MAX_L2S * max(get_arch(a).l2_bytes for a in known_archs())


@pytest.mark.parametrize("study", ["ladder", "scaling", "longseq", "bench", "cuda-tiles", "drift"])
@pytest.mark.parametrize("mode", ["simulate", "auto"])
def test_timed_only_study_has_nothing_to_simulate(tmp_path, study, mode):
    assert study in STUDIES, f"the timed-only study {study!r} is no longer registered"
    if mode == "auto" and HAS_GPU:
        pytest.skip("auto measures when a GPU is present")
    r = main_cli(study, "--arch", "h100", "--mode", mode, "--out", str(tmp_path / "r"))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"study {study!r} is GPU-only: it measures time" in r.stderr
    assert ("--mode measure" if mode == "simulate" else "needs a CUDA GPU") in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "+0.0%" not in r.stdout
    _nothing_left(tmp_path)


def _out_cases(tmp_path):
    f = tmp_path / "a_file"
    f.write_text("keep me")
    long = tmp_path / ("x" * 300)                       # a name over NAME_MAX (255)
    return {"parent is a file": (f / "run", "is a file, not a directory"),
            "grandparent is a file": (f / "sub" / "run", "is a file, not a directory"),
            "name too long": (long / "run", "cannot be created"),
            "null byte": (Path(str(tmp_path / "a\0b")), "cannot be created")}


@pytest.mark.parametrize("which", ["parent is a file", "grandparent is a file", "name too long",
                                   "null byte"])
def test_impossible_out_is_refused_before_the_work(tmp_path, which):
    from experiments.run import main
    out, message = _out_cases(tmp_path)[which]
    args = ["sawtooth", "--arch", "gb10", "--seq", "2048", "--no-figures", "--out", str(out)]
    if "\0" in str(out):   # cannot go through a command line: call main in-process
        import contextlib
        import io
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            assert main(args) == 2
        stderr = err.getvalue()
    else:
        r = cli(*args)
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert "simulating" not in r.stdout           # refused before the work
        stderr = r.stderr
    assert message in stderr and "pass another --out" in stderr
    assert len(stderr.strip().splitlines()) == 1
    _nothing_left(tmp_path, keep=("a_file",))
    assert (tmp_path / "a_file").read_text() == "keep me"


def test_unwritable_out_is_refused_and_nothing_created(tmp_path, monkeypatch, capsys):
    from experiments.run import main
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    if os.geteuid() == 0:       # root may write anywhere: let the check see what a user's sees
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, m: False if Path(p) == locked else real(p, m))
    try:
        assert main(["sawtooth", "--arch", "gb10", "--seq", "2048", "--no-figures",
                     "--out", str(locked / "deep" / "run")]) == 2
        err = capsys.readouterr().err
        assert f"no permission to write in {locked}; pass another --out" in err
        assert len(err.strip().splitlines()) == 1
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o700)


@pytest.mark.parametrize("flags, msg", [
    (["--groups", "dram,nosuch"], "unknown metric group"),
    (["--repeats", "0"], "--repeats 0 must be at least 1"),
    (["--repeats", "2", "--sessions", "3"], "--sessions 3 must be between 1 and --repeats"),
])
def test_bad_profiling_options_are_refused_before_any_work(tmp_path, capsys, flags, msg):
    out = tmp_path / "run"
    from experiments.run import main
    rc = main(["sawtooth", "--arch", "gb10", "--out", str(out), *flags])
    err = capsys.readouterr().err
    assert rc == 2 and msg in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and not any(tmp_path.iterdir())


@pytest.mark.parametrize("flags, named", [
    (["--mode", "simulate", "--repeats", "3"], "--repeats only applies"),
    (["--mode", "simulate", "--groups", "dram", "--seed", "1"], "--groups, --seed only apply"),
    (["--mode", "simulate", "--reps", "5"], "--reps only applies"),
    (["--mode", "simulate", "--sessions", "1", "--no-profile"], "--sessions, --no-profile"),
    (["--mode", "simulate", "--full-protocol"], "--full-protocol only applies"),
])
def test_measure_only_options_are_refused_on_a_simulated_run(tmp_path, capsys, flags, named):
    """A simulated run does not silently ignore the measuring options: one line naming them,
    exit 2, nothing written; ``--dry-run`` still takes them (it prints the measured cost)."""
    from experiments.run import main
    out = tmp_path / "run"
    assert main(["sawtooth", "--arch", "gb10", "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert named in err and "this run simulates (--mode simulate)" in err and "leave" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
    assert main(["sawtooth", "--arch", "gb10", "--dry-run", *flags]) == 0


def test_an_out_in_the_way_is_refused_before_the_mode_line(tmp_path):
    """``--out`` taken or below a file: one line on stderr, nothing on stdout (not even the line
    that says the run simulates)."""
    f = tmp_path / "taken"
    f.write_text("mine")
    for out in (f, f / "run"):
        r = cli("sawtooth", "--arch", "gb10", "--out", str(out))
        assert r.returncode == 2 and r.stdout == "", r.stdout
        assert len(r.stderr.strip().splitlines()) == 1 and f.read_text() == "mine"

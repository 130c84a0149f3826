"""The real CLI, end to end on small cases: plan, errors (exit 2, nothing left behind), outputs."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.registry.plans import LONG_S, longseq_plan
from experiments.registry.studies import STUDIES, get_study
from experiments.run import _plan, build_parser
from spec import Backend, ScanOrder, Tiles, get_arch, known_archs
from spec.records import SCHEMA_VERSION, Metric, read_csv
from spec.schedules import ScheduleKind
from tests.conftest import HAS_GPU, ROOT


def cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_list_names_the_studies():
    r = cli("--list")
    assert r.returncode == 0
    for study in ("sawtooth", "l1l2", "traffic", "divergence", "active-sms", "ladder", "scaling",
                  "longseq", "reuse"):
        assert study in r.stdout


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path):
    r = cli("sawtooth", "--arch", "gb10", "--dry-run", "--out", str(tmp_path / "x"))
    assert r.returncode == 0, r.stderr
    assert "16 cases" in r.stdout and "cutile.sawtooth.static48.m64n64d64.occ1" in r.stdout
    assert "32 MiB = 1.33x the 24 MiB L2" in r.stdout
    assert not (tmp_path / "x").exists()


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
    r = cli(*args, "--out", str(out))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.iterdir())


def test_seq_runs_a_plan_at_several_lengths_each_case_once():
    """``--seq A,B``: the traffic study sweeps S, so at one length its 16 cases are one non-causal
    and one causal case; at two lengths four, in the order the lengths were given."""
    arch = get_arch("h100")
    args = build_parser().parse_args(["traffic", "--arch", "h100", "--seq", "229376,196608"])
    cases = _plan(args, get_study("traffic"), arch)
    assert [(c.problem.S_kv, c.problem.causal) for c in cases] == [
        (229376, False), (229376, True), (196608, False), (196608, True)]
    assert args.seq == (229376, 196608)


def test_small_simulation_writes_rows_manifest_and_figures(tmp_path):
    out = tmp_path / "run"
    r = cli("sawtooth", "--arch", "gb10", "--seq", "4096", "--filter", "static|cuda",
            "--capacity-mib", "0.5", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "SIMULATING" in r.stdout and "no CUDA GPU found" in r.stdout
    rows = read_csv(out / "counters.csv")
    assert rows and {r["source"] for r in rows} == {"simulated"}
    miss = [r for r in rows if r["metric"] == "lts__t_sectors_srcunit_tex_lookup_miss.sum"]
    assert len(miss) == 12                                   # 4 static + 8 CUDA variants
    m = json.loads((out / "manifest.json").read_text())
    assert m["schema_version"] == SCHEMA_VERSION and m["mode"] == "simulate" and m["arch"]["name"] == "gb10"
    assert m["parameters"]["capacity_bytes"] == 512 * 1024 and m["git"]["commit"]
    assert m["versions"]["numpy"]
    for fig in ("F7", "F8a", "F9a", "F10a"):
        assert (out / "figures" / f"{fig}.png").stat().st_size > 10_000
    # a second run into the same directory is refused and leaves the first intact
    again = cli("sawtooth", "--arch", "gb10", "--seq", "4096", "--out", str(out))
    assert again.returncode == 2 and "already exists" in again.stderr
    assert read_csv(out / "counters.csv") == rows


def test_simulate_mode_runs_the_timed_model_and_lockstep_on_request(tmp_path):
    """The main command simulates with the timed model and the arch's parameters (gb10: the
    defaults, not fitted), and every row's note says so; ``--model lockstep`` is the lock-step
    LRU of ``experiments.simulation.simulate.simulate_case``, count for count."""
    from experiments.simulation.simulate import simulate_case
    runs = {}
    for model in ("timed", "lockstep"):
        out = tmp_path / model
        r = cli("sawtooth", "--arch", "gb10", "--seq", "8192", "--filter", "cuda",
                "--no-figures", "--model", model, "--out", str(out))
        assert r.returncode == 0, r.stderr
        runs[model] = (r.stdout, read_csv(out / "counters.csv"),
                       json.loads((out / "manifest.json").read_text())["parameters"])
    stdout, rows, params = runs["timed"]
    assert "timed model" in stdout and params["model"] == "timed"
    assert params["params"]["arch"] == "gb10" and params["params"]["fitted"] == []
    assert all("params gb10" in r["note"] and "timesim" in r["note"] for r in rows)
    stdout, rows, params = runs["lockstep"]
    assert "lock-step" in stdout and params["model"] == "lockstep"
    arch = get_arch("gb10")
    args = build_parser().parse_args(["sawtooth", "--arch", "gb10", "--seq", "8192",
                                      "--filter", "cuda"])
    for c in _plan(args, get_study("sawtooth"), arch):
        got = [r["value"] for r in rows if r["variant"] == c.variant.id(c.problem)
               and r["B"] == c.problem.B and r["metric"] == Metric.L2_TEX_MISSES]
        assert got == [simulate_case(c, arch, arch.l2_bytes).counts.misses]


def test_paper_figures_cli_redraws_from_a_run(tmp_path):
    out = tmp_path / "run"
    assert cli("sawtooth", "--arch", "gb10", "--seq", "2048", "--filter", "cuda",
               "--no-figures", "--out", str(out)).returncode == 0
    r = subprocess.run([sys.executable, "-m", "paper_figures", "--arch", "gb10", "--run", str(out),
                        "--out", str(tmp_path / "figs")], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "figs" / "F8a.pdf").stat().st_size > 1000
    assert "F9a: skipped (no cuTile non-causal rows" in r.stdout


def test_reuse_study_writes_curves_with_their_abscissa(tmp_path):
    out = tmp_path / "run"
    r = cli("reuse", "--arch", "gb10", "--seq", "4096", "--filter", "cuda-noncausal",
            "--no-figures", "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows = read_csv(out / "counters.csv")
    mrc = [x for x in rows if x["metric"] == "lru_misses" and x["order"] == "linear"]
    caps = [x["x"] for x in mrc]
    assert caps == sorted(caps) and 24 << 20 in caps                  # GB10's L2 is on the grid
    misses = [x["value"] for x in mrc]
    assert all(a >= b for a, b in zip(misses, misses[1:]))           # never rises with capacity
    assert {x["source"] for x in rows} == {"simulated"}
    again = cli("reuse", "--arch", "gb10", "--mode", "measure", "--out", str(tmp_path / "m"))
    assert again.returncode == 2 and "simulator-only" in again.stderr


# -- longseq study --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", known_archs())
def test_longseq_plan_is_order_twins_over_schedules_and_families(name):
    arch = get_arch(name)
    cases = longseq_plan(arch)
    groups = {(c.problem.D, c.problem.causal) for c in cases}
    assert groups == {(64, False), (64, True), (128, False), (128, True)}
    assert len(cases) == 4 * 2 * 3 * 2 == 48
    assert len({c.id for c in cases}) == 48
    for c in cases:
        assert (c.problem.B, c.problem.H, c.problem.S_q, c.problem.S_kv) == (1, 16, LONG_S, LONG_S)
        assert c.panel == f"longseq-d{c.problem.D}-{'causal' if c.problem.causal else 'noncausal'}"
    for backend in (Backend.CUTILE, Backend.CUDA):
        mine = [c for c in cases if c.variant.backend == backend]
        assert len(mine) == 24
        assert {c.variant.schedule.kind for c in mine} == {ScheduleKind.GRID, ScheduleKind.TILE_X,
                                                           ScheduleKind.PERSISTENT}
        assert {c.variant.tiles for c in mine} == {arch.cutile_tiles if backend == Backend.CUTILE
                                                   else arch.cuda_tiles}
    saw = [c for c in cases if c.variant.order == ScanOrder.sawtooth()]
    lin = [c for c in cases if c.variant.order == ScanOrder.linear()]
    assert len(saw) == len(lin) == 24
    for c in saw:   # exactly one linear twin, identical but for the order
        twins = [t for t in lin if t.problem == c.problem and t.panel == c.panel
                 and t.resident == c.resident
                 and dataclasses.replace(t.variant, order=c.variant.order) == c.variant]
        assert len(twins) == 1, c.id
    for c in cases:
        if c.variant.schedule.kind == ScheduleKind.PERSISTENT:
            want = (arch.resident_ctas(arch.cutile_occupancy) if c.variant.backend == Backend.CUTILE
                    else arch.num_sms)
            assert c.variant.schedule.num_ctas == c.resident == want, c.id


def test_longseq_dry_run(tmp_path):
    r = cli("longseq", "--arch", "h100", "--dry-run", "--out", str(tmp_path / "x"))
    assert r.returncode == 0, r.stderr
    assert "longseq on h100: 48 cases" in r.stdout
    assert "cutile.sawtooth.static132.m128n128d128" in r.stdout   # P = 132 x occupancy 1
    assert "cuda.linear.tile2.m128n64d64" in r.stdout
    assert not (tmp_path / "x").exists()


# -- measure mode: --profile / --no-profile -------------------------------------------------------

def test_profile_and_no_profile_are_mutually_exclusive(tmp_path):
    r = cli("longseq", "--arch", "h100", "--profile", "--no-profile", "--out", str(tmp_path / "x"))
    assert r.returncode == 2
    assert "argument --no-profile: not allowed with argument --profile" in r.stderr
    assert not list(tmp_path.iterdir())


@pytest.fixture
def fake_gpu(monkeypatch):
    """Measure mode on the CPU: an H100 'present', the GPU steps of experiments.measurement.measure replaced
    by recorders (every case passes, ncu returns no rows)."""
    from experiments import run as run_mod
    from experiments.measurement import measure
    calls = {"precompile": [], "check_and_time": [], "profile": []}
    monkeypatch.setattr(run_mod, "detect", lambda: get_arch("h100"))

    def precompile(cases):
        calls["precompile"].append(list(cases))
        return []

    def check_and_time(cases, arch, **kw):
        calls["check_and_time"].append(kw)
        return measure.Outcome(passed=list(cases))

    def profile(cases, arch, run_dir, **kw):
        calls["profile"].append(list(cases))
        return [], [], {"ncu": "fake"}

    monkeypatch.setattr(measure, "precompile", precompile)
    monkeypatch.setattr(measure, "check_and_time", check_and_time)
    monkeypatch.setattr(measure, "profile", profile)
    monkeypatch.setattr(measure, "device_facts", lambda: {"gpu": "fake H100"})
    return calls


@pytest.mark.parametrize("study, flag, profiled, reason", [
    ("longseq", None, False, "not part of the longseq study (pass --profile)"),
    ("longseq", "--profile", True, {"ncu": "fake"}),
    ("longseq", "--no-profile", False, "skipped (--no-profile)"),
    ("sawtooth", None, True, {"ncu": "fake"}),
    ("sawtooth", "--no-profile", False, "skipped (--no-profile)"),
])
def test_measure_profiles_as_asked_and_says_why_in_the_manifest(tmp_path, fake_gpu, study, flag,
                                                                 profiled, reason):
    from experiments import run as run_mod
    out = tmp_path / "run"
    args = [study, "--arch", "h100", "--mode", "measure", "--no-figures",
            "--filter", "d64|cuda-batch", "--out", str(out)] + ([flag] if flag else [])
    assert run_mod.main(args) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["mode"] == "measure"
    assert m["parameters"]["profiling"] == reason     # the reason, or the profiler's settings
    assert len(fake_gpu["profile"]) == int(profiled)
    assert (out / "counters.csv").exists() == profiled
    n = len(fake_gpu["precompile"][0])
    assert n == len(m["parameters"]["cases"]) and n > 0
    calls = fake_gpu["check_and_time"]                # one per problem, each kept as it ends
    assert calls and all(kw["timed"] is True and kw["reps"] == get_study(study).reps
                         for kw in calls)


# -- experiments.measurement.measure.precompile: cases split by family ----------------------------------------

def test_precompile_sends_cutile_cases_to_warm_and_cuda_cases_to_nvrtc(monkeypatch):
    import cuda_baseline.backend as cuda_backend
    import kernels.warm as warm_mod
    from experiments.measurement.measure import precompile
    got = {}

    def warm(jobs):
        got["jobs"] = list(jobs)
        return ["cutile error"]

    def cuda_precompile(instances):
        got["instances"] = list(instances)
        raise RuntimeError("nvrtc boom")

    monkeypatch.setattr(warm_mod, "warm", warm)
    monkeypatch.setattr(cuda_backend, "precompile", cuda_precompile)
    cases = longseq_plan(get_arch("h100"))
    errors = precompile(cases)
    cutile = [c for c in cases if c.variant.backend == Backend.CUTILE]
    cuda = [c for c in cases if c.variant.backend == Backend.CUDA]
    assert len(got["jobs"]) == len(cutile) == 24 and len(got["instances"]) == len(cuda) == 24
    for j, c in zip(got["jobs"], cutile):
        assert (j.B, j.H, j.S_q, j.D, j.causal) == (c.problem.B, c.problem.H, c.problem.S_q,
                                                    c.problem.D, c.problem.causal)
        assert (j.order, j.schedule) == (c.variant.order.label, c.variant.schedule.label)
        assert (j.tile_m, j.tile_n) == (c.variant.tiles.m, c.variant.tiles.n)
        assert j.occupancy is None and j.level == 6
        assert j.dtype == "fp16" and not j.trace
    assert got["instances"] == [cuda_backend.instance_for(c.variant, c.problem) for c in cuda]
    assert {i.tiles for i in got["instances"]} == {Tiles(128, 64)}
    assert errors == ["cutile error", "CUDA precompile: RuntimeError: nvrtc boom"]


# -- bad input: one line, exit 2, nothing on disk --------------------------------------------------

def _nothing_left(tmp_path, keep=()):
    left = sorted(p.name for p in tmp_path.iterdir() if p.name not in keep)
    assert left == [], left


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
    r = cli("sawtooth", "--arch", "gb10", "--capacity-mib", value, "--out", str(tmp_path / "r"))
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
    r = cli(study, "--arch", "h100", "--mode", mode, "--out", str(tmp_path / "r"))
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


def test_measure_refuses_a_simulated_capacity(tmp_path, fake_gpu):
    from experiments import run as run_mod
    args = ["sawtooth", "--arch", "h100", "--mode", "measure", "--capacity-mib", "20",
            "--out", str(tmp_path / "r")]
    assert run_mod.main(args) == 2
    assert fake_gpu["precompile"] == []
    _nothing_left(tmp_path)


# -- run directories: the final name, reserved before the work --------------------------------------

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


# -- what the user reads ----------------------------------------------------------------------------

def _rows_for(cases, metrics):
    from spec.records import UNITS, Row, case_fields
    rows = []
    for c in cases:
        for m, base in metrics.items():
            value = base * (0.7 if c.variant.order.label == "sawtooth" else 1.0)
            rows.append(Row(run="r", study="s", arch="h100", metric=m, value=value,
                            unit=UNITS.get(m, ""), source="measured",
                            **case_fields(c.problem, c.variant)))
    return rows


@pytest.mark.parametrize("study", ["sawtooth", "longseq"])
def test_results_table_reads_in_80_columns(study):
    from rich.console import Console

    from experiments.run import summary_table
    cases = get_study(study).plan(get_arch("h100"))
    rows = _rows_for(cases, {Metric.L2_TEX_MISSES: 3.7e8, Metric.NONCOMPULSORY_MISSES: 1.2e8,
                             Metric.KERNEL_TIME_MS: 12.345, Metric.TFLOPS: 456.7})
    console = Console(width=80, record=True, color_system=None)
    table, left_out = summary_table(cases, rows, "MEASURED on fake H100", console.width)
    console.print(table)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    for c in cases:                                      # every variant id whole, on one line
        assert c.variant.id(c.problem) in text
    assert "…" not in text
    assert "Δ misses" in text and "-30.0%" in text      # the change against the linear twin
    assert left_out                                     # something had to go at 80 columns ...
    wide = Console(width=200, record=True, color_system=None)
    table, none = summary_table(cases, rows, "t", wide.width)
    wide.print(table)
    assert none == [] and "TFLOPS" in wide.export_text()     # ... and nothing at 200


def test_results_table_names_problems_that_differ_beyond_b_and_s():
    """The shapes study runs one variant id on problems that differ only in heads or dtype: each
    row shows its own problem and its own time, never a median pooled over problems."""
    from rich.console import Console

    from experiments.run import summary_table
    from spec.records import UNITS, Metric, Row, case_fields
    cases = [c for c in get_study("shapes").plan(get_arch("h100"))
             if c.panel == "shapes-uneven" and c.problem.S_q == 1000]
    assert len({c.variant.id(c.problem) for c in cases}) < len(cases)   # ids repeat
    rows = [Row(run="r", study="shapes", arch="h100", metric=Metric.KERNEL_TIME_MS,
                value=0.001 * (i + 1), unit=UNITS[Metric.KERNEL_TIME_MS], source="measured",
                **case_fields(c.problem, c.variant)) for i, c in enumerate(cases)]
    console = Console(width=160, record=True, color_system=None)
    table, _ = summary_table(cases, rows, "t", console.width)
    console.print(table)
    text = console.export_text()
    for i, c in enumerate(cases):
        line = next(ln for ln in text.splitlines() if c.problem.label in ln
                    and c.variant.id(c.problem) in ln)
        assert f"{0.001 * (i + 1):.3f}" in line


def test_figure_lines_collapse_other_studies_skips():
    from experiments.run import _figure_lines
    study = get_study("sawtooth")
    report = [{"figure": "F8a", "files": ["F8a.png"]},
              {"figure": "F9a", "skipped": "no cuTile non-causal rows"}]
    report += [{"figure": f"X{i}", "skipped": "no rows"} for i in range(18)]
    lines = _figure_lines(study, report, "/r/figures")
    assert lines == ["figures: F8a in /r/figures", "  F9a: skipped (no cuTile non-causal rows)",
                     "  18 figures of other studies skipped (no rows for them in this run)"]


def test_small_data_says_that_it_fits_the_cache(tmp_path):
    r = cli("sawtooth", "--arch", "gb10", "--seq", "16384", "--filter", "cuda-batch",
            "--no-figures", "--out", str(tmp_path / "fits"))
    assert r.returncode == 0, r.stderr
    flat = " ".join(r.stdout.split())
    assert ("note: at S=16384 K+V per head (4 MiB) fits in the 24 MiB simulated L2" in flat
            and "exceeds it for S > 98304" in flat)
    assert "next: python -m paper_figures --arch gb10 --run" in flat
    r = cli("sawtooth", "--arch", "gb10", "--seq", "16384", "--capacity-mib", "3", "--filter",
            "cuda-batch", "--no-figures", "--out", str(tmp_path / "exceeds"))
    assert r.returncode == 0, r.stderr
    assert "fits in the" not in r.stdout


def test_dry_run_estimates_the_work():
    from experiments.run import tile_accesses
    from spec import TileGrid, build_trace
    for c in get_study("sawtooth").plan(get_arch("gb10"))[:2]:     # the count is exact
        small = dataclasses.replace(c, problem=dataclasses.replace(c.problem, S_q=3000,
                                                                   S_kv=3000))
        v = small.variant
        trace = build_trace(TileGrid(small.problem, v.tiles), v.schedule, v.order, small.resident)
        assert tile_accesses(small) == trace.n_accesses
    out = {a: " ".join(cli("sawtooth", "--arch", a, "--dry-run").stdout.split())
           for a in ("gb10", "b200")}
    acc = {}
    for a, text in out.items():
        m = re.search(r"work: 16 cases, ([\d,.]+) M tile accesses", text)
        acc[a] = float(m.group(1).replace(",", ""))
        assert re.search(r"simulate \(timed model, \d+ MiB L2\): about [\d.]+ (s|min|h) on "
                         r"\d+ thread\(s\), peak memory about [\d.]+ (MiB|GiB)", text), text
    text = " ".join(cli("sawtooth", "--arch", "gb10", "--dry-run", "--model",
                        "lockstep").stdout.split())
    assert re.search(r"simulate \(lock-step model, 24 MiB L2\): about [\d.]+ (s|min|h) on \d+ "
                     r"thread\(s\), peak memory about [\d.]+ GiB", text), text
    assert 25 < acc["b200"] / acc["gb10"] < 31          # b200's study is ~28x GB10's


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


def test_build_residency_falls_back_to_the_request_and_says_why(monkeypatch):
    """Without a cuTile compiler, or when the cubin cannot be built or read, a grid launch keeps
    the study's occupancy request and the note says so; a persistent launch is its P."""
    from experiments.simulation.simulate import resident_of_build
    from kernels import backend
    from kernels.toolchain import ToolchainError
    gb10 = get_arch("gb10")
    cases = get_study("sawtooth").plan(gb10)
    grid = next(c for c in cases if c.variant.schedule.kind == ScheduleKind.TILE_X)
    persistent = next(c for c in cases if c.variant.schedule.is_persistent)
    assert resident_of_build(persistent, gb10) == (persistent, "")
    for err, says in ((ImportError("No module named 'cuda.tile'"), "no cuTile compiler"),
                      (ToolchainError("tileiras failed\nmore"), "could not be built or read here: "
                                                                "tileiras failed)")):
        def boom(*a, e=err):
            raise e
        monkeypatch.setattr(backend, "compiled_ctas_per_sm", boom)
        case, note = resident_of_build(grid, gb10)
        assert case == grid and note.startswith(f"resident CTAs {grid.resident}: the occupancy "
                                                "request") and says in note


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
    when the run is interrupted, even through the ``os._exit`` of an interrupted simulation."""
    scratch, out = tmp_path / "tmp", tmp_path / "runs" / "r"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "CUDA_TILE_TEMP_DIR"} | {
        "TMPDIR": str(scratch)}
    p = subprocess.Popen([sys.executable, "-m", "experiments.run", "sawtooth", "--arch", "gb10",
                          "--out", str(out), "--no-figures"], cwd=ROOT, env=env,
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
    from kernels.toolchain import SCRATCH_ENV, scratch_dir
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

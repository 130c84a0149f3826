"""The real CLI, end to end on small cases: plan, errors (exit 2, nothing left behind), outputs."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.studies import LONG_S, get_study, longseq_plan
from spec import Backend, ScanOrder, Tiles, get_arch, known_archs
from spec.records import SCHEMA_VERSION, read_csv
from spec.schedules import ScheduleKind

ROOT = Path(__file__).resolve().parents[2]


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
    assert "16 cases" in r.stdout and "cutile.sawtooth.static48.m64n64d64.occ2" in r.stdout
    assert "32 MiB = 1.33x the 24 MiB L2" in r.stdout
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("args, message", [
    (["sawtooth", "--arch", "a100"], "unknown arch 'a100'; known: gb10, h100, h200, b200, b300"),
    (["nope", "--arch", "gb10"], "unknown study 'nope'; known: sawtooth, l1l2"),
    (["sawtooth"], "--arch is required"),
    (["sawtooth", "--arch", "gb10", "--seq", "0"], "--seq 0 must be a positive"),
    (["sawtooth", "--arch", "gb10", "--capacity-mib", "-1"], "must be positive"),
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
    """Measure mode on the CPU: an H100 'present', the GPU steps of experiments.measure replaced
    by recorders (every case passes, ncu returns no rows)."""
    from experiments import measure
    from experiments import run as run_mod
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
        return [], {"ncu": "fake"}

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
    (kw,) = fake_gpu["check_and_time"]
    assert kw["timed"] is True and kw["reps"] == get_study(study).reps


# -- experiments.measure.precompile: cases split by family ----------------------------------------

def test_precompile_sends_cutile_cases_to_warm_and_cuda_cases_to_nvrtc(monkeypatch):
    import cuda_baseline.backend as cuda_backend
    import kernels.warm as warm_mod
    from experiments.measure import precompile
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


# -- kernels.bench: results are never overwritten -------------------------------------------------

class _BenchReached(Exception):
    pass


@pytest.mark.parametrize("existing", ["out.csv", "out.json"])
def test_bench_refuses_an_existing_output_before_touching_the_gpu(tmp_path, monkeypatch, capsys,
                                                                  existing):
    import kernels.bench as bench

    def no_bench(*a, **k):
        raise _BenchReached
    monkeypatch.setattr(bench, "Bench", no_bench)
    (tmp_path / existing).write_text("keep me")
    with pytest.raises(SystemExit) as e:
        bench.main(["--out", str(tmp_path / "out.csv")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "never overwritten" in err and "pass another --out" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [existing]
    assert (tmp_path / existing).read_text() == "keep me"


def test_bench_with_a_free_output_goes_on_to_the_gpu(tmp_path, monkeypatch):
    import kernels.bench as bench

    def no_bench(*a, **k):
        raise _BenchReached
    monkeypatch.setattr(bench, "Bench", no_bench)
    with pytest.raises(_BenchReached):
        bench.main(["--out", str(tmp_path / "out.csv")])
    assert not list(tmp_path.iterdir())

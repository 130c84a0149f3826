"""The experiments CLI's measure mode on the CPU (a fake H100 whose GPU steps are recorders):
``--profile`` / ``--no-profile`` and the reason the manifest gives, the precompile step's
split of the cases by family, and a simulated capacity refused."""
from __future__ import annotations

import json

import pytest

from experiments.registry.plans import longseq_plan
from experiments.registry.studies import get_study
from spec import Backend, Tiles, get_arch
from tests.cpu.experiments.cli_helpers import _nothing_left, cli


def test_profile_and_no_profile_are_mutually_exclusive(tmp_path):
    r = cli("longseq", "--arch", "h100", "--profile", "--no-profile", "--out", str(tmp_path / "x"))
    assert r.returncode == 2
    assert "argument --no-profile: not allowed with argument --profile" in r.stderr
    assert not list(tmp_path.iterdir())


@pytest.fixture
def fake_gpu(monkeypatch):
    """Measure mode on the CPU: an H100 'present', the GPU steps of experiments.measurement.measure
    replaced by recorders (every case passes, ncu returns no rows)."""
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


def test_measure_refuses_a_simulated_capacity(tmp_path, fake_gpu):
    from experiments import run as run_mod
    args = ["sawtooth", "--arch", "h100", "--mode", "measure", "--capacity-mib", "20",
            "--out", str(tmp_path / "r")]
    assert run_mod.main(args) == 2
    assert fake_gpu["precompile"] == []
    _nothing_left(tmp_path)


def test_precompile_sends_cutile_cases_to_warm_and_cuda_cases_to_nvrtc(monkeypatch):
    import cuda_baseline.host.backend as cuda_backend
    import kernels.host.warm as warm_mod
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

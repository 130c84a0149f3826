"""Compile every variant the selected GPU tests launch, in parallel, before the first of them runs.

Each GPU test module lists what it launches as data: ``builds(arch)`` returns, per test function,
the (variant, problem, trace build?) triples. The session fixture below gathers them for the
selected test functions and compiles them in worker processes on every core of the machine:
cuTile jobs through ``kernels.host.warm.warm`` (which fills cuda.tile's disk cache) and CUDA
instantiations through ``cuda_baseline.host.backend.precompile`` (NVRTC into CuPy's disk cache, then
loaded into this process), both at once. The tests then only load what was built; the terminal
shows ``compile: N variants in X s`` and, at the end, the time the tests themselves took.

Without a GPU every test here is skipped (tests/conftest.py), so the fixture never runs.
"""
from __future__ import annotations

import threading
import time

import pytest

_TIMES: dict[str, float] = {}


def _jobs_and_instances(triples):
    from cuda_baseline.host.backend import instance_for
    from kernels.host.warm import Job
    from spec import Backend
    jobs, insts = [], []
    for v, p, trace in dict.fromkeys(triples):
        if v.backend == Backend.CUTILE:
            jobs.append(Job(B=p.B, H=p.H, H_kv=p.H_kv, S_q=p.S_q, S_kv=p.S_kv, D=p.D,
                            dtype=p.dtype.value, causal=p.causal, order=v.order.label,
                            schedule=v.schedule.label, tile_m=v.tiles.m, tile_n=v.tiles.n,
                            occupancy=v.occupancy, level=v.level or 6, trace=trace))
        else:
            insts.append(instance_for(v, p, trace=trace))
    return list(dict.fromkeys(jobs)), list(dict.fromkeys(insts))


def selected_builds(items, arch) -> list:
    """The (variant, problem, trace) triples of the selected test functions, by module."""
    wanted: dict = {}
    for item in items:
        mod = getattr(item, "module", None)
        if mod is not None and hasattr(mod, "builds") and item.get_closest_marker("gpu"):
            wanted.setdefault(mod, set()).add(item.originalname)
    triples = []
    for mod, names in wanted.items():
        for name, builds in mod.builds(arch).items():
            if name in names:
                triples += builds
    return triples


@pytest.fixture(scope="session", autouse=True)
def precompiled(request):
    """Compile what the selected tests launch (both families at once), then run them."""
    from cuda_baseline.host.backend import precompile
    from kernels.host.warm import warm
    from spec import detect

    report = request.config.pluginmanager.get_plugin("terminalreporter")
    jobs, insts = _jobs_and_instances(selected_builds(request.session.items, detect()))
    t0 = time.perf_counter()
    errors: list[str] = []
    worker = threading.Thread(target=lambda: errors.extend(warm(jobs)))
    worker.start()
    try:
        precompile(insts)
    except Exception as e:  # noqa: BLE001 - the test that needs the instance fails with the log
        errors.append(f"CUDA precompile: {type(e).__name__}: {str(e)[:300]}")
    finally:
        worker.join()
    _TIMES["compile"] = time.perf_counter() - t0
    if report is not None:
        report.write_line(f"\ncompile: {len(jobs) + len(insts)} variants in "
                          f"{_TIMES['compile']:.0f} s ({len(jobs)} cuTile, {len(insts)} CUDA; "
                          f"{len(errors)} failed to build, their tests will say why)")
    _TIMES["tests_start"] = time.perf_counter()
    yield


def pytest_terminal_summary(terminalreporter):
    if "tests_start" in _TIMES:
        terminalreporter.write_line(
            f"GPU suite: compile {_TIMES['compile']:.0f} s, tests "
            f"{time.perf_counter() - _TIMES['tests_start']:.0f} s")

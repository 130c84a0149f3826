"""Compile every variant the selected GPU tests launch, in parallel, before the first of them runs.

Each GPU test module lists what it launches as data: ``builds(arch)`` returns, per test function,
the (variant, problem, trace build?) triples. The session fixture below gathers them for the
selected test functions and compiles them in worker processes on every core of the machine:
cuTile jobs through ``kernels.host.warm.warm`` (which fills cuda.tile's disk cache) and CUDA
instantiations through ``cuda_baseline.host.backend.precompile`` (NVRTC into CuPy's disk cache, then
loaded into this process), both at once. The tests then only load what was built; the terminal
shows ``compile: N variants in X s`` and, at the end, the time the tests themselves took.

Every build is compiled once per machine, not once per test process: the cuTile builds land in
``$CUDA_TILE_CACHE_DIR`` and the CUDA ones in CuPy's cache (precompiled per test module, so that
a process running a whole module finds the same cache entries; ``compile_builds``). The whole
suite's runner (``python -m tests.gpu``, tests/gpu/__main__.py) first runs pytest with
``--gpu-warm-only``: that compiles what every collected test launches (the ``builds`` data and each
module's ``prewarm()``, the training and trace builds) in parallel and runs no test. It then starts
the shards with ``SAWTOOTH_GPU_WARMED=1``: they skip the parallel cuTile pools (their launches load
from the disk cache) and only load the CUDA modules from CuPy's cache.

Without a GPU every test here is skipped (tests/conftest.py), so the fixture never runs.
"""
from __future__ import annotations

import os
import threading
import time

import pytest

_TIMES: dict[str, float] = {}
WARMED_ENV = "SAWTOOTH_GPU_WARMED"


def warmed() -> bool:
    """Whether the runner's warm step already compiled every build of this run."""
    return os.environ.get(WARMED_ENV) == "1"


def _jobs_and_instances(triples):
    from cuda_baseline.host.backend import instance_for
    from kernels.host.warm import Job
    from spec import Backend
    jobs, insts = [], []
    for v, p, trace, *cfg in dict.fromkeys(triples):
        if v.backend == Backend.CUTILE:
            extra = {}
            if cfg:     # the family's defaults (a tuning candidate: tactic bits, worker warps)
                extra = dict(worker_warps=cfg[0].worker_warps, tactic=cfg[0].tactic)
            jobs.append(Job(B=p.B, H=p.H, H_kv=p.H_kv, S_q=p.S_q, S_kv=p.S_kv, D=p.D,
                            dtype=p.dtype.value, causal=p.causal, order=v.order.label,
                            schedule=v.schedule.label, tile_m=v.tiles.m, tile_n=v.tiles.n,
                            occupancy=v.occupancy, level=v.level or 6, trace=trace, **extra))
        else:
            insts.append(instance_for(v, p, trace=trace))
    return list(dict.fromkeys(jobs)), list(dict.fromkeys(insts))


def selected_builds(items, arch) -> dict[str, list]:
    """{module name: the (variant, problem, trace[, family defaults]) tuples of its selected
    test functions}."""
    wanted: dict = {}
    for item in items:
        mod = getattr(item, "module", None)
        if mod is not None and hasattr(mod, "builds") and item.get_closest_marker("gpu"):
            wanted.setdefault(mod, set()).add(item.originalname)
    out: dict[str, list] = {}
    for mod, names in wanted.items():
        for name, builds in mod.builds(arch).items():
            if name in names:
                out.setdefault(mod.__name__, []).extend(builds)
    return out


def compile_builds(by_module: dict[str, list], parallel: bool = True) -> tuple[int, int, list[str]]:
    """Compile the cuTile jobs and CUDA instances of ``by_module`` (``selected_builds``; both
    families at once); with ``parallel`` False (the runner's shards, after its warm step) only
    load the CUDA modules from CuPy's disk cache and leave the cuTile builds to their launches
    (a disk-cache hit each). CuPy caches a module of up to 8 instantiations under a key of all
    of them, so the CUDA instances are precompiled per test module: a process that runs a whole
    module (the runner keeps such modules in one shard) asks for exactly the warm step's modules.
    Returns (cuTile jobs, CUDA instances, error lines)."""
    from cuda_baseline.host.backend import precompile
    from kernels.host.warm import warm
    jobs, per_module = [], []
    for triples in by_module.values():
        j, i = _jobs_and_instances(triples)
        jobs += j
        per_module.append(i)
    jobs = list(dict.fromkeys(jobs))
    errors: list[str] = []
    worker = threading.Thread(target=lambda: errors.extend(warm(jobs))) if parallel else None
    if worker is not None:
        worker.start()
    try:
        for insts in per_module:
            if insts:
                precompile(insts, jobs=None if parallel else 1)
    except Exception as e:  # noqa: BLE001 - the test that needs the instance fails with the log
        errors.append(f"CUDA precompile: {type(e).__name__}: {str(e)[:300]}")
    finally:
        if worker is not None:
            worker.join()
    return len(jobs), sum(map(len, per_module)), errors


def prewarm_modules(items) -> list[str]:
    """Run ``prewarm()`` of every test module with selected items, each in its own Python
    process, side by side (each compiles its module's training or trace builds in its own
    worker processes; separate processes keep the two families' in-process loaders apart);
    the error lines."""
    import subprocess
    import sys
    mods = list(dict.fromkeys(getattr(i, "module", None) for i in items))
    names = [m.__name__ for m in mods if m is not None and hasattr(m, "prewarm")]
    code = ("import sys, importlib; m = importlib.import_module(sys.argv[1]); "
            "[print('warm:', e) for e in (m.prewarm() or [])]")
    procs = [(n, subprocess.Popen([sys.executable, "-c", code, n], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)) for n in names]
    errors = []
    for n, p in procs:
        out, _ = p.communicate()
        errors += [f"{n}: {ln[6:]}" for ln in out.splitlines() if ln.startswith("warm: ")]
        if p.returncode != 0:
            errors.append(f"{n}.prewarm exited {p.returncode}: {out[-500:]}")
    return errors


def pytest_runtestloop(session):
    """``--gpu-warm-only``: compile every build of the collected tests, run none of them."""
    if not session.config.getoption("--gpu-warm-only"):
        return None
    from spec import detect
    out = session.config.getoption("--gpu-nodeids")
    if out:
        with open(out, "w") as f:
            f.writelines(i.nodeid + "\n" for i in session.items)
    report = session.config.pluginmanager.get_plugin("terminalreporter")
    if detect() is None:        # no GPU (the runner's CPU test): every test will skip
        if report is not None:
            report.write_line(f"\nwarm: {len(session.items)} tests collected; no GPU, nothing "
                              "compiled")
        return True
    t0 = time.perf_counter()
    errors: list[str] = []
    mods = threading.Thread(target=lambda: errors.extend(prewarm_modules(session.items)))
    mods.start()
    n_jobs, n_insts, errs = compile_builds(selected_builds(session.items, detect()))
    mods.join()
    errors += errs
    for e in errors:
        print("warm:", e)
    if report is not None:
        report.write_line(f"\nwarm: {len(session.items)} tests collected; {n_jobs} cuTile and "
                          f"{n_insts} CUDA variants and the modules' prewarm() builds in "
                          f"{time.perf_counter() - t0:.0f} s ({len(errors)} failed to build, "
                          "their tests will say why)")
    return True


@pytest.fixture(scope="session", autouse=True)
def precompiled(request):
    """Compile what the selected tests launch (both families at once), then run them."""
    from spec import detect

    report = request.config.pluginmanager.get_plugin("terminalreporter")
    t0 = time.perf_counter()
    n_jobs, n_insts, errors = compile_builds(selected_builds(request.session.items, detect()),
                                             parallel=not warmed())
    _TIMES["compile"] = time.perf_counter() - t0
    if report is not None:
        report.write_line(f"\ncompile: {n_jobs + n_insts} variants in "
                          f"{_TIMES['compile']:.0f} s ({n_jobs} cuTile, {n_insts} CUDA"
                          f"{', warmed by the runner' if warmed() else ''}; "
                          f"{len(errors)} failed to build, their tests will say why)")
    _TIMES["tests_start"] = time.perf_counter()
    yield


def pytest_terminal_summary(terminalreporter):
    if "tests_start" in _TIMES:
        terminalreporter.write_line(
            f"GPU suite: compile {_TIMES['compile']:.0f} s, tests "
            f"{time.perf_counter() - _TIMES['tests_start']:.0f} s")

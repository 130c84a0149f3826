"""Test markers: ``gpu`` tests skip without a CUDA GPU; ``compile`` tests skip when the toolchain
(cuda-tile + tileiras, or nvcc) is absent, unless REQUIRE_COMPILE=1 (set by .ci/run) turns the skip
into a failure so CI cannot pass by compiling nothing."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from anywhere: the repo's packages, not PyPI's namesakes
    sys.path.insert(0, str(ROOT))


def _has_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


HAS_GPU = _has_gpu()


def pytest_addoption(parser):
    """The GPU runner's options (tests/gpu/conftest.py, tests/gpu/__main__.py)."""
    parser.addoption("--gpu-warm-only", action="store_true", default=False,
                     help="compile what the collected GPU tests launch (their builds and each "
                          "module's prewarm()) in parallel, then stop without running a test")
    parser.addoption("--gpu-nodeids", default=None,
                     help="with --gpu-warm-only: write the collected test ids to this file")


def _named_files_only(config) -> bool:
    """Whether every path on the command line names a test file or a test (not a directory)."""
    args = [a.split("::")[0] for a in config.args]
    return bool(args) and all(Path(a).suffix == ".py" for a in args)


WORKERS_ENV = "SAWTOOTH_TEST_WORKERS"
MAX_WORKERS = 8


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """A CPU run over directories (the README's ``python -m pytest -q tests``, .ci/run's ``-m
    slow`` step) is spread over the machine's cores by pytest-xdist (the ``test`` extra), one
    test file per worker at a time (``--dist loadfile``: a module's fixtures are built once):
    ``$SAWTOOTH_TEST_WORKERS`` workers, else one per core up to ``MAX_WORKERS``. Not where a GPU
    is present (the GPU suite has its own runner, ``python -m tests.gpu``), not for named files
    or tests, ``--collect-only`` or an explicit ``-n``; ``SAWTOOTH_TEST_WORKERS=0`` runs in one
    process. Runs before xdist's own hook, which then starts the workers."""
    opt = config.option
    if (not config.pluginmanager.hasplugin("xdist") or getattr(opt, "numprocesses", None)
            is not None or os.environ.get("PYTEST_XDIST_WORKER") or opt.collectonly
            or getattr(opt, "usepdb", False) or config.getoption("--gpu-warm-only")
            or HAS_GPU or _named_files_only(config)):
        return None
    n = os.environ.get(WORKERS_ENV)
    n = int(n) if n and n.isdigit() else min(MAX_WORKERS, len(os.sched_getaffinity(0)))
    if n > 1:
        opt.numprocesses = n
        if opt.dist == "no":
            opt.dist = "loadfile"
    return None


def pytest_collection_modifyitems(config, items):
    """GPU tests skip without a GPU. ``slow`` tests (compile matrices, installs, regenerations,
    documented commands) are left out of a run over directories (``python -m pytest -q tests``,
    the README's command) unless ``-m`` selects by marker (``-m slow``: .ci/run's second step);
    a run that names test files or tests runs what it names."""
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip_gpu)
    if config.option.markexpr or _named_files_only(config):
        return
    slow = [i for i in items if "slow" in i.keywords]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [i for i in items if "slow" not in i.keywords]


def require_toolchain(available: bool, what: str) -> None:
    """Skip (locally) or fail (CI) when a compile toolchain is missing."""
    if available:
        return
    if os.environ.get("REQUIRE_COMPILE") == "1":
        pytest.fail(f"{what} is required in CI (REQUIRE_COMPILE=1) but is not available")
    pytest.skip(f"{what} not available")


def nvcc_sm90(source: str, ptx: bool = False) -> tuple[int, str]:
    """Compile a standalone CUDA source for sm_90 with the toolkit's nvcc (skip, or fail in CI,
    without it): a cubin with ``-Xptxas -v`` (returns its exit code and the ptxas report) or, with
    ``ptx``, PTX (the exit code and the PTX text, or the error)."""
    import subprocess
    import tempfile

    from cuda_baseline.build.source import nvcc_path
    nvcc = nvcc_path()
    require_toolchain(nvcc is not None, "nvcc (CUDA 13.0)")
    with tempfile.TemporaryDirectory() as tmp:
        cu, out = Path(tmp) / "k.cu", Path(tmp) / ("k.ptx" if ptx else "k.cubin")
        cu.write_text(source)
        args = ["-ptx"] if ptx else ["-cubin", "-Xptxas", "-v"]
        r = subprocess.run([nvcc, "-arch=sm_90", *args, "-o", str(out), str(cu)],
                           capture_output=True, text=True)
        if ptx and r.returncode == 0:
            return 0, out.read_text()
        return r.returncode, r.stdout + r.stderr


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """How many documented commands ran (tests/cpu/repository/test_documented_commands.py): its
    passed cases, counted from the reports (so also when pytest-xdist ran them in workers)."""
    ran = [r for r in terminalreporter.stats.get("passed", [])
           if getattr(r, "when", "") == "call"
           and "test_documented_commands.py::test_documented_command_runs" in r.nodeid]
    if ran:
        from tests.cpu.repository.test_documented_commands import COMMANDS
        terminalreporter.write_line(f"documented commands: {len(ran)} of {len(COMMANDS)} ran "
                                    f"(README.md, REPORT.md, docs/*.md)")

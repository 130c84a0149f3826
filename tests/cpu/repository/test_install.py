"""A non-editable install works away from the checkout: the wheel is built from a copy of the
tree as ``pip install .`` builds it (in an isolated build environment, so pip fetches setuptools
once), installed into a fresh directory, and the main command runs from another directory with only
that directory on the path (the checkout is never imported: each command's modules are checked to
come from the install). What needs a committed dataset says so in one line, exit 2."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

IGNORE = shutil.ignore_patterns(".git", ".ci-venv", ".venv", "build", "dist", "*.egg-info",
                                "__pycache__", "runs", "out", ".pytest_cache", ".scratch")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(site directory, working directory, environment) of a wheel installed with ``--target``."""
    base = tmp_path_factory.mktemp("install")
    src, wheels, site, work = base / "src", base / "wheels", base / "site", base / "work"
    shutil.copytree(ROOT, src, ignore=IGNORE)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    r = subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels),
                        str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    wheel, = wheels.glob("*.whl")
    r = subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "MPLBACKEND": "Agg"}
    return site, work, env


def _py(installed, *args, timeout=600):
    site, work, env = installed
    return subprocess.run([sys.executable, *args], cwd=work, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_packages_come_from_the_install(installed):
    site = installed[0]
    r = _py(installed, "-c", "import spec, analysis, experiments, kernels, profiles, "
                             "paper_figures, cuda_baseline as c; "
                             "print(*(m.__file__ for m in (spec, analysis, experiments, kernels, "
                             "profiles, paper_figures, c)), sep='\\n')")
    assert r.returncode == 0, r.stderr
    files = [Path(f) for f in r.stdout.split()]
    assert len(files) == 7 and all(f.is_relative_to(site) for f in files), files
    for data in ("kernels/rules/configs/h100.json", "profiles/registry.json.xz",
                 "analysis/params/h100.json", "cuda_baseline/device/flash_fwd.cuh"):
        assert (site / data).is_file(), data


def test_the_installed_kernel_configurations_are_read(installed):
    r = _py(installed, "-c", "from kernels import load_arch_configs; "
                             "print(sorted(load_arch_configs('h100')))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() not in ("", "[]", "{}"), r.stdout


def test_main_command_and_its_next_hint_run_from_another_directory(installed):
    site, work, _ = installed
    r = _py(installed, "-m", "experiments.run", "sawtooth", "--arch", "gb10")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "SIMULATED" in r.stdout
    runs = list((work / "runs" / "gb10" / "sawtooth").iterdir())
    assert len(runs) == 1 and (runs[0] / "counters.csv").stat().st_size > 0
    import json  # no commit: version and code hash
    git = json.loads((runs[0] / "manifest.json").read_text())["git"]
    assert git["commit"] is None and git["version"] and len(git["source_sha256"]) == 64, git
    assert not (site / "runs").exists()                      # nothing written into the install
    hint = next(line for line in r.stdout.splitlines() if line.startswith("next: "))
    cmd = hint.removeprefix("next: python ").split()
    for _ in range(2):                                       # the hint works twice
        again = _py(installed, *cmd)
        assert again.returncode == 0, again.stderr[-2000:]
    drawn = sorted(d.name for d in (work / "paper_figures" / "out" / "gb10").iterdir())
    assert drawn == [runs[0].name, f"{runs[0].name}-2"], drawn    # a new directory each time
    assert not (site / "paper_figures" / "out").exists()


def test_dry_run_of_every_arch_needs_no_checkout(installed):
    for arch in ("gb10", "h100", "h200"):
        r = _py(installed, "-m", "experiments.run", "sawtooth", "--arch", arch, "--dry-run")
        assert r.returncode == 0, (arch, r.stderr[-2000:])


@pytest.mark.parametrize("cmd", [["analysis.findings", "--arch", "h100", "--no-sim"],
                                 ["paper_figures", "--arch", "h100"]])
def test_a_command_that_needs_the_datasets_says_where_to_get_them(installed, cmd):
    r = _py(installed, "-m", *cmd)
    assert r.returncode == 2, r.stderr[-2000:]
    assert len(r.stderr.strip().splitlines()) == 1 and "checkout" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_attention_without_torch_names_the_extra(installed):
    if _py(installed, "-c", "import torch").returncode == 0:
        pytest.skip("torch is installed here")
    for pkg in ("kernels", "cuda_baseline"):
        r = _py(installed, "-c", f"from {pkg} import attention")
        assert r.returncode != 0
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("ModuleNotFoundError: ") and "[gpu]" in last, last

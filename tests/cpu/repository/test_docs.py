"""The documents hold what they promise.

- README.md and REPORT.md stay readable (at most 12 kB and 45 kB), the files they link exist, and
  LICENSE, CITATION.cff, CHANGELOG.md and the docs/ pages are there.
- README's results box: every number of its ``value`` column equals what the command beside it
  prints from the committed data. Each distinct command runs once with ``--out`` into a temporary
  directory (``analysis.findings`` then writes one CSV per section, ``experiments.run`` a run
  directory with ``counters.csv``): the ``printed as`` column names the file, the row
  (``file[column=value, ...]``) and the columns, in the order of the numbers in ``value``. A
  number matches when it equals the CSV value rounded to the digits written (with k, M, G as
  10^3, 10^6, 10^9); a text column (a verdict) must appear in the cell; a number in the cell that
  no column accounts for fails.
- docs/extending.md's scan-order example is executed: its patch is applied to a copy of the
  repository, where the spec and model tests, the page's simulator block (whose printed output
  must be the page's) and one sm_90 build of each kernel family (``compile``) must pass.
"""
from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spec.records import read_dicts
from tests.conftest import ROOT, require_toolchain

README, REPORT = ROOT / "README.md", ROOT / "REPORT.md"
EXTENDING = ROOT / "docs" / "extending.md"


# --- sizes, files, links ------------------------------------------------------------------------

def test_readme_and_report_stay_readable():
    assert README.stat().st_size <= 12_000, f"README.md is {README.stat().st_size} B (bar 12 kB)"
    assert REPORT.stat().st_size <= 45_000, f"REPORT.md is {REPORT.stat().st_size} B (bar 45 kB)"


def test_the_project_files_exist():
    for name in ("LICENSE", "CITATION.cff", "CHANGELOG.md", "docs/cli.md", "docs/extending.md",
                 "docs/simulator-validation.md", "docs/history.md", "docs/gpu.md"):
        assert (ROOT / name).is_file(), f"{name} is missing"
    lic = (ROOT / "LICENSE").read_text()
    assert "Apache License" in lic and "Version 2.0, January 2004" in lic
    assert "END OF TERMS AND CONDITIONS" in lic
    assert 'license = { text = "Apache-2.0" }' in (ROOT / "pyproject.toml").read_text()
    cff = (ROOT / "CITATION.cff").read_text()
    assert cff.startswith("cff-version: 1.2.0") and "arXiv:2601.16032" in cff


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")


@pytest.mark.parametrize("doc", ["README.md", "REPORT.md", "docs/cli.md", "docs/extending.md",
                                 "docs/simulator-validation.md", "docs/history.md", "docs/gpu.md"])
def test_relative_links_resolve(doc):
    """Every relative link and image (the REPORT's figures under docs/figures/ included) points
    at a file of the repository."""
    path = ROOT / doc
    missing = [t for t in LINK.findall(path.read_text())
               if not re.match(r"[a-z]+:", t) and not (path.parent / t).exists()]
    assert not missing, f"{doc} links to files that do not exist: {missing}"


# --- the results box ----------------------------------------------------------------------------

SEGMENT = re.compile(r"^(?P<file>[\w.\-]+)\[(?P<where>[^\]]*)\]:\s*(?P<columns>.+)$")
NUMBER = re.compile(r"(?P<sign>[-−+]?)(?P<digits>\d+(?:\.\d+)?)(?:\s?(?P<unit>[kMG])(?![A-Za-z]))?"
                    r"(?P<range>\.\.)?")
SCALE = {"k": 1e3, "M": 1e6, "G": 1e9, None: 1.0}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def results_box() -> list[dict]:
    """The rows of the table under README's '## Results', as {column header: cell}."""
    lines = README.read_text().splitlines()
    start = lines.index("## Results")
    table = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("|"):
            table.append(line)
    head = _cells(table[0])
    assert head[:2] == ["result", "value (spread)"] and "command" in head and "printed as" in head
    return [dict(zip(head, _cells(line))) for line in table[2:]]


def numbers(cell: str) -> list[tuple[float, float]]:
    """(value, tolerance) of each number in a value cell: '23.6..27.2 G' is two numbers in G,
    '−75.9%' one to 0.05; the tolerance is half a unit of the last digit written."""
    found = []
    for m in NUMBER.finditer(cell):
        digits = m["digits"]
        decimals = len(digits.split(".")[1]) if "." in digits else 0
        sign = -1.0 if m["sign"] in "-−" and m["sign"] else 1.0
        found.append([sign * float(digits), 0.5 * 10 ** -decimals, m["unit"], bool(m["range"])])
    for i in range(len(found) - 2, -1, -1):        # a..b U: a takes b's unit
        if found[i][3] and found[i][2] is None:
            found[i][2] = found[i + 1][2]
    return [(v * SCALE[u], tol * SCALE[u]) for v, tol, u, _ in found]


def segments(cell: str) -> list[tuple[str, dict, list[str]]]:
    out = []
    for span in re.findall(r"`([^`]+)`", cell):
        m = SEGMENT.match(span)
        assert m, f"not a 'file[column=value, ...]: columns' locator: {span!r}"
        where = dict(kv.split("=", 1) for kv in m["where"].split(", "))
        out.append((m["file"], where, m["columns"].split()))
    assert out, f"no locator in {cell!r}"
    return out


def run_command(command: str, out: Path) -> Path:
    """Run a documented command with its output into ``out``; returns where its CSVs are."""
    args = shlex.split(command)
    assert args[:2] == ["python", "-m"], command
    module, rest = args[2], args[3:]
    if module == "analysis.findings":
        extra, where = ["--out", str(out)], out / rest[rest.index("--arch") + 1]
    elif module == "experiments.run":
        extra, where = ["--out", str(out / "run"), "--no-figures"], out / "run"
    else:
        pytest.fail(f"the results box names {module}, whose output this test cannot read")
    r = subprocess.run([sys.executable, "-m", module, *rest, *extra], cwd=ROOT,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"{command} failed:\n{r.stderr[-3000:]}"
    return where


def test_results_box_numbers_are_printed_by_their_commands(tmp_path):
    rows = results_box()
    assert len(rows) >= 5
    outputs: dict[str, Path] = {}
    for k, row in enumerate(rows):
        command = row["command"].strip("`")
        if command not in outputs:
            outputs[command] = run_command(command, tmp_path / f"cmd{len(outputs)}")
        where_dir = outputs[command]
        value, label = row["value (spread)"], row["result"]
        want = numbers(value)
        assert want, f"{label}: no number in its value cell"
        for file, where, columns in segments(row["printed as"]):
            name = file if file.endswith(".csv") else f"{file}.csv"
            match = [r for r in read_dicts(where_dir / name)
                     if all(r.get(c) == v for c, v in where.items())]
            assert len(match) == 1, f"{label}: {len(match)} rows of {name} match {where}"
            for col in columns:
                text = match[0][col]
                try:
                    got = float(text)
                except ValueError:
                    assert text in value, f"{label}: {col} = {text!r} is not in {value!r}"
                    continue
                assert want, f"{label}: {col} = {got} has no number left in {value!r}"
                shown, tol = want.pop(0)
                assert math.isclose(shown, got, abs_tol=tol * (1 + 1e-9)), (
                    f"{label}: {col} prints {got}, the README says {shown} ({value!r})")
        assert not want, f"{label}: numbers no column accounts for: {want} in {value!r}"


def test_number_parsing_reads_units_ranges_and_signs():
    assert numbers("−75.9% (linear 23.6..27.2 G, 4.46..7.17 G)") == [
        (-75.9, 0.05), (23.6e9, 0.05e9), (27.2e9, 0.05e9), (4.46e9, 0.005e9),
        (7.17e9, 0.005e9)]
    assert numbers("624 GB (34.2%), 368.1 M → 113.8 M") == [
        (624.0, 0.5), (34.2, 0.05), (368.1e6, 0.05e6), (113.8e6, 0.05e6)]


# --- docs/extending.md: the scan-order example, executed -----------------------------------------

def fenced_after(marker: str) -> str:
    """The fenced block that follows ``<!-- test_docs: marker -->`` in docs/extending.md."""
    text = EXTENDING.read_text()
    m = re.search(r"<!-- test_docs: " + re.escape(marker) + r" -->\n```\w*\n(.*?)\n```", text,
                  re.S)
    assert m, f"docs/extending.md has no block marked {marker!r}"
    return m.group(1) + "\n"


def _copy_tree(dst: Path) -> None:
    """The repository's tracked files (not profiles/: the example needs no data) into ``dst``."""
    r = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if r.returncode == 0 and r.stdout:
        files = [f for f in r.stdout.decode().split("\0") if f and not f.startswith("profiles/")]
        for f in files:
            if (ROOT / f).is_file():
                (dst / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / f, dst / f)
    else:                                            # not a git checkout
        shutil.copytree(ROOT, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            ".git", ".ci-venv", "profiles", "runs", "__pycache__", "out", "*.egg-info"))


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> Path:
    """A copy of the repository with docs/extending.md's scan-order patch applied."""
    dst = tmp_path_factory.mktemp("extended")
    _copy_tree(dst)
    (dst / "staggered.diff").write_text(fenced_after("scan-order patch"))
    r = subprocess.run(["git", "apply", "--whitespace=nowarn", "staggered.diff"], cwd=dst,
                       capture_output=True, text=True)
    assert r.returncode == 0, ("docs/extending.md's patch no longer applies to the code; "
                               f"regenerate it (git diff of the example):\n{r.stderr}")
    return dst


def _run(dst: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(dst))    # the copy's packages, not the checkout's
    return subprocess.run([sys.executable, *args], cwd=dst, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_extending_patch_makes_a_new_order_that_passes_the_spec_and_model_tests(patched):
    r = _run(patched, "-c", "from spec import ScanOrder; o = ScanOrder.parse('staggered'); "
             "print(o.label, int(o.kind))")
    assert r.returncode == 0 and r.stdout.split() == ["staggered", "4"], r.stderr
    r = _run(patched, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/cpu/spec/test_spec.py",
             "tests/cpu/analysis/models/test_models.py",
             "tests/cpu/cuda_baseline/test_cuda_compile.py::test_cpp_enums_equal_python_enums")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " failed" not in r.stdout and " passed" in r.stdout
    # the order is in the property tests and has its own hand-checked test
    r = _run(patched, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
             "tests/cpu/spec/test_spec.py", "-k", "staggered")
    assert r.returncode == 0 and "test_staggered_is_the_sawtooth" in r.stdout
    assert "test_labels_round_trip[staggered]" in r.stdout, r.stdout[-2000:]


@pytest.mark.slow
def test_extending_simulator_block_runs_and_prints_what_the_page_shows(patched):
    (patched / "simulate_staggered.py").write_text(fenced_after("scan-order simulator"))
    r = _run(patched, "simulate_staggered.py")
    assert r.returncode == 0, r.stderr[-3000:]
    shown = re.search(r"```text\n(.*?)\n```", EXTENDING.read_text(), re.S).group(1)
    assert r.stdout.strip() == shown.strip()


@pytest.mark.slow
@pytest.mark.compile
def test_extending_order_compiles_in_both_families_without_spills(patched):
    from cuda_baseline.build.source import nvcc_path
    from tests.cpu.kernels.test_cutile_compile import _available
    require_toolchain(_available(), "cuda-tile + tileiras + cuobjdump")
    require_toolchain(nvcc_path() is not None, "nvcc (CUDA 13.0)")
    r = _run(patched, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "tests/cpu/kernels/test_cutile_compile.py", "-k", "sm_90 and staggered")
    # the matrix is pairwise: every (target, order) pair compiles, whatever schedule it meets
    assert r.returncode == 0 and " passed" in r.stdout, r.stdout[-3000:]
    r = _run(patched, "-c", """
from cuda_baseline.build.source import Instance, compile_nvcc
from spec.orders import OrderKind
from spec.problem import DType, Tiles
from spec.schedules import ScheduleKind, WorkOrder
insts = [Instance(o, ScheduleKind.PERSISTENT, WorkOrder.Q_MAJOR, Tiles(80, 80), 64, False,
                  DType.FP16) for o in (OrderKind.SAWTOOTH, OrderKind.STAGGERED)]
res = compile_nvcc(insts, jobs=2)
for i in insts:
    print(i.order.name, res[i.name].registers, int(res[i.name].spills))
""")
    assert r.returncode == 0, r.stderr[-3000:]
    got = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines()}
    assert got["STAGGERED"][1] == "0" and got["SAWTOOTH"][1] == "0", got   # no spill

"""Every command the documents show runs: each ``python -m ...`` line of the fenced code blocks of
README.md, REPORT.md and docs/*.md is run in a fresh copy of the repository (committed data, outputs
kept out of the checkout). A command that needs a GPU runs with ``--dry-run``; ``pip install`` and
the full test suite (what runs this test) are not re-run. The terminal summary says how many
commands ran (tests/conftest.py).

What needs a GPU: ``experiments.run`` in measure mode (``--mode measure``, or the default ``auto``
for an arch other than GB10, whose study would be measured on its GPU), and the instruments and
tuner (``experiments.tuning.tune``, ``experiments.instruments.latency``,
``experiments.instruments.smmap``). A measured run that names its directory (``--out DIR``, as
docs/gpu.md's do, whose next commands draw and compare it) is stood in for by the committed run of
its study and arch (the run ``analysis.data.select`` picks, measured on that GPU), copied to
``DIR`` after the ``--dry-run``, so that the commands after it read a real measured run.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCS = ("README.md", "REPORT.md", "docs/*.md")
GPU_MODULES = ("experiments.tuning.tune", "experiments.instruments.latency",
               "experiments.instruments.smmap", "experiments.tuning.sweep",
               "experiments.speed.decode_bench")
TOOLCHAIN_MODULES = ("kernels.paper_builds.toolchains",)
"""Commands that compile with a toolchain CI does not install (cuda-tile 1.0.x in its own venv):
run with ``--dry-run``, which still prints the plan, tables and listings from committed files."""
RAN: list[str] = []          # read by tests/conftest.py's terminal summary


@dataclass(frozen=True)
class Documented:
    doc: str
    line: int
    argv: tuple[str, ...]

    @property
    def module(self) -> str:
        return self.argv[2]


def _blocks(text: str):
    """(first line number, lines) of each fenced code block."""
    lines, out, cur, start = text.splitlines(), [], None, 0
    for i, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            if cur is None:
                cur, start = [], i + 1
            else:
                out.append((start, cur))
                cur = None
        elif cur is not None:
            cur.append(line)
    return out


def documented_commands(root: Path = ROOT) -> list[Documented]:
    """Every ``python -m`` command of the fenced blocks, in document order, without duplicates."""
    found: dict[tuple, Documented] = {}
    docs = [p for pat in DOCS for p in sorted(root.glob(pat))]
    for doc in docs:
        for start, lines in _blocks(doc.read_text()):
            joined, first = [], []
            for k, line in enumerate(lines):
                if joined and joined[-1].endswith("\\"):
                    joined[-1] = joined[-1][:-1] + " " + line.strip()
                else:
                    joined.append(line.strip())
                    first.append(start + k)
            for n, line in zip(first, joined):
                line = re.sub(r"^\$\s+", "", line)
                try:
                    argv = shlex.split(line, comments=True)
                except ValueError:
                    continue
                for seg in _segments(argv):
                    if len(seg) >= 3 and seg[0] in ("python", "python3") and seg[1] == "-m":
                        key = tuple(seg)
                        found.setdefault(key, Documented(str(doc.relative_to(root)), n, key))
    return list(found.values())


def _segments(argv: list[str]):
    seg: list[str] = []
    for a in argv:
        if a in ("&&", "||", ";", "|"):
            yield seg
            seg = []
        else:
            seg.append(a)
    yield seg


def _opt(argv, name, default=None):
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return default


def needs_gpu(argv: tuple[str, ...]) -> bool:
    mod = argv[2]
    if mod in GPU_MODULES or mod in TOOLCHAIN_MODULES:
        return True
    if mod != "experiments.run" or "--list" in argv or "--dry-run" in argv:
        return False
    mode = _opt(argv, "--mode", "auto")
    return mode == "measure" or (mode == "auto" and _opt(argv, "--arch") not in (None, "gb10"))


def skipped(argv: tuple[str, ...]) -> str | None:
    """Why a documented command is not re-run here (None: it runs)."""
    if argv[2] == "pip":
        return "installs packages (CI installs them itself)"
    if argv[2] == "pytest" and [a for a in argv[3:] if not a.startswith("-")] in (["tests"], []):
        return "the whole test suite: what runs this test"
    return None


def stand_in(argv: tuple[str, ...]) -> tuple[Path, str] | None:
    """(the committed measured run, the ``--out`` it stands in at) for a measured
    ``experiments.run STUDY --arch ARCH --out DIR`` (None for any other command)."""
    out = _opt(argv, "--out")
    if argv[2] != "experiments.run" or not needs_gpu(argv) or out is None:
        return None
    from analysis.data import select
    study = next((a for a in argv[3:] if not a.startswith("-")), None)
    ds = select(_opt(argv, "--arch"), study, source="measured")
    assert ds is not None, f"no committed measured run of {study} stands in for {argv}"
    return ds.path, out


def runnable(argv: tuple[str, ...]) -> list[str]:
    cmd = [sys.executable, *argv[1:]]
    if needs_gpu(argv) and "--dry-run" not in argv:
        cmd.append("--dry-run")
    return cmd


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """A copy of the tracked tree: outputs of the commands never land in the checkout."""
    dst = tmp_path_factory.mktemp("checkout")
    try:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                               check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        files = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()
                 and not {".git", ".venv", ".ci-venv", "__pycache__"} & set(p.parts)]
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dst / f)
    return dst


def test_the_documents_show_commands():
    cmds = documented_commands()
    mods = {c.module for c in cmds}
    assert {"experiments.run", "paper_figures", "analysis.findings"} <= mods, mods


COMMANDS = [c for c in documented_commands() if skipped(c.argv) is None]


@pytest.mark.slow
@pytest.mark.parametrize("cmd", COMMANDS, ids=[f"{c.doc}:{c.line}" for c in COMMANDS])
def test_documented_command_runs(cmd, checkout):
    argv = runnable(cmd.argv)
    env = os.environ | {"PYTHONPATH": str(checkout), "MPLBACKEND": "Agg",
                        "PYTHONUNBUFFERED": "1", "COLUMNS": "120"}
    r = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, timeout=900)
    RAN.append(" ".join(shlex.quote(a) for a in argv[1:]))
    assert r.returncode == 0, (f"{cmd.doc}:{cmd.line}: `{' '.join(cmd.argv)}` exited "
                               f"{r.returncode}:\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
    if (measured := stand_in(cmd.argv)) is not None:
        run, out = measured
        shutil.copytree(run, checkout / out, dirs_exist_ok=True)


def test_the_collector_reads_fences_chains_and_comments(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "text `python -m not.fenced`\n```bash\n"
        "python -m pip install -e . && python -m experiments.run sawtooth --arch gb10  # main\n"
        "python -m experiments.run sawtooth --arch h100 \\\n    --filter 'a b'\n```\n")
    (tmp_path / "docs" / "x.md").write_text("```\n$ python -m analysis.findings --arch h100\n```\n")
    got = [c.argv for c in documented_commands(tmp_path)]
    assert got == [("python", "-m", "pip", "install", "-e", "."),
                   ("python", "-m", "experiments.run", "sawtooth", "--arch", "gb10"),
                   ("python", "-m", "experiments.run", "sawtooth", "--arch", "h100", "--filter",
                    "a b"),
                   ("python", "-m", "analysis.findings", "--arch", "h100")]
    assert [needs_gpu(a) for a in got[1:]] == [False, True, False]
    assert runnable(got[2])[-1] == "--dry-run" and skipped(got[0])


def test_a_named_measured_run_is_stood_in_for_by_the_committed_one():
    run, out = stand_in(("python", "-m", "experiments.run", "sawtooth", "--arch", "h100",
                         "--out", "runs/h100-sawtooth"))
    assert out == "runs/h100-sawtooth" and (run / "README.md").is_file()
    assert run.parent.name == "h100" and run.name.startswith("sawtooth-")
    assert stand_in(("python", "-m", "experiments.run", "sawtooth", "--arch", "gb10",
                     "--out", "runs/x")) is None                       # simulated: runs itself
    assert stand_in(("python", "-m", "experiments.run", "sawtooth", "--arch", "h100")) is None

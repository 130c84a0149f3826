"""Loading stored results for figures: tidy rows from run directories, never from stdout."""
from __future__ import annotations

from pathlib import Path

from spec.records import read_csv

ROOT = Path(__file__).resolve().parents[1]


class Skip(Exception):
    """A figure cannot be drawn from the data at hand; the message says what is missing."""


def load_rows(run_dirs: list[Path]) -> list[dict]:
    rows = []
    for d in run_dirs:
        for name in ("counters.csv", "timing.csv"):
            if (d / name).exists():
                rows.extend(read_csv(d / name))
    return rows


def select(rows: list[dict], **where) -> list[dict]:
    return [r for r in rows if all(r.get(k) == v for k, v in where.items())]


def find_runs(arch: str) -> list[Path]:
    """Run directories for an arch: committed datasets (profiles/<arch>/) and the latest local run
    of each study (runs/<arch>/<study>/)."""
    found = []
    prof = ROOT / "profiles" / arch
    if prof.is_dir():
        found += sorted(p for p in prof.iterdir() if (p / "manifest.json").exists())
    runs = ROOT / "runs" / arch
    if runs.is_dir():
        for study in sorted(runs.iterdir()):
            done = sorted(p for p in study.iterdir()
                          if not p.name.startswith(".") and (p / "manifest.json").exists())
            if done:
                found.append(done[-1])
    return found

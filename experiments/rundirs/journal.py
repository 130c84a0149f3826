"""The finished work of a measured run, kept on disk piece by piece as each piece finishes.

A measured run costs minutes of GPU time, most of it in pieces that do not depend on each other:
the builds, each problem's correctness gate and timing (its cases and their SDPA peers, timed
launch by launch alternating on one GPU), each ncu session. A run that is stopped (Ctrl-C,
SIGTERM from a scheduler, a crash) should lose only the piece it was in. So a measured run works
in a visible ``<name>-incomplete/`` directory (``experiments.rundirs.rundir``) whose
``manifest.json`` says ``"complete": false`` and names the command that finishes it, and every
finished piece is an *entry* of its ``journal/``:

- ``<key>.csv``: the piece's rows (the schema of ``spec.records``), then
- ``<key>.json``: what the piece was (its case ids) and what it found (passed, failed, summary
  lines, seconds).

Each file is written under a temporary name and renamed into place (``os.replace`` is atomic on
POSIX), the JSON last: an entry whose JSON exists is whole, and a piece cut short leaves at most
a temporary file, which is ignored. ncu sessions keep their own record: a session's report is
written under a temporary name and renamed when it is whole (``profiles.collect``).

``--resume`` (``experiments.run``) reads the entries back instead of redoing their work; an
entry whose case ids differ from the piece now asked for is refused (the plan changed). The
journal is removed when the run is published complete: the run's CSVs then hold every row.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import fields
from pathlib import Path

from spec.records import Row, read_csv, write_csv

JOURNAL = "journal"
_ROW_FIELDS = tuple(f.name for f in fields(Row))


class JournalMismatch(ValueError):
    """A journal entry was written for other cases than the piece now asked for."""


def replace_atomically(path: Path, write) -> None:
    """Write ``path`` through ``write(temporary path)`` and rename it into place."""
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_text_atomically(path: Path, text: str) -> None:
    replace_atomically(path, lambda p: p.write_text(text))


def write_rows_atomically(path: Path, rows) -> None:
    replace_atomically(path, lambda p: write_csv(p, rows))


def rows_of(path: Path) -> list[Row]:
    """Rows written by ``write_csv``, as ``Row`` objects again (the values round-trip: floats are
    written with ``repr``)."""
    return [Row(**{k: r[k] for k in _ROW_FIELDS}) for r in read_csv(path)]


class Journal:
    """The entries of one run directory's ``journal/``."""

    def __init__(self, run_dir: Path):
        self.dir = Path(run_dir) / JOURNAL

    def get(self, key: str, case_ids: list[str] | None = None) -> tuple[dict, list[Row]] | None:
        """``(record, rows)`` of a finished entry, None when ``key`` has not finished. With
        ``case_ids``, an entry recorded for other cases is a ``JournalMismatch``."""
        meta = self.dir / f"{key}.json"
        if not meta.exists():
            return None
        record = json.loads(meta.read_text())
        if case_ids is not None and record.get("cases") != list(case_ids):
            raise JournalMismatch(f"{meta}: recorded for cases {record.get('cases')}, but this "
                                  f"run now asks for {list(case_ids)}")
        rows = rows_of(self.dir / f"{key}.csv") if record.get("rows", 0) else []
        return record, rows

    def put(self, key: str, record: dict, rows: list[Row] = ()) -> None:
        """Record a finished piece: its rows, then its record (the commit)."""
        self.dir.mkdir(exist_ok=True)
        rows = list(rows)
        if rows:
            write_rows_atomically(self.dir / f"{key}.csv", rows)
        write_text_atomically(self.dir / f"{key}.json",
                              json.dumps(record | {"rows": len(rows)}, indent=1) + "\n")

    def keys(self) -> list[str]:
        return sorted(p.stem for p in self.dir.glob("*.json")) if self.dir.is_dir() else []

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

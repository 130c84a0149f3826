"""Reading stored runs: manifests and tidy CSVs, with every way a file can be broken turned into a
one-line ``DatasetError`` (absent when the manifest promises it, empty, binary, truncated, a column
missing, a value that does not parse). A path under ``profiles/`` is opened through the registry
(``registry.open_path``: registered and unchanged, or refused); a local run (``runs/...`` or any
directory the user names) is read as it is.
"""
from __future__ import annotations

import csv
import json
import lzma
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from analysis.data import registry
from analysis.data.registry import DatasetError
from spec.records import TruncatedCSV, data_path, read_bytes, read_csv, read_dicts

DATA_FILES = ("counters.csv", "timing.csv", "drift.csv")
"""The tidy files a run directory may hold (``spec.records`` schema)."""

RUN_DIR = "run_dir"
"""Column added by ``load_rows``: the directory a row was read from."""

REQUIRED_COLUMNS = ("study", "variant", "backend", "order", "schedule", "tile_m", "tile_n",
                    "occupancy", "B", "H", "H_kv", "S_q", "S_kv", "D", "causal", "metric", "value",
                    "source", "sample")
"""Columns every reader of the rows relies on (``spec.records.read_csv`` converts them)."""


def resolve(path: Path | str) -> Path:
    """``path`` ready to open: verified through the registry when it lies under ``profiles/``."""
    return registry.open_path(path) if registry.relative(path) is not None else Path(path)


def read_manifest(run_dir: Path) -> dict:
    """The run's ``manifest.json`` (or its compressed copy; {} when there is none); a broken one
    is a ``DatasetError``."""
    p = data_path(resolve(run_dir), "manifest.json")
    if p is None:
        return {}
    try:
        m = json.loads(read_bytes(p))
    except (OSError, EOFError, UnicodeDecodeError, ValueError) as e:
        raise DatasetError(f"{p}: not a readable JSON manifest ({type(e).__name__}); restore it "
                           f"from git or re-run the study") from None
    if not isinstance(m, dict):
        raise DatasetError(f"{p}: not a JSON object; restore it from git or re-run the study")
    return m


def incomplete(manifest: dict) -> bool:
    """Whether a manifest is that of a run stopped before it was complete (its finished work
    is kept for ``--resume``; it is no result)."""
    params = manifest.get("parameters")
    return isinstance(params, dict) and params.get("complete") is False


def expected_files(manifest: dict) -> tuple[str, ...]:
    """The data files a manifest promises: ``counters.csv`` for a simulated or profiled run,
    ``timing.csv`` for a timed one, ``drift.csv`` for a drift run (none for no manifest)."""
    if not manifest:
        return ()
    params = manifest.get("parameters") if isinstance(manifest.get("parameters"), dict) else {}
    if manifest.get("study") == "drift":
        return ("drift.csv",)
    if manifest.get("mode") == "simulate":
        return ("counters.csv",)
    out = []
    if isinstance(params.get("profiling"), dict):
        out.append("counters.csv")
    if isinstance(params.get("reps"), int) and params["reps"] > 0:
        out.append("timing.csv")
    return tuple(out)


def read_table(path: Path) -> list[dict]:
    """The rows of one tidy CSV, or a ``DatasetError`` saying in one line what is wrong with it."""
    path = resolve(path)
    fix = "restore it (git checkout, or re-run the study that wrote it)"
    try:
        raw = read_bytes(path)
    except FileNotFoundError:
        raise DatasetError(f"{path}: missing; {fix}") from None
    except OSError as e:
        raise DatasetError(f"{path}: cannot be read ({e.strerror or e}); {fix}") from None
    except (EOFError, lzma.LZMAError):
        raise DatasetError(f"{path}: truncated or corrupt compressed data; {fix}") from None
    if not raw.strip():
        raise DatasetError(f"{path}: empty file; {fix}")
    if b"\0" in raw:
        raise DatasetError(f"{path}: binary data, not CSV text; {fix}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DatasetError(f"{path}: not UTF-8 text (binary or corrupted); {fix}") from None
    lines = text.splitlines()
    header = next(csv.reader(lines[:1]))
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise DatasetError(f"{path}: column(s) {', '.join(missing)} missing from the header; "
                           f"{fix}")
    for i, fields in enumerate(csv.reader(lines[1:]), 2):
        if len(fields) != len(header):
            raise DatasetError(f"{path}: line {i} has {len(fields)} fields, the header "
                               f"{len(header)} (truncated?); {fix}")
    try:
        rows = read_csv(path)
    except TruncatedCSV as e:
        raise DatasetError(f"{str(e).splitlines()[0]}; {fix}") from None
    except (ValueError, TypeError, KeyError, csv.Error) as e:
        raise DatasetError(f"{path}: a value does not parse ({str(e).splitlines()[0][:80]}); "
                           f"{fix}") from None
    if not rows:
        raise DatasetError(f"{path}: a header but no rows; {fix}")
    return rows


def check_run_dir(run_dir: Path) -> tuple[Path, list[str]]:
    """(directory, data files present) of a run named by its directory or its ``manifest.json``,
    checked before any work reads it. ``DatasetError`` (one line naming the fix): the directory is
    absent or a file, an interrupted run, lacks a file its manifest promises, or holds none of
    ``DATA_FILES``."""
    given = Path(run_dir)
    if given.name == "manifest.json":
        given = given.parent
    d = resolve(given)
    if not d.is_dir():
        what = "a file, not a run directory" if d.exists() else "no such run directory"
        raise DatasetError(f"{d}: {what}; pass a directory written by "
                           f"python -m experiments.run (or one under profiles/<arch>/)")
    manifest = read_manifest(d)
    if incomplete(manifest):
        raise DatasetError(f"{d}: an interrupted run, not complete (\"complete\": false in its "
                           f"manifest); finish it with python -m experiments.run --resume {d}")
    present = [f for f in DATA_FILES if data_path(d, f) is not None]
    for f in expected_files(manifest):
        if f not in present:
            raise DatasetError(f"{d / f}: missing, but the run's manifest.json says it was "
                               f"written; restore it (git checkout, or re-run the study)")
    if not present:
        raise DatasetError(f"{d}: none of {', '.join(DATA_FILES)} is there; pass a run directory "
                           f"written by python -m experiments.run")
    return d, present


def output_problem(out_dir: Path, flag: str = "--out") -> str | None:
    """Why ``out_dir`` cannot be a new output directory, in one line naming the fix (None: it
    can): checked before any work, so that nothing is computed or printed for an output that
    would then be refused. It must be absent or an empty directory, below a directory (not a
    file) that this user may write in."""
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        kind = "a file" if not out_dir.is_dir() else "a directory with files in it"
        return (f"{flag} {out_dir} already exists ({kind}); pass a new directory (outputs are "
                "never overwritten or mixed with older ones)")
    up = out_dir.absolute().parent
    while not up.exists():
        up = up.parent
    if not up.is_dir():
        return f"{flag} {out_dir}: {up} is a file, not a directory; pass a new directory"
    if not os.access(up, os.W_OK | os.X_OK):
        return f"{flag} {out_dir}: no permission to write in {up}; pass another {flag}"
    return None


def read_run(run_dir: Path) -> dict[str, list[dict]]:
    """``{file name: rows}`` of every data file of a run directory. Errors (``DatasetError``): those
    of ``check_run_dir``, or a file is unreadable (``read_table``)."""
    d, present = check_run_dir(run_dir)
    return {f: read_table(data_path(d, f)) for f in present}


def read_file(path: Path | str) -> bytes:
    """The content of one stored file (verified when under ``profiles/``), decompressed when it
    is stored compressed (``spec.records.read_bytes``)."""
    p = resolve(path)
    try:
        return read_bytes(p)
    except OSError as e:
        raise DatasetError(f"{p}: cannot be read ({e.strerror or e}); restore it with git "
                           f"checkout") from None
    except (EOFError, lzma.LZMAError):
        raise DatasetError(f"{p}: truncated or corrupt compressed data; restore it with git "
                           f"checkout") from None


def csv_rows(path: Path | str, typed: bool = True) -> list[dict]:
    """The rows of a stored CSV (a compressed one decompressed), verified when under ``profiles/``:
    typed as the result schema (``spec.records.read_csv``) or as strings (``read_dicts``, any
    CSV)."""
    p = resolve(path)
    return read_csv(p) if typed else read_dicts(p)


def stored(run_dir: Path | str, name: str) -> Path | None:
    """``run_dir/name`` or its compressed copy (``spec.records.data_path``), verified; None if
    neither."""
    return data_path(resolve(run_dir), name)


def load_rows(run_dirs: Sequence) -> list[dict]:
    """The rows of every data file of every run (``Path`` or anything with ``.path``), each tagged
    with its directory (``run_dir``)."""
    rows = []
    for d in run_dirs:
        path = getattr(d, "path", None) or Path(d)
        for table in read_run(path).values():
            for r in table:
                r[RUN_DIR] = str(path)
                rows.append(r)
    return rows


def timing_rows(path: Path | str) -> list[dict]:
    """The timing rows of a run directory (its ``timing.csv``, none if it has no timing), or of
    a timing CSV named directly; ``DatasetError`` in one line when they cannot be read."""
    p = Path(path)
    return read_run(p).get("timing.csv", []) if p.is_dir() else read_table(p)


def run_of(row: dict) -> str:
    """The run a row belongs to: its directory when ``load_rows`` read it, else its ``run``."""
    return row.get(RUN_DIR) or row["run"]


@contextmanager
def new_directory(out_dir: Path) -> Iterator[Path]:
    """A new output directory written atomically: yields a temporary directory beside
    ``out_dir``; when the block ends normally and wrote something it is renamed to ``out_dir``,
    otherwise removed. ``FileExistsError`` (before any work) when ``out_dir`` exists and is not
    an empty directory: outputs are never overwritten or mixed with older ones."""
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise FileExistsError(f"{out_dir} already exists; pass a new output directory (outputs "
                              f"are never overwritten or mixed with older ones)")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.with_name(f".{out_dir.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        if any(tmp.iterdir()):
            os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

"""Which stored run a report section or a figure reads, and reading it (the one dataset selector).

Where runs are. A *committed* run is ``profiles/<arch>/<name>-<stamp>[-r<N>]`` with a
``manifest.json``: the stamp starts with a digit (so ``longseq-profile-20261121`` is the dataset
``longseq-profile``, never a run of ``longseq``) and ``-r<N>`` is the N-th independent repeat of
the run ``<name>-<stamp>`` (repeat 1). A *local* run is ``runs/<arch>/<study>/<run-id>``, written
by ``python -m experiments.run`` (directories starting with ``.`` are unfinished and never read).
``ARTIFACT_DIRS`` are kept as evidence and never returned as datasets.

What a run is. Its ``manifest.json`` says the study, the mode (``measure`` or ``simulate``, hence
the ``source`` measured/simulated of its rows) and the parameters that change what was run: the
simulated cache capacity (``capacity_bytes``), a sequence-length override (``seq_override``) and
a case filter (``filter``). A run has *default parameters* when it has no override and no filter
and simulated the arch's nominal L2 (or was measured).

The rule (``select``): among the runs of the arch whose study, source (when asked) and parameters
match (default parameters unless others are asked for), take

1. a committed run before a local one (the committed datasets are what REPORT.md cites);
2. a measured run before a simulated one;
3. the latest stamp (local runs: the latest run id);
4. repeat 1 (the base run) before its repeats ``-r2``, ``-r3``, ... (``repeats_of`` gives them all).

So ``python -m experiments.run sawtooth --arch gb10 --capacity-mib 20`` writes a run that no
default selection picks (its capacity is not the nominal 24 MiB): a figure of it is drawn only
when that run is named (``python -m paper_figures --run runs/gb10/sawtooth/<id>``), and its
titles say which run they drew. ``analysis.findings`` and ``paper_figures`` both select here.

The reader (``read_run``, ``load_rows``) turns every way a stored CSV can be broken (absent when
the manifest promises it, empty, binary, truncated, a column missing, a value that does not
parse) into a ``DatasetError`` whose message is one line naming the file, the problem and the fix.
"""
from __future__ import annotations

import csv
import gzip
import json
import os
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from spec.records import data_path, read_csv

ROOT = Path(__file__).resolve().parents[1]

DATA_FILES = ("counters.csv", "timing.csv", "drift.csv")
"""The tidy files a run directory may hold (``spec.records`` schema)."""

RUN_DIR = "run_dir"
"""Column added by ``load_rows``: the directory a row was read from (the schema's ``run`` column
cannot tell runs apart in datasets written before it held the final run name)."""

REQUIRED_COLUMNS = ("study", "variant", "backend", "order", "schedule", "tile_m", "tile_n",
                    "occupancy", "B", "H", "H_kv", "S_q", "S_kv", "D", "causal", "metric", "value",
                    "source", "sample")
"""Columns every reader of the rows relies on (``spec.records.read_csv`` converts them)."""

ARTIFACT_DIRS = {
    "longseq-forloop-spill-20261121":
        "code-generation artifact (the linear for-loop builds spilled; its README.md): read only by "
        "findings section 9b through its explicit path, never as a dataset",
}

_COMMITTED = re.compile(r"(?P<name>.+?)-(?P<stamp>\d[0-9A-Za-z]*)(?:-r(?P<rep>\d+))?")

ANY = object()
"""A parameter value in ``select(params=...)`` that matches whatever the run used."""

PARAMETERS = ("capacity_bytes", "seq_override", "filter")


class DatasetError(ValueError):
    """A stored run cannot be read or found; the message is one line naming the file and the fix."""


@dataclass(frozen=True)
class Dataset:
    """One stored run directory and what its manifest says about it."""

    path: Path
    arch: str
    name: str                   # committed: the directory name before the stamp; local: the study
    study: str                  # the manifest's study
    stamp: str                  # committed: the stamp; local: the run id
    repeat: int                 # 1 for a base run, N for ``-r<N>``
    committed: bool
    source: str                 # measured | simulated
    capacity_bytes: int | None
    seq_override: tuple[int, ...] | None   # the --seq lengths (a run before 2026-11-25: one)
    filter: str | None

    @property
    def label(self) -> str:
        """The run as titles and file names name it: ``sawtooth-20261121-r2`` (committed) or
        ``runs/gb10/sawtooth/20261123-101500-simulate`` (local)."""
        if self.committed:
            return self.path.name
        try:
            return str(self.path.resolve().relative_to(ROOT))
        except ValueError:
            return str(self.path)

    def parameters(self) -> dict:
        return {k: getattr(self, k) for k in PARAMETERS}

    def is_default(self, l2_bytes: int | None) -> bool:
        """No override, no filter, and (simulated runs) the nominal L2 capacity."""
        return (self.seq_override is None and self.filter is None
                and self.capacity_bytes in (None, l2_bytes))


# --------------------------------------------------------------------------------------------
# manifests and discovery
# --------------------------------------------------------------------------------------------
def read_manifest(run_dir: Path) -> dict:
    """The run's ``manifest.json`` ({} when there is none); a broken one is a ``DatasetError``."""
    p = Path(run_dir) / "manifest.json"
    if not p.exists():
        return {}
    try:
        m = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise DatasetError(f"{p}: not a readable JSON manifest ({type(e).__name__}); restore it "
                           f"from git or re-run the study") from None
    if not isinstance(m, dict):
        raise DatasetError(f"{p}: not a JSON object; restore it from git or re-run the study")
    return m


def _source(m: dict) -> str:
    params = m.get("parameters") or {}
    src = params.get("source") if isinstance(params, dict) else None
    if src in ("measured", "simulated"):
        return src
    return "simulated" if m.get("mode") == "simulate" else "measured"


def _int_or_none(v) -> int | None:
    return None if v is None else int(v)


def _lengths_or_none(v) -> tuple[int, ...] | None:
    return None if v is None else tuple(int(x) for x in (v if isinstance(v, list) else [v]))


def dataset(run_dir: Path, arch: str | None = None) -> Dataset:
    """A ``Dataset`` for a run directory (committed when its name has the committed form and it
    sits in ``profiles/<arch>/``); the arch and study come from the manifest where it has them."""
    d = Path(run_dir)
    m = read_manifest(d)
    params = m.get("parameters") if isinstance(m.get("parameters"), dict) else {}
    a = m.get("arch")
    a = a.get("name") if isinstance(a, dict) else a
    hit = _COMMITTED.fullmatch(d.name)
    committed = hit is not None and d.parent.parent.name == "profiles"
    name = hit["name"] if committed else (d.parent.name if d.parent.name else d.name)
    return Dataset(path=d, arch=str(a or arch or d.parent.name), name=name,
                   study=str(m.get("study") or name), stamp=hit["stamp"] if committed else d.name,
                   repeat=int(hit["rep"] or 1) if committed else 1, committed=committed,
                   source=_source(m), capacity_bytes=_int_or_none(params.get("capacity_bytes")),
                   seq_override=_lengths_or_none(params.get("seq_override")),
                   filter=params.get("filter") or None)


def discover(arch: str, root: Path = ROOT) -> list[Dataset]:
    """Every finished run of ``arch``: committed (``profiles/<arch>/``) then local
    (``runs/<arch>/<study>/``), each in name order."""
    found = []
    prof = root / "profiles" / arch
    if prof.is_dir():
        for p in sorted(prof.iterdir()):
            if p.is_dir() and p.name not in ARTIFACT_DIRS and _COMMITTED.fullmatch(p.name) \
                    and (p / "manifest.json").exists():
                found.append(dataset(p, arch))
    local = root / "runs" / arch
    if local.is_dir():
        for study in sorted(s for s in local.iterdir() if s.is_dir()):
            for p in sorted(study.iterdir()):
                if p.is_dir() and not p.name.startswith(".") and (p / "manifest.json").exists():
                    found.append(dataset(p, arch))
    return found


def _rank(ds: Dataset) -> tuple:
    """Sort key of the selection rule: committed, measured, latest stamp, base run first."""
    return (not ds.committed, ds.source != "measured", _Desc(ds.stamp), ds.repeat)


class _Desc(str):
    """A string that sorts in reverse (latest stamp first)."""

    def __lt__(self, other):
        return str.__gt__(self, other)

    def __gt__(self, other):
        return str.__lt__(self, other)


def _l2_bytes(arch: str) -> int | None:
    from spec import UnknownArch, get_arch
    try:
        return get_arch(arch).l2_bytes
    except UnknownArch:
        return None


def candidates(arch: str, study: str, *, name: str | None = None, source: str | None = None,
               params: Mapping[str, object] | None = None, root: Path = ROOT) -> list[Dataset]:
    """The runs ``select`` chooses among, best first. ``params`` names the parameters to match
    (``ANY`` matches all values); those not named must be at their default."""
    want = dict(params or {})
    l2 = _l2_bytes(arch)
    out = []
    for ds in discover(arch, root):
        if ds.study != study or (name is not None and ds.name != name) \
                or (source is not None and ds.source != source):
            continue
        ok = True
        for k in PARAMETERS:
            v = getattr(ds, k)
            if k in want:
                ok &= want[k] is ANY or v == want[k]
            elif k == "capacity_bytes":
                ok &= v in (None, l2)
            else:
                ok &= v is None
        if ok:
            out.append(ds)
    return sorted(out, key=_rank)


def select(arch: str, study: str, **kw) -> Dataset | None:
    """The run a section or figure of ``study`` reads (the module docstring's rule); None when
    there is none. Keywords as ``candidates``."""
    c = candidates(arch, study, **kw)
    return c[0] if c else None


def repeats_of(ds: Dataset, root: Path = ROOT) -> list[Dataset]:
    """A committed run and its repeats ``-r2``, ``-r3``, ... in repeat order (a local run: itself)."""
    if not ds.committed:
        return [ds]
    same = [d for d in discover(ds.arch, root)
            if d.committed and d.name == ds.name and d.stamp == ds.stamp]
    return sorted(same, key=lambda d: d.repeat)


def repeated_runs(arch: str, study: str, source: str | None = "measured",
                  root: Path = ROOT) -> list[Dataset]:
    """The best run of ``study`` (the selection rule's order) that has repeats (``-r2``, ...),
    with them; [] when no run of the study has repeats. What the across-runs section and figure
    read, also when the selected run is a newer single one."""
    for ds in candidates(arch, study, source=source, root=root):
        runs = repeats_of(ds, root)
        if len(runs) >= 2:
            return runs
    return []


def default_runs(arch: str, source: str | None = None, root: Path = ROOT) -> list[Dataset]:
    """What ``python -m paper_figures --arch <arch>`` draws: per study the selected run with
    default parameters (and its repeats) first, then, when it has none, the best run that has
    repeats (for the figures about repeats); studies in name order."""
    out: list[Dataset] = []
    for study in sorted({d.study for d in discover(arch, root)}):
        ds = select(arch, study, source=source, root=root)
        if ds is not None:
            out += repeats_of(ds, root)
            out += [d for d in repeated_runs(arch, study, source, root) if d not in out]
    return out


# --------------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------------
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
    path = Path(path)
    fix = "restore it (git checkout, or re-run the study that wrote it)"
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
    except FileNotFoundError:
        raise DatasetError(f"{path}: missing; {fix}") from None
    except OSError as e:
        raise DatasetError(f"{path}: cannot be read ({e.strerror or e}); {fix}") from None
    except EOFError:
        raise DatasetError(f"{path}: truncated gzip data; {fix}") from None
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
    except (ValueError, TypeError, KeyError, csv.Error) as e:
        raise DatasetError(f"{path}: a value does not parse ({str(e).splitlines()[0][:80]}); "
                           f"{fix}") from None
    if not rows:
        raise DatasetError(f"{path}: a header but no rows; {fix}")
    return rows


def read_run(run_dir: Path) -> dict[str, list[dict]]:
    """``{file name: rows}`` of every data file of a run directory. Errors (``DatasetError``): the
    directory is absent, holds none of ``DATA_FILES``, lacks a file its manifest promises, or a
    file is unreadable (``read_table``)."""
    d = Path(run_dir)
    if not d.is_dir():
        raise DatasetError(f"{d}: no such run directory; pass a directory written by "
                           f"python -m experiments.run (or one under profiles/<arch>/)")
    want = expected_files(read_manifest(d))
    present = {f: p for f in DATA_FILES if (p := data_path(d, f)) is not None}
    for f in want:
        if f not in present:
            raise DatasetError(f"{d / f}: missing, but the run's manifest.json says it was "
                               f"written; restore it (git checkout, or re-run the study)")
    if not present:
        raise DatasetError(f"{d}: none of {', '.join(DATA_FILES)} is there; pass a run directory "
                           f"written by python -m experiments.run")
    return {f: read_table(p) for f, p in present.items()}


def load_rows(run_dirs: Sequence[Path | Dataset]) -> list[dict]:
    """The rows of every data file of every run, each tagged with its directory (``run_dir``)."""
    rows = []
    for d in run_dirs:
        path = d.path if isinstance(d, Dataset) else Path(d)
        for table in read_run(path).values():
            for r in table:
                r[RUN_DIR] = str(path)
                rows.append(r)
    return rows


def run_of(row: dict) -> str:
    """The run a row belongs to: its directory when ``load_rows`` read it, else its ``run``."""
    return row.get(RUN_DIR) or row["run"]


# --------------------------------------------------------------------------------------------
# output directories
# --------------------------------------------------------------------------------------------
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

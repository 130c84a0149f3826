"""The one door to the committed data: every run under ``profiles/`` that code may read is named in
``profiles/registry.json.xz`` with its role and the SHA-256 of its content, and this module is the
only code that lists or opens files there (the registry is machine-read, so it is stored compressed
like every machine file under ``profiles/``, one JSON entry per line inside; ``profiles/README.md``
is its readable catalogue).

Why a registry. A figure, a findings section or a simulator parameter file is a function of the
runs it reads. When the runs are found by globbing (``the newest smmap-*``), committing one more run
silently changes every result drawn from the old one. Here a run is visible to the code only once it
is registered, and what was registered is pinned: ``entry(path)`` re-hashes the run's files and
refuses, in one line naming the run and the command that restores or regenerates it, a run that is
missing or whose content changed since it was registered.

An *entry* is a top-level directory (or file) under ``profiles/<arch>/`` or ``profiles/cpu/``; its
hash covers every file below it, so a run nested in a container (``h100/onepass-20261125/
divergence-20261125``) is pinned by its container's entry. Roles:

``dataset``     a study run of the registry (``experiments.run``) that figures and findings select
                among (``analysis.data.select``);
``measured``    a container of measured study runs read by calibration and validation (holdouts);
``instrument``  a hardware measurement the simulator reads (the SM → L2-partition map, latencies,
                CTA lags); ``default: true`` marks the one of its kind the params files pin;
``tuning``      measurements that set a kernel configuration: the configuration rule's
                candidate sweeps (``experiments.tuning.sweep``), read by ``python -m
                experiments.tuning.rulefit``;
``validation``  a committed simulator validation (``python -m analysis.calibration validate``);
``reference``   published values the models are judged against, never fitted to
                (``analysis.data.published``);
``evidence``    kept for REPORT.md and docs/ (logs, probes, benchmarks, predictions); read by no
                figure or model.

``python -m analysis.data check`` verifies every entry; ``python -m analysis.data register PATH
--role ROLE`` adds (or, after a deliberate change, re-pins) one.

Retired runs. The tracked tree has a fixed size bar (it travels to the GPU machine), so a run no
code reads can leave the working tree without leaving the record: ``python -m analysis.data
retire PATH`` deletes its files and writes ``retired: <commit>`` into its entry, a commit whose
tree holds the run with exactly the pinned content (checked from git's objects before anything
is deleted); ``python -m analysis.data restore PATH`` (or ``--all``) writes the files back from
that commit and checks them against the same pin. A retired entry keeps its path, role and hash,
so a document citing it still names a registered run; ``find`` leaves it out (no selection or
listing sees it) and opening it is the one-line error naming the restore command. Which runs
may be retired, and why only those, is ``analysis.data.history``'s docstring.
"""
from __future__ import annotations

import hashlib
import json
import lzma
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from spec.install import CHECKOUT_HINT, checkout
from spec.records import data_path

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = "registry.json.xz"
ROLES = ("dataset", "measured", "instrument", "tuning", "validation", "reference", "evidence")
SCHEMA = 1

_root = [ROOT]


class DatasetError(ValueError):
    """A stored run cannot be found, trusted or read; the message is one line naming the input and
    the command that fixes it."""


def root() -> Path:
    """The repository root whose ``profiles/`` the door reads (tests point it at a copy)."""
    return _root[-1]


def profiles_dir() -> Path:
    return root() / "profiles"


@contextmanager
def use_root(path: Path) -> Iterator[None]:
    """Read the registry and runs of another checkout (a test's copy) inside the block."""
    _root.append(Path(path))
    _cache.clear()
    try:
        yield
    finally:
        _root.pop()
        _cache.clear()


@dataclass(frozen=True)
class Entry:
    """One registered input: ``path`` relative to ``profiles/``."""

    path: str
    role: str
    arch: str
    sha256: str
    study: str | None = None
    source: str | None = None            # measured | simulated (study runs)
    parameters: dict = field(default_factory=dict, compare=False, hash=False)
    default: bool = False
    command: str | None = None           # how it was made (the manifest's command, if any)
    retired: str | None = None           # the commit that holds its files (``history``)

    @property
    def abspath(self) -> Path:
        return profiles_dir() / self.path

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def pin(self) -> dict:
        """``{"path": "profiles/...", "sha256": ...}``: how a derived file names this input."""
        return {"path": f"profiles/{self.path}", "sha256": self.sha256}

    def restore_command(self) -> str:
        """The command that writes this entry back when it is retired (``history``)."""
        return f"python -m analysis.data restore profiles/{self.path}"

    def remedy(self) -> str:
        how = f"re-run `{self.command}`, commit it and " if self.command else ""
        return (f"restore it with `git checkout -- profiles/{self.path}`, or {how}re-pin it with "
                f"`python -m analysis.data register profiles/{self.path} --role {self.role}`")


def tree_hash(files: Iterable[tuple[str, bytes]]) -> str:
    """The content hash of an entry from its files as (relative POSIX path, SHA-256 digest of the
    content) pairs, in any order: SHA-256 over the paths in path order (component by component,
    as ``Path`` sorts) and their digests. One definition for a run in the working tree
    (``content_hash``) and its copy in a git commit (``analysis.data.history``)."""
    h = hashlib.sha256()
    for rel, digest in sorted(files, key=lambda f: f[0].split("/")):
        h.update(rel.encode() + b"\0")
        h.update(digest)
    return h.hexdigest()


def content_hash(path: Path) -> str:
    """SHA-256 over the sorted relative paths and contents of every file below ``path`` (or of the
    file itself, named by its file name); ``__pycache__`` excluded (``tree_hash``)."""
    path = Path(path)
    files = [path] if path.is_file() else [
        p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return tree_hash((p.name if p == path else p.relative_to(path).as_posix(),
                      hashlib.sha256(p.read_bytes()).digest()) for p in files)


_cache: dict[str, object] = {}


def entries() -> dict[str, Entry]:
    """Every registered entry by path (relative to ``profiles/``), in registry order."""
    if "entries" not in _cache:
        p = profiles_dir() / REGISTRY
        try:
            doc = json.loads(lzma.decompress(p.read_bytes()))
        except FileNotFoundError:
            raise DatasetError(f"{p}: missing; restore it with `git checkout -- "
                               f"profiles/{REGISTRY}`") from None
        except (OSError, ValueError, lzma.LZMAError) as e:
            raise DatasetError(f"{p}: not readable JSON ({type(e).__name__}); restore it with "
                               f"`git checkout -- profiles/{REGISTRY}`") from None
        if doc.get("schema") != SCHEMA:
            raise DatasetError(f"{p}: schema {doc.get('schema')!r}, this code reads {SCHEMA}")
        _cache["entries"] = {e["path"]: Entry(**e) for e in doc["entries"]}
    return _cache["entries"]  # type: ignore[return-value]


def verify(e: Entry) -> Entry:
    """``e`` once its content still hashes to the registered value (checked once per process)."""
    key = f"ok:{e.path}"
    if key in _cache:
        return e
    if e.retired:
        raise DatasetError(f"profiles/{e.path}: retired into git history (commit "
                           f"{e.retired[:12]}); restore it with `{e.restore_command()}`")
    if not e.abspath.exists():
        if checkout() is None:
            raise DatasetError(f"profiles/{e.path}: not in the installed package; {CHECKOUT_HINT}")
        raise DatasetError(f"profiles/{e.path}: registered but missing; {e.remedy()}")
    got = content_hash(e.abspath)
    if got != e.sha256:
        raise DatasetError(f"profiles/{e.path}: content changed since it was registered (sha256 "
                           f"{got[:12]} != {e.sha256[:12]}); {e.remedy()}")
    _cache[key] = True
    return e


def relative(path: Path | str) -> str | None:
    """``path`` relative to ``profiles/``, or None when it lies outside. Accepted: an absolute path,
    a path starting with ``profiles/`` (from the repository root), a path relative to the working
    directory, or an entry-relative path such as ``h100/sawtooth-20261123``."""
    p = Path(path)
    if not p.is_absolute():
        if p.parts[:1] == ("profiles",):
            p = root() / p
        elif not p.exists() and (profiles_dir() / p.parts[0]).is_dir():
            p = profiles_dir() / p
    try:
        return p.resolve().relative_to(profiles_dir().resolve()).as_posix()
    except ValueError:
        return None


def entry(path: Path | str) -> Entry:
    """The verified entry that holds ``path`` (a path under ``profiles/``, absolute, relative to the
    repository root, or relative to ``profiles/``)."""
    rel = relative(path)
    if rel is None:
        raise DatasetError(f"{path}: not under profiles/; the registry holds only committed runs")
    parts = rel.split("/")
    for n in range(len(parts), 0, -1):
        e = entries().get("/".join(parts[:n]))
        if e is not None:
            return verify(e)
    top = "/".join(parts[:2])
    raise DatasetError(f"profiles/{rel}: not registered (the code reads only registered runs); "
                       f"register it with `python -m analysis.data register profiles/{top} "
                       f"--role <{'|'.join(ROLES)}>`")


def open_path(path: Path | str) -> Path:
    """The absolute path of a file or directory inside a verified entry (the way in for readers).
    A file is found as it is stored: ``timing.csv`` (or a ``timing.csv.gz`` cited before the run
    was compacted) opens ``timing.csv.xz`` when that is the copy there (``spec.records.data_path``);
    decompress it with ``spec.records.open_text``."""
    rel = relative(path)
    entry(path)
    p = profiles_dir() / rel
    if not p.exists():
        p = data_path(p.parent, p.name) if "/" in rel else None
        if p is None:
            raise DatasetError(f"profiles/{rel}: no such file in its registered run")
    return p


def find(*, role: str | None = None, arch: str | None = None, study: str | None = None,
         default: bool | None = None, prefix: str | None = None,
         retired: bool | None = False) -> list[Entry]:
    """Registered entries matching every given field (``prefix``: path starts with it), in
    registry order; none is verified until it is opened. Retired entries are left out unless
    ``retired`` is True (only them) or None (all): what is not in the working tree is nothing the
    code can read, so no selection or listing of runs may see it."""
    return [e for e in entries().values()
            if (role is None or e.role == role) and (arch is None or e.arch == arch)
            and (study is None or e.study == study)
            and (default is None or e.default == default)
            and (prefix is None or e.path.startswith(prefix))
            and (retired is None or bool(e.retired) == retired)]


def instrument(kind: str, arch: str) -> Entry:
    """The default instrument run of ``kind`` (its study, e.g. ``smmap``) for ``arch``, verified."""
    hits = find(role="instrument", arch=arch, study=kind, default=True)
    if len(hits) != 1:
        raise DatasetError(f"{len(hits)} default {kind} runs registered for {arch} in profiles/"
                           f"{REGISTRY}; mark exactly one `\"default\": true`")
    return verify(hits[0])


def subdirs(path: Path | str) -> list[Path]:
    """The directories directly inside a registered directory, in name order (listing stays
    here)."""
    p = open_path(path)
    return sorted(d for d in p.iterdir() if d.is_dir() and d.name != "__pycache__")


def children(path: Path | str) -> list[Path]:
    """The run directories in ``path``: for ``profiles/<arch>`` its registered top-level entries,
    for a directory inside a registered entry its subdirectories (``subdirs``), for a directory
    outside ``profiles/`` (a local run tree) its subdirectories as they are; name order."""
    rel = relative(path)
    if rel is None:
        return sorted(d for d in Path(path).iterdir() if d.is_dir())
    if "/" not in rel:
        return sorted(verify(e).abspath for e in find(prefix=f"{rel}/") if e.abspath.is_dir())
    return subdirs(rel)


def files(path: Path | str, pattern: str = "*") -> list[Path]:
    """The files directly inside a registered directory matching ``pattern``, in name order."""
    p = open_path(path)
    return sorted(f for f in p.glob(pattern) if f.is_file())


def find_files(arch: str, pattern: str) -> list[Path]:
    """Every file matching ``pattern`` anywhere inside the registered entries of ``arch`` (each
    entry verified first), in path order."""
    out = []
    for e in find(arch=arch):
        hits = [p for p in e.abspath.rglob(pattern) if p.is_file()] if e.abspath.is_dir() else []
        if hits:
            verify(e)
            out += hits
    return sorted(out)


def _stored(e: dict) -> dict:
    """An entry as stored: the fields at their defaults (``Entry``) and parameters that are None
    left out (``Entry(**stored)`` reads it back the same)."""
    out = {k: v for k, v in e.items() if k in _REQUIRED or v != _DEFAULTS.get(k)}
    if isinstance(out.get("parameters"), dict):
        out["parameters"] = {k: v for k, v in out["parameters"].items() if v is not None}
        if not out["parameters"]:
            del out["parameters"]
    return out


_REQUIRED = ("path", "role", "arch", "sha256")
_DEFAULTS = {"study": None, "source": None, "parameters": {}, "default": False, "command": None,
             "retired": None}


def write(doc_entries: list[dict]) -> Path:
    """Write the registry (sorted by path) atomically, each entry without its default fields."""
    p = profiles_dir() / REGISTRY
    body = {"schema": SCHEMA,
            "about": "Every committed input the code may read, with its role and content hash "
                     "(analysis/data/registry.py). Re-pin one with `python -m analysis.data "
                     "register profiles/<path> --role <role>`; verify all with `python -m "
                     "analysis.data check`.",
            "entries": sorted((_stored(e) for e in doc_entries), key=lambda e: e["path"])}
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    lines = ",\n".join("  " + json.dumps(e, sort_keys=False) for e in body.pop("entries"))
    head = json.dumps(body, indent=1)[:-2]
    text = f"{head},\n \"entries\": [\n{lines}\n ]\n}}\n"
    tmp.write_bytes(lzma.compress(text.encode(), preset=9 | lzma.PRESET_EXTREME))
    os.replace(tmp, p)
    _cache.clear()
    return p

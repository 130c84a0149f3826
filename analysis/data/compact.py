"""Committed runs stored small: ``python -m analysis.data compact`` stores the machine-read files of
every registered run directory (tables, manifests, plans, logs) as ``.xz``, re-pins the runs it
changed and rewrites the documents that cite the old names.

Why ``.xz``. A tidy CSV repeats the same variant, problem and kernel-name fields on every row, a
few hundred bytes apart and again tens of kilobytes later; DEFLATE (``.gz``) sees 32 KiB back,
LZMA a whole file, so the same rows take about 28% less room (the committed tables: 1.92 MB as
gzip -9, 1.38 MB as xz; a small manifest comes out about as large either way). Python reads it
with the standard library (``spec.records.open_text``), and every reader finds a file by its
plain name (``spec.records.data_path``, ``analysis.data.registry.open_path``), so compacting a
run changes no result.

What is left as it is:

- a run's ``README.md`` and every other ``.md``, images and anything not text (what a user opens);
- a plain file that compression would shrink by less than ``MIN_SAVING`` bytes (a short summary
  stays readable in place), and a ``.gz`` file that ``.xz`` would not shrink at all;
- a run that a derived file pins by its content hash (a params file's ``inputs``, a kernel
  configuration, a prediction's manifest), unless ``--pinned`` is given: then the derived files'
  pins are rewritten to the new hash, and so on down the chain (a params file pinned by another
  by its bytes, a manifest inside a run that is re-pinned in turn; ``repin_derived``). The
  content a pin names is unchanged, only how it is stored;
- an entry that is a single file (renaming it would rename the registry entry).

Each file is written beside the old one, decompressed and compared byte for byte before it
replaces it; a run is re-pinned in the registry (its ``sha256`` only) once all its files are done.
"""
from __future__ import annotations

import gzip
import hashlib
import lzma
import os
import re
from dataclasses import dataclass
from pathlib import Path

from analysis.data import registry
from spec.records import COMPRESSED, plain_name, read_bytes

SUFFIXES = (".csv", ".json", ".log", ".txt")
"""Machine-read text a run directory holds; stored ``.xz`` when that saves ``MIN_SAVING``."""

MIN_SAVING = 256
"""Bytes a file must shrink by to be stored compressed."""

PRESET = 9 | lzma.PRESET_EXTREME

DOC_SUFFIXES = (".md", ".py", ".json", ".toml", ".cff")
"""Files whose citations of a renamed file are rewritten (outside ``profiles/``, and the run
READMEs inside it)."""

SKIP_DIRS = {".git", "runs", "build", "dist", ".venv", ".ci-venv", "node_modules", "__pycache__",
             "out"}

_HASH = re.compile(r"\b[0-9a-f]{64}\b")


@dataclass(frozen=True)
class Rename:
    """One file stored anew: ``old`` and ``new`` relative to ``profiles/``."""

    old: str
    new: str
    before: int
    after: int


def text_files(root: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """Every file under ``root`` whose name ends with one of ``suffixes``, in path order, outside
    ``SKIP_DIRS`` and hidden directories (the repository's own files, not its outputs)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        out += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(suffixes)]
    return out


def pinned_hashes() -> set[str]:
    """The content hashes that files other than the registry record: every SHA-256 written in a
    JSON file of the repository (params files, kernel configurations, run manifests, stored
    compressed or not)."""
    found: set[str] = set()
    for p in text_files(registry.root(), (".json", ".json.gz", ".json.xz")):
        if p.name == registry.REGISTRY and p.parent == registry.profiles_dir():
            continue
        try:
            found.update(_HASH.findall(read_bytes(p).decode("utf-8", "replace")))
        except (OSError, EOFError, lzma.LZMAError):
            continue
    return found


def _stored_form(p: Path) -> tuple[bytes, str, int] | None:
    """(content, new name, least saving) when ``p`` is a machine file to store as ``.xz``: a
    ``.gz`` one whenever that is smaller (it is no less readable), a plain one when that saves
    ``MIN_SAVING``; else None."""
    name = p.name
    if name.endswith(".xz") or name.lower() == "readme.md":
        return None
    if name.endswith(".gz"):
        return gzip.decompress(p.read_bytes()), f"{plain_name(name)}.xz", 1
    if name.endswith(SUFFIXES):
        return p.read_bytes(), f"{name}.xz", MIN_SAVING
    return None


def compact_dir(d: Path, dry_run: bool = False, done: list[Rename] | None = None
                ) -> list[Rename]:
    """Store every machine file under ``d`` as ``.xz`` where that saves enough (``_stored_form``);
    each one done is appended to ``done`` as it is done (the list is returned)."""
    done = [] if done is None else done
    for p in sorted(f for f in d.rglob("*") if f.is_file() and "__pycache__" not in f.parts):
        form = _stored_form(p)
        if form is None:
            continue
        raw, new_name, least = form
        packed = lzma.compress(raw, preset=PRESET)
        size = p.stat().st_size
        if size - len(packed) < least:
            continue
        target = p.with_name(new_name)
        if target.exists():
            raise registry.DatasetError(f"{target}: already there beside {p.name}; keep one of "
                                        f"the two and run the command again")
        if not dry_run:
            tmp = p.with_name(f".{new_name}.tmp-{os.getpid()}")
            tmp.write_bytes(packed)
            if lzma.decompress(tmp.read_bytes()) != raw:
                tmp.unlink()
                raise registry.DatasetError(f"{p}: the .xz copy does not decompress to the "
                                            f"file; nothing was replaced")
            os.replace(tmp, target)
            p.unlink()
        prof = registry.profiles_dir()
        done.append(Rename(p.relative_to(prof).as_posix(), target.relative_to(prof).as_posix(),
                           size, len(packed)))
    return done


def _pattern(old: str, prefix: str) -> re.Pattern:
    """``prefix + old`` as a whole token: not part of a longer name, not followed by another
    suffix and, for a bare name, not what a command line names as its output (``--out x``,
    ``--log x``, ``> x``, ``tee x``: the command writes the plain file)."""
    command = r"(?<!> )(?<!tee )(?<!--\w\w\w )(?<!--\w\w\w\w )(?<!--\w\w\w\w\w )" if not prefix \
        else ""
    return re.compile(rf"(?<![\w./-]){command}({prefix}){re.escape(old)}(?![\w-]|\.\w)")


def rewrite_citations(renames: list[Rename]) -> list[Path]:
    """Point the documents at the new names: a path ``[profiles/][<arch>/]<run>/<file>`` anywhere
    in the repository's documents and sources, and a bare ``<file>`` in the README of the
    directory that holds it; ``<file>`` is the old name or, for a file that was stored ``.gz``,
    also its plain name (``timing.csv`` for ``timing.csv.gz``). Returns the files changed."""
    if not renames:
        return []
    root, prof = registry.root(), registry.profiles_dir()
    subs: list[tuple[re.Pattern, str]] = []
    local: dict[Path, list[tuple[re.Pattern, str]]] = {}
    for r in renames:
        arch, run, _ = r.old.split("/", 2)
        olds = dict.fromkeys((r.old, plain_name(r.old)))
        for old in olds:
            if old != r.old and (prof / old).exists():
                continue
            rest, new_rest = old.split("/", 2)[2], r.new.split("/", 2)[2]
            prefix = rf"(?:profiles/)?(?:{re.escape(arch)}/)?{re.escape(run)}/"
            subs.append((_pattern(rest, prefix), rf"\g<1>{new_rest}"))
            old_dir = old.rsplit("/", 1)[0]
            for d in [prof / old_dir, *(prof / old_dir).parents]:
                if d == prof / arch:
                    break
                rel = (prof / old).relative_to(d).as_posix()
                new_rel = (prof / r.new).relative_to(d).as_posix()
                local.setdefault(d / "README.md", []).append((_pattern(rel, ""),
                                                              rf"\g<1>{new_rel}"))
    docs = [p for p in text_files(root, DOC_SUFFIXES)
            if not p.is_relative_to(prof) or p.name == "README.md" or p.suffix == ".py"]
    changed = []
    for p in docs:
        try:
            text = p.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        new = text
        for pat, rep in subs + local.get(p, []):
            new = pat.sub(rep, new)
        if new != text:
            p.write_text(new)
            changed.append(p)
    return changed


def _json_files() -> list[Path]:
    reg = registry.profiles_dir() / registry.REGISTRY
    return [p for p in text_files(registry.root(), (".json", ".json.gz", ".json.xz")) if p != reg]


def _store(p: Path, raw: bytes) -> None:
    """Write ``raw`` to ``p`` in ``p``'s storage form (plain, ``.gz`` or ``.xz``), atomically."""
    if p.suffix == ".xz":
        raw = lzma.compress(raw, preset=PRESET)
    elif p.suffix == ".gz":
        raw = gzip.compress(raw, 9, mtime=0)
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    tmp.write_bytes(raw)
    os.replace(tmp, p)


def _rehash(docs: dict[str, dict], touched: list[Path]) -> dict[str, str]:
    """Re-pin every registry entry (``docs``, updated in place) that holds a file of ``touched``;
    returns {old content hash: new} of those whose hash changed."""
    prof = registry.profiles_dir()
    subst: dict[str, str] = {}
    for rel, d in docs.items():
        where = prof / rel
        if any(p == where or p.is_relative_to(where) for p in touched):
            new = registry.content_hash(where)
            if new != d["sha256"]:
                subst[d["sha256"]] = new
                d["sha256"] = new
    return subst


def repin_derived(subst: dict[str, str], docs: dict[str, dict]) -> list[Path]:
    """Replace every old hash of ``subst`` by its new one in the repository's JSON files (params
    files, kernel configurations, manifests), then follow the chain: a file rewritten has a new
    byte hash, a registered run holding it a new content hash (``docs``, the registry entries by
    path, is updated), and whatever pins those is rewritten next. Returns the files changed."""
    changed: list[Path] = []
    pending = dict(subst)
    while pending:
        nxt: dict[str, str] = {}
        touched = []
        for p in _json_files():
            raw = read_bytes(p)
            text = raw.decode("utf-8", "replace")
            if not any(h in text for h in pending):
                continue
            for old, new in pending.items():
                text = text.replace(old, new)
            before = hashlib.sha256(p.read_bytes()).hexdigest()
            _store(p, text.encode())
            nxt[before] = hashlib.sha256(p.read_bytes()).hexdigest()
            touched.append(p)
        nxt |= _rehash(docs, touched)
        changed += touched
        pending = nxt
    return changed


def compact(paths: list[str] | None = None, dry_run: bool = False,
            pinned: bool = False) -> tuple[list[Rename], list[str]]:
    """Compact the registered run directories named (all when none), re-pin the changed ones and
    rewrite the citations (with ``pinned``, also the runs derived files pin, and those pins).
    Returns the renames and one line per entry left as it is."""
    ents = registry.entries()
    chosen = list(ents.values()) if not paths else [registry.entry(p) for p in paths]
    pins = pinned_hashes()
    docs = {e.path: dict(vars(e)) for e in ents.values()}
    renames: list[Rename] = []
    skipped: list[str] = []
    todo = []
    for e in chosen:
        if not e.abspath.is_dir():
            continue
        if e.sha256 in pins and not pinned:
            skipped.append(f"profiles/{e.path}: pinned by hash in a derived file; left as it is "
                           f"(--pinned rewrites the pins)")
            continue
        todo.append(registry.verify(e))          # every run checked before any is changed
    try:
        for e in todo:
            compact_dir(e.abspath, dry_run, renames)
    finally:
        if renames and not dry_run:              # what was stored anew is re-pinned, even on error
            _repin(renames, docs)
    return renames, skipped


def _repin(renames: list[Rename], docs: dict[str, dict]) -> None:
    """Rewrite the citations, re-pin every entry holding a changed file (and what pins those), and
    write the registry."""
    prof = registry.profiles_dir()
    touched = [prof / r.new for r in renames] + rewrite_citations(renames)
    repin_derived(_rehash(docs, touched), docs)
    registry.write(list(docs.values()))


__all__ = ["COMPRESSED", "MIN_SAVING", "Rename", "compact", "compact_dir", "pinned_hashes",
           "repin_derived", "rewrite_citations", "text_files"]

"""Runs retired into git history: out of the working tree, still registered and pinned, back by
one command.

Why. The tracked tree stays under a fixed bar (``tests/cpu/repository/test_tree_size.py``: the
working tree travels to the GPU machine beside the toolchain under a 64 MiB cap), and every
committed measurement grows it. A run that no code reads (kept for a sentence of REPORT.md, or a
dataset a later run superseded) need not travel: git already holds it. Retiring it deletes its
files and writes into its registry entry ``retired: <commit>``, a commit whose tree holds the run
with exactly the pinned content (the one that last changed it); the entry keeps its path, role
and hash, so a document citing it still names a registered run, and ``restore`` writes the same
bytes back::

    python -m analysis.data retire profiles/h100/<run> [...]    # then commit the deletion
    python -m analysis.data restore profiles/h100/<run>         # or --all

Which runs may go (``readers``): an entry whose role is ``evidence``, ``dataset`` or ``measured``
(instruments, tuning sweeps, validations and references are read by their role) and that none of
these reads:

- code naming it: a ``.py`` file anywhere, or a ``.json``/``.toml`` file outside ``profiles/``
  (params files, kernel configurations, test fixtures, the package data of ``pyproject.toml``),
  by the run's name as a whole token;
- a query of the registry that names its study or a prefix of its path (``find(study=...)``,
  ``find(prefix=...)``), or a file pattern it holds (``find_files(arch, "smmap.csv*")``), in a
  ``.py`` file: such a query reads every run it matches;
- a JSON file that pins its content hash (a params file's ``inputs``, a prediction's manifest);
- a kept run derived from it (``DERIVED``): a committed validation names the holdout it was
  computed from, and regenerating it reads that;
- a selection of the figures or findings (``analysis.data.select.selectable``).

Documents (REPORT.md, docs/, the runs' READMEs) are not readers. A query over a whole role
(``find(role="dataset")``) reads whatever is registered at the time, as a newly registered run
changes what it sees; ``find`` leaves retired entries out, so it sees the working tree. A reader
whose result depends on a particular run found that way must name it (the cost fit lists its
runs in ``experiments.runner.costs.MEASURE_FIT``), and the name check then refuses that run. The
checks go by names and hashes, so they may refuse a run that is only mentioned (a docstring
citing it) and say where; they do not pass a run that is read by its name, pin or query.

Before anything is deleted, each run must hash to its pin in the working tree, have no
uncommitted change (``git status``), and hash to its pin in ``HEAD`` from git's objects; the
registry is written atomically, then the files are deleted. ``restore`` reads the files from the
recorded commit, checks their hash before writing, writes each run beside its place and moves it
in, then clears ``retired``. Where there is no git history (an installed package, an archive, a
shallow clone without the commit) both refuse in one line naming what to do, and ``check`` says
it skipped the retired entries instead of passing them.
"""
from __future__ import annotations

import ast
import fnmatch
import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from analysis.data import registry
from analysis.data.compact import text_files
from analysis.data.registry import DatasetError, Entry
from analysis.data.select import selectable
from spec.install import CHECKOUT_HINT, checkout
from spec.records import read_bytes

RETIRABLE = ("evidence", "dataset", "measured")
"""The roles an entry may have and still be read by nothing; the others are read by their role."""

ROLE_READERS = {
    "instrument": "the simulator's params files",
    "tuning": "the configuration rules' fits (experiments.tuning)",
    "validation": "the findings' validation section (analysis.findings.validation)",
    "reference": "analysis.data.published",
}

CODE_SUFFIXES = (".py", ".json", ".toml")
"""Files whose naming of a run is a read: sources and tests anywhere, data files outside
``profiles/``."""

_HEX40 = re.compile(r"[0-9a-f]{40}")


# -- git -------------------------------------------------------------------------------------------

def _git(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """``git`` in the door's root; paths are literal (a run's name is never a pattern)."""
    return subprocess.run(["git", "--literal-pathspecs", *args], cwd=registry.root(), input=stdin,
                          capture_output=True, timeout=120)


def history_problem() -> str | None:
    """None when the door's root is the top of a git work tree; else what is missing and what to
    do, in words."""
    if shutil.which("git") is None:
        return "git is not installed; install it and run the command in a clone of the repository"
    try:
        top = _git("rev-parse", "--show-toplevel")
    except (OSError, subprocess.SubprocessError) as e:
        return f"git failed ({type(e).__name__}); run the command in a clone of the repository"
    here = registry.root().resolve()
    if top.returncode != 0 or Path(top.stdout.decode().strip()).resolve() != here:
        if checkout() is None and here == registry.ROOT.resolve():
            return CHECKOUT_HINT
        return (f"{here} is not the top of a git clone (an unpacked archive or a copy); run the "
                f"command in a clone of the repository")
    return None


def _shallow() -> bool:
    return _git("rev-parse", "--is-shallow-repository").stdout.decode().strip() == "true"


def _missing_commit(commit: str) -> str | None:
    """None when ``commit`` is a commit of this repository; else why not and what to do."""
    if not _HEX40.fullmatch(commit or ""):
        return (f"retired: {commit!r} is not a full 40-hex commit id; find the commit that "
                f"holds the run (git log) and write it there")
    if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0:
        return None
    if _shallow():
        return (f"commit {commit[:12]} is not in this shallow clone; fetch the history with "
                f"`git fetch --unshallow` and run it again")
    return (f"commit {commit[:12]} is not in this repository's history (rewritten or never "
            f"pushed); restore the run from a clone that has it")


@dataclass(frozen=True)
class Stored:
    """One file of a run in a commit: ``rel`` inside the entry (a single-file entry, ``whole``:
    its file name, as ``registry.content_hash`` names it), its git ``mode`` and blob id."""

    rel: str
    mode: str
    blob: str
    whole: bool = False


def committed_files(commit: str, e: Entry) -> list[Stored]:
    """The files of entry ``e`` in ``commit`` (``git ls-tree``); [] when it holds none."""
    where = f"profiles/{e.path}"
    r = _git("ls-tree", "-r", "-z", "--full-tree", commit, "--", where)
    if r.returncode != 0:
        why = (r.stderr.decode().strip().splitlines() or ["no message"])[-1]
        raise DatasetError(f"{where}: git ls-tree {commit[:12]} failed: {why}")
    out = []
    for item in filter(None, r.stdout.decode().split("\0")):
        meta, path = item.split("\t", 1)
        mode, kind, blob = meta.split()
        if kind != "blob":
            continue
        whole = path == where
        rel = path.rsplit("/", 1)[-1] if whole else path[len(where) + 1:]
        if "__pycache__" not in rel.split("/"):
            out.append(Stored(rel, mode, blob, whole))
    return out


def _blobs(ids: list[str]) -> dict[str, bytes]:
    """{blob id: content} read in one ``git cat-file --batch``."""
    if not ids:
        return {}
    r = _git("cat-file", "--batch", stdin="".join(f"{b}\n" for b in ids).encode())
    out, pos, raw = {}, 0, r.stdout
    for b in ids:
        end = raw.index(b"\n", pos)
        head = raw[pos:end].decode().split()
        if len(head) != 3:
            raise DatasetError(f"git object {b[:12]} is missing from this repository "
                               f"({' '.join(head)})")
        size = int(head[2])
        out[b] = raw[end + 1:end + 1 + size]
        pos = end + 2 + size
    return out


def committed_hash(commit: str, e: Entry) -> str | None:
    """The content hash (``registry.tree_hash``) of ``e``'s files in ``commit``, from git's
    objects; None when the commit holds none of them."""
    files = committed_files(commit, e)
    if not files:
        return None
    data = _blobs(sorted({f.blob for f in files}))
    return registry.tree_hash((f.rel, hashlib.sha256(data[f.blob]).digest()) for f in files)


# -- who reads a run -------------------------------------------------------------------------------

def _token(name: str) -> re.Pattern:
    return re.compile(rf"(?<![\w.-]){re.escape(name)}(?![\w-])")


@dataclass(frozen=True)
class Query:
    """A registry query in the code that reads every run it matches: ``where`` (file:line) and
    its study, path prefix (a regular expression) or file pattern; None fields match all."""

    where: str
    role: str | None = None
    study: str | None = None
    prefix: re.Pattern | None = None
    pattern: str | None = None

    def reads(self, e: Entry) -> bool:
        if self.role is not None and e.role != self.role:
            return False
        if self.study is not None and e.study != self.study:
            return False
        if self.prefix is not None and not self.prefix.match(e.path):
            return False
        if self.pattern is not None:
            p = e.abspath
            files = [p] if p.is_file() else (f for f in p.rglob("*") if f.is_file())
            return any(fnmatch.fnmatch(f.name, self.pattern) for f in files)
        return True


def _constants(tree: ast.Module) -> dict[str, str]:
    return {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
            for t in n.targets if isinstance(t, ast.Name)}


def _text(node: ast.AST, consts: dict[str, str]) -> str | None:
    """A regular expression for the string ``node`` makes: a literal, a module constant, or an
    f-string whose unknown parts match any path component; None when it cannot be told."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value)
    if isinstance(node, ast.Name) and node.id in consts:
        return re.escape(consts[node.id])
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.FormattedValue):
                known = _text(v.value, consts)
                parts.append(known if known is not None else "[^/]*")
            else:
                parts.append(_text(v, consts) or "")
        return "".join(parts)
    return None


def _literal(node: ast.AST | None, consts: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return consts.get(node.id) if isinstance(node, ast.Name) else None


def queries(files: list[Path]) -> list[Query]:
    """The calls of ``find`` and ``find_files`` in ``files`` that name a study, a path prefix or a
    file pattern (a query over a whole role names none: the module docstring says why)."""
    out = []
    for f in files:
        try:
            tree = ast.parse(f.read_text())
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        consts = _constants(tree)
        rel = f.relative_to(registry.root()).as_posix()
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr \
                if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) \
                and fn.value.id == "registry" else None
            kw = {k.arg: k.value for k in node.keywords}
            where = f"{rel}:{node.lineno}"
            if name == "find" and ("study" in kw or "prefix" in kw):
                prefix = _text(kw["prefix"], consts) if "prefix" in kw else None
                out.append(Query(where, _literal(kw.get("role"), consts),
                                 _literal(kw.get("study"), consts),
                                 re.compile(prefix) if prefix is not None else None))
            elif name == "find_files" and len(node.args) == 2:
                pattern = _literal(node.args[1], consts)
                if pattern is not None:
                    out.append(Query(where, pattern=pattern))
    return out


DERIVED = ("validation",)
"""Roles whose runs are computed from other committed runs: a validation names the holdout it
was computed from, and regenerating it reads that. (A measured run's README that mentions a
prediction made before it is narrative, as REPORT.md is.)"""


class Readers:
    """What reads the entries of the registry: the repository's code, registry queries, hash pins,
    derived runs and selections, collected once (``of`` answers per entry)."""

    def __init__(self) -> None:
        root, prof = registry.root(), registry.profiles_dir()
        code = [p for p in text_files(root, CODE_SUFFIXES)
                if p.suffix == ".py" or not p.is_relative_to(prof)]
        self.code = {p.relative_to(root).as_posix(): _read(p) for p in code}
        door = Path(__file__).parent
        self.queries = queries([p for p in code if p.suffix == ".py"
                                and not p.is_relative_to(door)])
        self.pins = {p: _read(p) for p in text_files(root, (".json", ".json.gz", ".json.xz"))
                     if p != prof / registry.REGISTRY}
        self.derived = {e.path: [_read(f) for f in _files(e.abspath)
                                 if f.name.endswith(_TEXT)]
                        for e in registry.find() if e.role in DERIVED}
        self.selected: dict[str, set[Path]] = {}

    def of(self, e: Entry, leaving: frozenset[str] = frozenset()) -> list[str]:
        """Who reads entry ``e``, one phrase each (the module docstring's rules); [] when nothing
        does. ``leaving``: paths of the entries retired with it (their files do not count)."""
        if e.role not in RETIRABLE:
            return [f"its role ({e.role} entries are read by "
                    f"{ROLE_READERS.get(e.role, 'the code')})"]
        prof = registry.profiles_dir()
        gone = [prof / p for p in leaving | {e.path}]
        kept = lambda p: not any(p == g or p.is_relative_to(g) for g in gone)  # noqa: E731
        name = _token(e.name)
        out = []
        for rel, text in self.code.items():
            hit = name.search(text)
            if hit:
                out.append(f"{rel}:{text.count(chr(10), 0, hit.start()) + 1} (names it)")
        out += [f"{q.where} (a registry query that matches it)" for q in self.queries
                if q.reads(e)]
        out += [f"{p.relative_to(registry.root())} (pins its hash)"
                for p, text in self.pins.items() if kept(p) and e.sha256 in text]
        out += [f"profiles/{path} (a validation made from it)"
                for path, texts in self.derived.items()
                if kept(prof / path) and any(name.search(t) for t in texts)]
        if e.role == "dataset":
            if e.arch not in self.selected:
                self.selected[e.arch] = {d.path for d in selectable(e.arch)}
            if e.abspath in self.selected[e.arch]:
                out.append(f"analysis.data.select (a query of the figures or findings for "
                           f"{e.arch} {e.study} chooses it)")
        return out


_TEXT = (".md", ".txt", ".log", ".json", ".csv", ".xz", ".gz")


def _files(p: Path) -> list[Path]:
    return [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())


def _read(p: Path) -> str:
    """A text file's content (decompressed), or "" when it cannot be read as text."""
    try:
        return read_bytes(p).decode("utf-8", "replace")
    except (OSError, EOFError, ValueError):
        return ""


def readers(e: Entry, leaving: frozenset[str] = frozenset()) -> list[str]:
    """Who reads entry ``e`` (``Readers.of``; the index is built for this one call)."""
    return Readers().of(e, leaving)


# -- retire, restore, check ------------------------------------------------------------------------

def _chosen(paths: list[str | Path]) -> list[Entry]:
    """The registered entries ``paths`` name (a top-level run each), or a one-line error."""
    ents = registry.entries()
    out = []
    for p in paths:
        rel = registry.relative(p)
        if rel is None:
            raise DatasetError(f"{p}: not under profiles/; pass a registered run, "
                               f"profiles/<arch>/<run>")
        e = ents.get(rel)
        if e is None:
            top = "/".join(rel.split("/")[:2])
            why = (f"inside the run profiles/{top}; pass that" if top in ents and top != rel
                   else "not registered" if (registry.profiles_dir() / rel).exists()
                   else "no such registered run")
            raise DatasetError(f"profiles/{rel}: {why}; the registered runs are what `python -m "
                               f"analysis.data list` shows")
        if e not in out:
            out.append(e)
    return out


def retire(paths: list[str | Path]) -> list[Entry]:
    """Retire the entries ``paths`` name (all or none): checks as the module docstring says, then
    the registry is written with ``retired: <commit>`` (``_last_change``) and their files are
    deleted. Returns the entries as they are now registered."""
    chosen = _chosen(paths)
    for e in chosen:
        if e.retired:
            raise DatasetError(f"profiles/{e.path}: already retired (commit {e.retired[:12]})")
    leaving = frozenset(e.path for e in chosen)
    index = Readers()
    for e in chosen:
        if not e.abspath.exists() or registry.content_hash(e.abspath) != e.sha256:
            raise DatasetError(f"profiles/{e.path}: its files do not hash to the pinned sha256 "
                               f"{e.sha256[:12]}; {e.remedy()}")
        who = index.of(e, leaving)
        if who:
            more = f" and {len(who) - 3} more" if len(who) > 3 else ""
            raise DatasetError(f"profiles/{e.path}: read by {'; '.join(who[:3])}{more}; only a "
                               f"run no code reads is retired")
    problem = history_problem()
    if problem:
        raise DatasetError(f"retire needs the repository's git history: {problem}")
    head = _git("rev-parse", "--verify", "-q", "HEAD^{commit}").stdout.decode().strip()
    if not _HEX40.fullmatch(head):
        raise DatasetError("this clone has no commit yet (HEAD); commit the runs first")
    holder = {}
    for e in chosen:
        where = f"profiles/{e.path}"
        dirty = _git("status", "--porcelain", "-z", "--untracked-files=all", "--", where).stdout
        if dirty:
            raise DatasetError(f"{where}: has uncommitted changes (git status); commit them or "
                               f"`git checkout -- {where}` first")
        got = committed_hash(head, e)
        if got is None:
            raise DatasetError(f"{where}: not in HEAD ({head[:12]}); commit it first")
        if got != e.sha256:
            raise DatasetError(f"{where}: HEAD holds other content (sha256 {got[:12]} != pinned "
                               f"{e.sha256[:12]}); commit the registered content first")
        holder[e.path] = _last_change(e, head)
    docs = {x.path: dict(vars(x)) for x in registry.entries().values()}
    for e in chosen:
        docs[e.path]["retired"] = holder[e.path]
    registry.write(list(docs.values()))
    for e in chosen:
        if e.abspath.is_dir():
            shutil.rmtree(e.abspath)
        else:
            e.abspath.unlink()
    return [registry.entries()[e.path] for e in chosen]


def _last_change(e: Entry, head: str) -> str:
    """The commit that last changed ``e``'s files up to ``head`` (``git log``), when it holds them
    with the pinned hash, else ``head``. Why not always ``head``: the commit that made the run
    what it is usually lies on the main line already, so a squash or rebase of the branch that
    retires it does not take the recorded commit away."""
    last = _git("log", "-1", "--format=%H", head, "--", f"profiles/{e.path}").stdout.decode()
    last = last.strip()
    if _HEX40.fullmatch(last) and committed_hash(last, e) == e.sha256:
        return last
    return head


def _write(e: Entry, files: list[Stored], data: dict[str, bytes]) -> None:
    """Write ``e``'s files beside its place, check their hash, and move them in (a reader never
    sees a half-written run at its path)."""
    tmp = e.abspath.with_name(f".{e.name}.restore-{os.getpid()}")
    try:
        for f in files:
            p = tmp if f.whole else tmp / f.rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data[f.blob])
            if f.mode == "100755":
                p.chmod(0o755)
        got = registry.tree_hash((f.rel, hashlib.sha256((tmp if f.whole else tmp / f.rel)
                                                         .read_bytes()).digest()) for f in files)
        if got != e.sha256:
            raise DatasetError(f"profiles/{e.path}: the written copy hashes to {got[:12]}, not "
                               f"the pinned {e.sha256[:12]}; nothing was moved in")
        os.replace(tmp, e.abspath)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp)
        elif tmp.exists():
            tmp.unlink()


def _from_history(e: Entry) -> tuple[list[Stored], dict[str, bytes]]:
    """The files of retired ``e`` in its commit and their contents, checked against its pin."""
    problem = _missing_commit(e.retired or "")
    if problem:
        raise DatasetError(f"profiles/{e.path}: {problem}")
    files = committed_files(e.retired, e)
    if not files:
        raise DatasetError(f"profiles/{e.path}: commit {e.retired[:12]} holds no such run; the "
                           f"registry names the wrong commit (find one that holds it: git log "
                           f"-- profiles/{e.path})")
    data = _blobs(sorted({f.blob for f in files}))
    got = registry.tree_hash((f.rel, hashlib.sha256(data[f.blob]).digest()) for f in files)
    if got != e.sha256:
        raise DatasetError(f"profiles/{e.path}: its files in commit {e.retired[:12]} hash to "
                           f"{got[:12]}, not the pinned {e.sha256[:12]}; the registry names the "
                           f"wrong commit (find one that holds it: git log -- profiles/{e.path})")
    return files, data


def restore(paths: list[str | Path] | None) -> list[Entry]:
    """Write the retired entries ``paths`` name (None: every retired entry) back from their
    commits, checked against their pins, and clear ``retired`` (all checked before any is
    written). Returns the entries restored."""
    chosen = registry.find(retired=True) if paths is None else _chosen(paths)
    for e in chosen:
        if not e.retired:
            raise DatasetError(f"profiles/{e.path}: not retired (it is in the working tree); "
                               f"nothing to restore")
    if not chosen:
        return []
    problem = history_problem()
    if problem:
        raise DatasetError(f"restore needs the repository's git history: {problem}")
    todo = []
    for e in chosen:
        if e.abspath.exists() or os.path.lexists(e.abspath):
            if registry.content_hash(e.abspath) != e.sha256:
                raise DatasetError(f"profiles/{e.path}: something else is at its place; move it "
                                   f"away and run the command again")
            todo.append((e, None))              # already back (an earlier restore stopped)
        else:
            todo.append((e, _from_history(e)))
    for e, got in todo:
        if got is not None:
            _write(e, *got)
    docs = {x.path: dict(vars(x)) for x in registry.entries().values()}
    for e in chosen:
        docs[e.path]["retired"] = None
    registry.write(list(docs.values()))
    return chosen


def check(e: Entry) -> str | None:
    """None when retired ``e``'s commit holds its files with the pinned hash; else the one-line
    error. Raises ``Unverifiable`` when there is no history to tell (``check`` says it skipped)."""
    problem = history_problem()
    if problem:
        raise Unverifiable(problem)
    if _missing_commit(e.retired or "") and _shallow():
        raise Unverifiable("a shallow clone; `git fetch --unshallow` to verify them")
    try:
        _from_history(e)
    except DatasetError as err:
        return str(err)
    return None


class Unverifiable(Exception):
    """No git history here to verify a retired entry against (the message says what to do)."""


__all__ = ["DERIVED", "Query", "RETIRABLE", "Readers", "Stored", "Unverifiable", "check",
           "committed_files", "committed_hash", "history_problem", "queries", "readers",
           "restore", "retire"]

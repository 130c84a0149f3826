"""Run directories: reserved before the work, written atomically, never overwritten.

The life of a run directory ``<parent>/<name>``:

1. **reserve** (before any work): the lock file ``<parent>/.<name>.lock`` is created with
   ``O_CREAT | O_EXCL``, which succeeds for exactly one process; it holds that process's id and
   host. A second run for the same name (an explicit ``--out``, or a default name stamped in the
   same microsecond) is refused, or for a default name takes the next stamp, before it starts.
   A stale lock (its process no longer runs), this name's or another's in the same parent, is
   taken over: the lock and its hidden partial directory are removed, said in one line.
2. **work** in the hidden sibling ``<parent>/.<name>.partial/``; rows carry the final name.
3. **publish**: the partial directory is renamed to ``<name>`` (atomic), then the lock removed.

Whatever stops a run (an exception, Ctrl-C, SIGTERM) removes the partial directory, the lock and
the parent directories it created; only SIGKILL leaves the two hidden entries, which readers
skip (dot names, no ``manifest.json``) and the next run there cleans.

A stopped measured run is worth keeping (``experiments.rundirs.journal``): it works in the visible
``<parent>/<name>-incomplete/`` instead, whose ``manifest.json`` says ``"complete": false`` and
whose ``INCOMPLETE`` file is one line naming the command that finishes it. When it stops with
finished work in it (``keep``), that directory stays and only the lock goes; ``--resume`` reserves
``<name>`` again, works in the same directory and publishes it by renaming it to ``<name>``. Readers
refuse or skip a run whose manifest says ``"complete": false`` (``analysis.data``), so a
half-written run is never read as a result.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import shlex
import shutil
import socket
from dataclasses import asdict, is_dataclass
from importlib import metadata
from pathlib import Path

from spec.install import git_state, output_root
from spec.records import SCHEMA_VERSION

from .journal import Journal, write_text_atomically

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("numpy", "scipy", "matplotlib", "numba", "rich", "torch", "cupy-cuda13x", "cuda-tile")


class RunDirExists(FileExistsError):
    """The name is taken by a finished run or by a run in progress."""


class BadRunDir(ValueError):
    """The run directory cannot be created there (a file in the way, no permission, ...)."""


def stamp() -> str:
    """``YYYYMMDD-HHMMSS-ffffff``: local time to the microsecond (sorts like the time)."""
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")


def default_run_dir(arch: str, study: str, mode: str, root: Path | None = None) -> Path:
    """``runs/<arch>/<study>/<stamp>-<mode>`` under the checkout (or, installed, the working
    directory: ``spec.install.output_root``)."""
    return (root or output_root()) / "runs" / arch / study / f"{stamp()}-{mode}"


def _lock_path(path: Path) -> Path:
    return path.parent / f".{path.name}.lock"


def _partial_path(path: Path) -> Path:
    return path.parent / f".{path.name}.partial"


INCOMPLETE = "-incomplete"
MARKER = "INCOMPLETE"
"""The file of an incomplete run that says how to finish it."""


def incomplete_path(path: Path) -> Path:
    """Where a measured run works until it is complete: ``<name>-incomplete``."""
    return path.with_name(f"{path.name}{INCOMPLETE}")


def resume_line(work: Path) -> str:
    return f"python -m experiments.run --resume {shlex.quote(str(work))}"


def check_free(path: Path) -> None:
    """Raise RunDirExists when ``path`` holds a run (finished, or one in progress), BadRunDir
    when the system refuses the name itself (too long, a NUL byte)."""
    try:
        if "\0" in str(path):
            raise ValueError("a NUL byte in the name")
        taken = path.exists() or path.is_symlink()
    except (OSError, ValueError) as e:
        raise _cannot(path, e) from None
    if taken:
        raise RunDirExists(f"output directory {path} already exists; runs are never overwritten: "
                           "pass another --out or remove it")
    owner = _lock_owner(_lock_path(path))
    if owner is not None and _alive(owner):
        raise RunDirExists(f"output directory {path} is being written by another run (pid "
                           f"{owner[1]} on {owner[0]}); pass another --out")


def _lock_owner(lock: Path) -> tuple[str, int] | None:
    try:
        text = lock.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:                         # unreadable: treat as held
        return ("?", -1)
    try:
        host, pid = text.split()
        return host, int(pid)
    except ValueError:                      # half-written: treat as held
        return ("?", -1)


def _alive(owner: tuple[str, int]) -> bool:
    host, pid = owner
    if host != socket.gethostname() or pid < 0:
        return True                          # cannot tell from here: assume it runs
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _missing_parents(path: Path) -> list[Path]:
    """The ancestors of ``path`` that do not exist yet, outermost first."""
    out = []
    for p in path.parents:
        if p.exists():
            break
        out.append(p)
    return out[::-1]


def check_creatable(path: Path) -> None:
    """Raise BadRunDir, naming the fix, when a directory ``path`` cannot be created."""
    for p in path.parents:
        if p.exists() or p.is_symlink():
            if not p.is_dir():
                raise BadRunDir(f"output directory {path} cannot be created: {p} is a file, not "
                                "a directory; pass another --out")
            if not os.access(p, os.W_OK | os.X_OK):
                raise BadRunDir(f"output directory {path} cannot be created: no permission to "
                                f"write in {p}; pass another --out")
            return


def check_new(path: Path) -> None:
    """Raise BadRunDir or RunDirExists, naming the fix, unless a new run can be written at
    ``path``: the directory can be created and holds no run (finished or in progress)."""
    check_creatable(path)
    check_free(path)


def _cannot(path: Path, e: Exception) -> BadRunDir:
    return BadRunDir(f"output directory {path} cannot be created: "
                     f"{getattr(e, 'strerror', None) or e}; pass another --out")


def sweep_stale(parent: Path, remove: bool = True) -> list[str]:
    """The debris of killed runs in ``parent``: every ``.<name>.lock`` written by this module
    (``<host> <pid>``) whose process no longer runs on this host, with its ``.<name>.partial``
    directory, and (``remove`` only) any ``.<name>.partial`` left without a lock. With
    ``remove`` they are deleted. Returns their names. A lock of another host, or of a live
    process, is left alone."""
    found = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return found
    locks = {e.name[1:-len(".lock")] for e in entries
             if e.name.startswith(".") and e.name.endswith(".lock")}
    for name in sorted(locks):
        lock = parent / f".{name}.lock"
        owner = _lock_owner(lock)
        if owner is None or owner[1] < 0 or _alive(owner):
            continue
        found.append(lock.name)
        part = _partial_path(parent / name)
        if part.exists():
            found.append(part.name)
            if remove:
                shutil.rmtree(part, ignore_errors=True)
        if remove:
            lock.unlink(missing_ok=True)
    if remove:
        for e in entries:
            if (e.name.startswith(".") and e.name.endswith(".partial") and e.is_dir()
                    and e.name[1:-len(".partial")] not in locks):
                shutil.rmtree(e, ignore_errors=True)
                found.append(e.name)
    return found


def _reserve(path: Path) -> list[Path]:
    """Create the parents and the lock of ``path`` atomically; returns the parents it created."""
    try:
        check_new(path)
        made = _missing_parents(path)
    except (OSError, ValueError) as e:
        if isinstance(e, (RunDirExists, BadRunDir)):
            raise
        raise _cannot(path, e) from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as e:
        _remove_empty(made)
        raise _cannot(path, e) from None
    lock = _lock_path(path)
    for attempt in (1, 2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = _lock_owner(lock)
            if attempt == 1 and owner is not None and not _alive(owner):
                lock.unlink(missing_ok=True)          # stale: its process is gone
                shutil.rmtree(_partial_path(path), ignore_errors=True)
                continue
            _remove_empty(made)
            raise RunDirExists(f"output directory {path} is being written by another run; "
                               "pass another --out") from None
        except (OSError, ValueError) as e:
            _remove_empty(made)
            raise _cannot(path, e) from None
        with os.fdopen(fd, "w") as f:
            f.write(f"{socket.gethostname()} {os.getpid()}\n")
        break
    if path.exists():                       # a finished run appeared between check and lock
        lock.unlink(missing_ok=True)
        _remove_empty(made)
        check_free(path)
    return made


def _remove_empty(dirs: list[Path]) -> None:
    for d in reversed(dirs):
        try:
            d.rmdir()
        except OSError:
            break


@contextlib.contextmanager
def reserved_run_dir(path: Path | None, default=None, on_debris=None, *, keep=None,
                     resume: Path | None = None, on_kept=None):
    """Reserve ``path`` (or, when None, a fresh ``default()`` name), then yield
    ``(final_path, work_dir)``; the work directory becomes ``final_path`` when the block
    completes, and everything is removed when it does not (see the module docstring).
    ``on_debris`` gets one line naming the debris of killed runs removed from the parent.

    ``keep(work_dir) -> bool`` makes it a measured run's reservation: the work directory is
    ``<name>-incomplete`` (``resume``: an existing incomplete directory to finish), and when the
    block stops and ``keep`` says it holds finished work (a resumed one always does) it stays,
    ``on_kept(work_dir)`` is called, and only the lock is removed."""
    if on_debris is not None:
        # the default tree (runs/<arch>/<study>/) is ours: its debris is removed; beside an
        # explicit --out it is only named (a directory we do not own)
        parent = (Path(path) if path is not None else Path(default())).parent
        own = path is None
        found = sweep_stale(parent, remove=own)
        if found:
            on_debris(f"removed what killed runs left in {parent}: {', '.join(found)}" if own
                      else f"killed runs left {', '.join(found)} in {parent} (their processes "
                           "are gone); remove them with rm -r")
    if path is None:
        for _ in range(100):                # a default name taken: stamp again
            path = default()
            try:
                made = _reserve(path)
                break
            except RunDirExists:
                continue
        else:
            raise RunDirExists(f"could not find a free run directory name like {path}")
    else:
        made = _reserve(path)
    if keep is None:
        tmp = _partial_path(path)
    else:
        tmp = Path(resume) if resume is not None else incomplete_path(path)
        if resume is None and (tmp.exists() or tmp.is_symlink()):
            _lock_path(path).unlink(missing_ok=True)
            _remove_empty(made)
            raise RunDirExists(f"{tmp} exists: an interrupted run of that name; finish it with "
                               f"{resume_line(tmp)}, or remove it")
    done = kept = False
    try:
        if keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
        elif resume is None:
            tmp.mkdir()
        yield path, tmp
        if path.exists():
            raise RunDirExists(f"output directory {path} appeared while this run was written; "
                               "its results are discarded, runs are never overwritten")
        if keep is not None:
            Journal(tmp).remove()
            (tmp / MARKER).unlink(missing_ok=True)
        tmp.rename(path)
        done = True
    finally:
        if not done and keep is not None and tmp.is_dir() and (resume is not None or keep(tmp)):
            kept = True
        if not done and not kept:
            shutil.rmtree(tmp, ignore_errors=True)
        _lock_path(path).unlink(missing_ok=True)
        if not done and not kept:
            _remove_empty(made)
        if kept and on_kept is not None:
            on_kept(tmp)


def command_line(module: str, argv: list[str]) -> str:
    """The command that re-runs this one, pasteable into a shell from the repository root."""
    return shlex.join(["python", "-m", module, *argv])


def package_versions() -> dict:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _jsonable(obj):
    if is_dataclass(obj):
        return {k: _jsonable(v) for k, v in asdict(obj).items()}
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "value") and hasattr(obj, "name"):      # enums
        return obj.value
    return obj


def _manifest(command: str, fields: dict) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "git": git_state(),
        "versions": package_versions(),
        **_jsonable(fields),
    }


def write_incomplete(run_dir: Path, *, command: str, **fields) -> Path:
    """The manifest of a measured run before it is complete (``"complete": false`` among its
    parameters, ``resume``: the command that finishes it) and its one-line ``INCOMPLETE``
    file, both written atomically; no README until the run is complete."""
    fields["parameters"] = dict(fields.get("parameters") or {}, complete=False)
    manifest = _manifest(command, fields) | {"resume": resume_line(run_dir)}
    write_text_atomically(run_dir / MARKER, f"interrupted before it was complete; finish it "
                          f"with: {resume_line(run_dir)}\n")
    path = run_dir / "manifest.json"
    write_text_atomically(path, json.dumps(manifest, indent=2) + "\n")
    return path


def write_manifest(run_dir: Path, *, command: str, **fields) -> Path:
    """``manifest.json``: schema version, creation time, ``command`` (``command_line``), git
    state, package versions and the caller's fields."""
    manifest = _manifest(command, fields)
    path = run_dir / "manifest.json"
    write_text_atomically(path, json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    readme = run_dir / "README.md"
    if not readme.exists():              # provenance in words: the tree that ran, clean or dirty
        from analysis.data.catalogue import readme_text
        files = sorted(p.name for p in run_dir.iterdir()
                       if p.is_file() and p.name != MARKER) + ["README.md"]
        readme.write_text(readme_text(f"Run of `{command}`", manifest, sorted(files),
                                      why="Written with the run's manifest by experiments.run"))
    return path

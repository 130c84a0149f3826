"""Run directories: written atomically, never overwritten, each with a JSON manifest.

A run is assembled in a hidden sibling directory and renamed into place only when it completed,
so a crash or Ctrl-C leaves no half-written result that looks like a finished one.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, is_dataclass
from importlib import metadata
from pathlib import Path

from spec.records import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("numpy", "scipy", "matplotlib", "numba", "rich", "torch", "cupy-cuda13x", "cuda-tile")


class RunDirExists(FileExistsError):
    pass


def default_run_dir(arch: str, study: str, mode: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return ROOT / "runs" / arch / study / f"{stamp}-{mode}"


def check_free(path: Path) -> None:
    if path.exists():
        raise RunDirExists(f"output directory {path} already exists; runs are never overwritten: "
                           "pass another --out or remove it")


@contextlib.contextmanager
def atomic_run_dir(path: Path):
    """Yield a temporary directory that becomes ``path`` when the block completes."""
    check_free(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        check_free(path)
        tmp.rename(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def git_state() -> dict:
    """Commit and dirty flag of the tree. A copy without git history (e.g. a working tree shipped
    to a GPU machine) can name its commit in $SAWTOOTH_GIT_COMMIT; otherwise it is recorded as
    unknown (None), never guessed."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    if os.environ.get("SAWTOOTH_GIT_COMMIT"):
        return {"commit": os.environ["SAWTOOTH_GIT_COMMIT"], "dirty": None,
                "source": "SAWTOOTH_GIT_COMMIT"}
    try:
        commit = git("rev-parse", "--verify", "-q", "HEAD^{commit}")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no")) if commit else None
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", None
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        commit, dirty = "", None
    return {"commit": commit or None, "dirty": dirty}


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


def write_manifest(run_dir: Path, **fields) -> Path:
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "git": git_state(),
        "versions": package_versions(),
        **_jsonable(fields),
    }
    path = run_dir / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    return path

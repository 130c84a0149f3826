"""How the code was installed: from a checkout of the repository or as a package, with or
without the GPU extra.

The documented install is editable (``pip install -e .`` in a checkout): the packages sit beside
``pyproject.toml`` and ``profiles/`` holds every committed dataset. A plain ``pip install .``
copies the packages into ``site-packages`` with only the package data: the kernel
configurations, the simulator parameters, ``profiles/registry.json.xz`` and the few small registered
runs the main command and the dry-run read. Two things follow, defined here once:

- outputs (run directories, figures) go under the checkout when there is one, and under the
  working directory otherwise (never into ``site-packages``);
- a command that needs a committed dataset the package does not carry says so in one line
  (``CHECKOUT_HINT``) instead of asking to restore a file that was never installed;
- what names the code that ran (``git_state``: a commit, or a hash of the code).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
"""The directory that holds ``spec/``, ``analysis/``, ``profiles/``, ... (a checkout's root, or
``site-packages``)."""

CHECKOUT_HINT = ("the committed datasets come with a checkout of the repository, not with an "
                 "installed package: clone it and run the command from its root "
                 "(python -m pip install -e .)")


def checkout() -> Path | None:
    """The repository root when the code runs from a checkout, else None (an installed package)."""
    return PACKAGE_ROOT if (PACKAGE_ROOT / "pyproject.toml").is_file() else None


def output_root() -> Path:
    """Where default output directories go: the checkout, or the working directory."""
    return checkout() or Path.cwd()


GPU_EXTRA = ("install the GPU extra from a clone's root: python -m pip install -e '.[gpu]' "
             "(the project is not on PyPI)")
"""How to get torch, CuPy, cuda-tile and ncu-report: the ``gpu`` extra of ``pyproject.toml``,
installed from a clone (no package index serves the project)."""


def require_gpu_extra(what: str, modules: tuple[str, ...] = ("torch",)) -> None:
    """Raise ``ModuleNotFoundError`` with one line naming the extra when a module ``what`` imports
    is absent (``what``: e.g. ``kernels.attention``), instead of a bare "No module named"."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ModuleNotFoundError(f"{what} needs {', '.join(missing)}, which is not installed; "
                                  f"{GPU_EXTRA}", name=missing[0])


DISTRIBUTION = "sawtooth-locality"
"""The project's name in ``pyproject.toml`` (what ``importlib.metadata`` knows it by)."""
PACKAGES = ("spec", "analysis", "experiments", "kernels", "cuda_baseline", "profiles",
            "paper_figures")


def source_sha256(root: Path = PACKAGE_ROOT) -> str:
    """SHA-256 over every file of the project's packages under ``root`` (path and content, in
    path order; compiled caches left out): names the exact code that ran where no git commit
    can (an installed package, a copy without history)."""
    h = hashlib.sha256()
    for pkg in PACKAGES:
        for f in sorted((root / pkg).rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
                h.update(f.relative_to(root).as_posix().encode() + b"\0")
                h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def code_identity(root: Path = PACKAGE_ROOT) -> dict:
    """``{"package", "version", "source_sha256"}``: the distribution's name and installed version
    (None when it is not installed) and ``source_sha256``; recorded in a run's provenance when
    there is no git commit to name."""
    try:
        version = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        version = None
    return {"package": DISTRIBUTION, "version": version, "source_sha256": source_sha256(root)}


def lazy_attributes(package: str, names: dict[str, str]):
    """The ``__getattr__`` of a kernel family's package: each of ``names`` (attribute ->
    submodule, e.g. ``{"attention": "host.op"}``) imports its submodule (torch, the operators'
    registration) on first access only, after checking that torch is installed
    (``require_gpu_extra``), so importing the package needs neither."""
    import importlib

    def __getattr__(name: str):
        if name in names:
            require_gpu_extra(f"{package}.{name}")
            value = getattr(importlib.import_module(f"{package}.{names[name]}"), name)
            setattr(importlib.import_module(package), name, value)      # later accesses skip
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return __getattr__


def git_state() -> dict:
    """Commit and dirty flag of the tree. A copy without git history (e.g. a working tree shipped
    to a GPU machine) can name its commit in $SAWTOOTH_GIT_COMMIT; otherwise it is recorded as
    unknown (None), never guessed; so is an installed package's (it is no checkout). Where no
    commit is known the package version and a hash of the code that ran are recorded instead
    (``spec.install.code_identity``); so is the code's hash where the tree is dirty, the commit
    then not naming what ran (a GPU machine's copy with a stale ``.git``)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    if os.environ.get("SAWTOOTH_GIT_COMMIT"):
        return {"commit": os.environ["SAWTOOTH_GIT_COMMIT"], "dirty": None,
                "source": "SAWTOOTH_GIT_COMMIT"}
    tree = checkout()
    if tree is None:                        # the version and a hash of the code name it instead
        return {"commit": None, "dirty": None, "source": "installed package", **code_identity()}
    try:
        commit = git("rev-parse", "--verify", "-q", "HEAD^{commit}")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no")) if commit else None
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", None
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        return {"commit": None, "dirty": None, "source": "checkout without git history",
                **code_identity()}
    if dirty:
        return {"commit": commit, "dirty": dirty, "source_sha256": source_sha256()}
    return {"commit": commit, "dirty": dirty}

"""tileiras toolchain checks: find the compiler cuda.tile will use and explain broken setups.

tileiras needs ``ptxas`` and ``libnvvm`` of its own CUDA minor release. When ``tileiras`` comes from
``PATH`` or ``$CUDA_HOME/bin`` (not from the pip wheels), cuda.tile passes ``CUDA_HOME`` through
and tileiras takes ptxas/libnvvm from there; an older toolkit (e.g. CUDA 13.0 under a 13.4
tileiras) then fails with the opaque "failed to compile Tile IR program". ``check()`` detects
the mismatch up front; ``explain_compile_error`` turns the opaque error into one that says how to
fix it.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

FIX = ("Fix: install the matching toolchain wheels (`pip install 'cuda-tile[tileiras]'`, which "
       "brings nvidia-cuda-tileiras, nvidia-cuda-nvcc and nvidia-nvvm of one version), or `unset "
       "CUDA_HOME CUDA_PATH` so tileiras does not pick up an older toolkit's ptxas/libnvvm, or "
       "point CUDA_HOME at a CUDA toolkit of the same major.minor as tileiras. On the project's "
       "GPU machines: `source .cutile/activate.sh`.")


class ToolchainError(RuntimeError):
    """The tileiras toolchain is missing or inconsistent; the message says how to fix it."""


@dataclass
class Toolchain:
    tileiras: str | None = None
    tileiras_version: str | None = None
    ptxas: str | None = None
    ptxas_version: str | None = None
    cuda_home: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.tileiras is not None and not self.problems


def _version(exe: str) -> str | None:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+\.\d+)", out) or re.search(r"V(\d+\.\d+)", out)
    return m.group(1) if m else None


def inspect() -> Toolchain:
    """Which tileiras / ptxas cuda.tile would use, and whether their versions agree."""
    tc = Toolchain(cuda_home=os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"))
    try:
        from cuda.tile._compile import _find_compiler_bin
    except ImportError as e:
        tc.problems.append(f"cuda.tile is not importable ({e}); pip install 'cuda-tile[tileiras]'")
        return tc
    try:
        binary = _find_compiler_bin()
    except FileNotFoundError as e:
        tc.problems.append(str(e))
        return tc
    tc.tileiras = binary.path
    tc.tileiras_version = _version(binary.path)
    # ptxas as tileiras will see it: $CUDA_HOME/bin first when it is passed through, else PATH
    search = binary.bin_path
    if binary.pass_cuda_home_var and tc.cuda_home:
        search = os.path.join(tc.cuda_home, "bin") + os.pathsep + search
    tc.ptxas = (shutil.which("ptxas", path=os.path.dirname(binary.path))
                or shutil.which("ptxas", path=search))
    tc.ptxas_version = _version(tc.ptxas) if tc.ptxas else None
    if tc.ptxas is None:
        tc.problems.append(f"no ptxas beside {binary.path} or on PATH")
    elif (tc.tileiras_version and tc.ptxas_version
          and tc.tileiras_version != tc.ptxas_version):
        tc.problems.append(f"tileiras {tc.tileiras_version} ({tc.tileiras}) would use ptxas "
                           f"{tc.ptxas_version} ({tc.ptxas}); they must be the same CUDA release")
    if binary.pass_cuda_home_var and tc.cuda_home and tc.tileiras_version:
        v = _version(os.path.join(tc.cuda_home, "bin", "ptxas"))
        if v and v != tc.tileiras_version:
            tc.problems.append(f"CUDA_HOME={tc.cuda_home} holds CUDA {v}, but tileiras is "
                               f"{tc.tileiras_version}: tileiras takes ptxas/libnvvm from "
                               "CUDA_HOME")
    return tc


def check() -> Toolchain:
    """Raise ToolchainError (with the fix) when the toolchain is missing or mismatched."""
    tc = inspect()
    if not tc.ok:
        raise ToolchainError("cuTile toolchain problem: " + "; ".join(tc.problems) + ". " + FIX)
    return tc


def explain_compile_error(exc: BaseException) -> BaseException:
    """Wrap tileiras's opaque failure in a ToolchainError that names the cause and the fix."""
    text = str(exc)
    if "failed to compile Tile IR program" in text or "libnvvm" in text:
        tc = inspect()
        detail = "; ".join(tc.problems) if tc.problems else (
            f"tileiras {tc.tileiras_version} at {tc.tileiras}, ptxas {tc.ptxas_version} at "
            f"{tc.ptxas}, CUDA_HOME={tc.cuda_home!r}")
        return ToolchainError("tileiras failed to compile the kernel (\"failed to compile Tile IR "
                              f"program\"), which usually means a toolchain mismatch: {detail}. "
                              + FIX + f"\nOriginal error: {text}")
    return exc


SCRATCH_ENV = "CUDA_TILE_TEMP_DIR"


@contextmanager
def scratch_dir() -> Iterator[Path | None]:
    """Every temporary file of the block in one directory it owns and removes, however it ends:
    cuda.tile's scratch (its bytecode-version probes ``probe*.bytecode`` / ``probe*.cubin``, its
    compile inputs), the cubins ``kernels.build.resources`` exports and what the compilers it runs
    write. Without it cuda.tile makes a ``tempfile.mkdtemp()`` at import and removes it only from
    an ``atexit`` hook, and an export's ``TemporaryDirectory`` is removed only when its block
    ends: an interrupted command that leaves through ``os._exit`` (a simulator thread still
    inside a compiled kernel) runs neither, and the caller removes this one directory instead.
    Enter it before ``cuda.tile`` is imported (it reads ``$CUDA_TILE_TEMP_DIR`` once). Yields
    None and changes nothing when the user set that variable."""
    if os.environ.get(SCRATCH_ENV):
        yield None
        return
    path = Path(tempfile.mkdtemp(prefix="sawtooth-"))
    saved = {k: os.environ.get(k) for k in (SCRATCH_ENV, "TMPDIR")}
    saved_tempdir = tempfile.tempdir
    os.environ[SCRATCH_ENV] = str(path / "cutile")
    os.environ["TMPDIR"] = tempfile.tempdir = str(path)
    try:
        yield path
    finally:
        tempfile.tempdir = saved_tempdir
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(path, ignore_errors=True)

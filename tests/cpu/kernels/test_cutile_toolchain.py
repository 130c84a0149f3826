"""The tileiras toolchain checks: a mismatched CUDA_HOME is detected and the message says how to
fix it (no GPU and no cuda-tile needed: the toolchain lookup is faked)."""
from __future__ import annotations

import stat
import sys
import types
from dataclasses import dataclass

import pytest


def _script(path, text):
    path.write_text(f"#!/bin/sh\necho '{text}'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@dataclass
class _Bin:
    path: str
    bin_path: str
    ld_path: str = ""
    pass_cuda_home_var: bool = True


@pytest.fixture
def fake_toolchain(tmp_path, monkeypatch):
    tc_bin = tmp_path / "tc" / "bin"
    tc_bin.mkdir(parents=True)
    _script(tc_bin / "tileiras", "Cuda compilation tools, release 13.4, V13.4.92")
    old = tmp_path / "cuda-13.0" / "bin"
    old.mkdir(parents=True)
    _script(old / "ptxas", "Cuda compilation tools, release 13.0, V13.0.88")
    mod = types.ModuleType("cuda.tile._compile")
    mod._find_compiler_bin = lambda: _Bin(str(tc_bin / "tileiras"), str(old))
    monkeypatch.setitem(sys.modules, "cuda", types.ModuleType("cuda"))
    monkeypatch.setitem(sys.modules, "cuda.tile", types.ModuleType("cuda.tile"))
    monkeypatch.setitem(sys.modules, "cuda.tile._compile", mod)
    monkeypatch.setenv("CUDA_HOME", str(old.parent))
    return old.parent


def test_old_cuda_home_is_detected(fake_toolchain):
    from kernels.build.toolchain import ToolchainError, check, inspect
    tc = inspect()
    assert tc.tileiras_version == "13.4" and tc.ptxas_version == "13.0"
    assert not tc.ok
    with pytest.raises(ToolchainError, match="unset CUDA_HOME"):
        check()


def test_opaque_error_is_explained(fake_toolchain):
    from kernels.build.toolchain import ToolchainError, explain_compile_error
    err = explain_compile_error(RuntimeError("rc=5: failed to compile Tile IR program"))
    assert isinstance(err, ToolchainError)
    msg = str(err)
    assert "13.0" in msg and "13.4" in msg and "CUDA_HOME" in msg and "activate.sh" in msg
    other = ValueError("something else")
    assert explain_compile_error(other) is other

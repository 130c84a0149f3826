"""The cubin launch facts kept on disk (``kernels.build.resources.launch_facts``): read back under
the same key, recomputed when the sources or the toolchain change, never kept when cuda.tile's cache
is turned off."""
from dataclasses import dataclass

import pytest

pytest.importorskip("cutile_cache")

from kernels.build import resources  # noqa: E402


@dataclass(frozen=True)
class _Case:
    B: int = 8
    causal: bool = True


def _fake(monkeypatch, calls, fingerprint):
    def resources_of(case, arch, occupancy=None, worker_warps=None):
        calls.append((case, arch))
        return resources.Resources(255, 0, 42060, 0, {}, None, 256)
    monkeypatch.setattr(resources, "resources", resources_of)
    monkeypatch.setattr(resources, "_toolchain_fingerprint", lambda: fingerprint)


def test_facts_are_read_back_and_recomputed_when_the_toolchain_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_TILE_CACHE_DIR", str(tmp_path))
    calls = []
    _fake(monkeypatch, calls, {"sources": "a"})
    assert resources.launch_facts(_Case(), "sm_121", 1) == (256, 255, 42060)
    assert resources.launch_facts(_Case(), "sm_121", 1) == (256, 255, 42060)
    assert len(calls) == 1 and len(list((tmp_path / resources.LAUNCH_FACTS_DIR).iterdir())) == 1
    resources.launch_facts(_Case(causal=False), "sm_121", 1)     # another case
    resources.launch_facts(_Case(), "sm_90", 1)                   # another arch
    resources.launch_facts(_Case(), "sm_121", 2)                  # another hint
    assert len(calls) == 4
    _fake(monkeypatch, calls, {"sources": "b"})                   # a source or tool changed
    resources.launch_facts(_Case(), "sm_121", 1)
    assert len(calls) == 5


def test_no_facts_are_kept_without_cuda_tiles_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_TILE_CACHE_DIR", "off")
    monkeypatch.chdir(tmp_path)
    calls = []
    _fake(monkeypatch, calls, {"sources": "a"})
    resources.launch_facts(_Case(), "sm_121", 1)
    resources.launch_facts(_Case(), "sm_121", 1)
    assert len(calls) == 2 and not list(tmp_path.iterdir())

"""CuPy caches a compiled module under a key of all the kernel names in it, so a process that
groups the same instantiations differently compiles them again. ``precompile`` records its groups
beside an explicit ``$CUPY_CACHE_DIR``; these tests check that a later process asking for any
subset, and a lazy load of one kernel, reuse the recorded groups (no GPU: ``_load`` is replaced
by a recorder)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from cuda_baseline.host import backend


@pytest.fixture
def loads(monkeypatch, tmp_path):
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(backend, "_KERNELS", {})
    got: list[list[str]] = []

    def load(names, device_index):
        got.append(list(names))
        for n in names:
            backend._KERNELS[(device_index, n)] = object()

    monkeypatch.setattr(backend, "_load", load)
    return got


def _insts(names):
    return [SimpleNamespace(name=n) for n in names]


def test_a_later_process_loads_any_subset_in_the_first_grouping(loads, monkeypatch):
    first = [f"k{i:02d}" for i in range(20)]
    backend.precompile(_insts(first), jobs=1, chunk=8)
    assert loads == [first[0:8], first[8:16], first[16:20]]
    loads.clear()
    monkeypatch.setattr(backend, "_KERNELS", {})            # a new process, the same cache
    backend.precompile(_insts(["k03", "k09", "k17", "new1", "new0"]), jobs=1, chunk=8)
    assert loads == [first[0:8], first[8:16], first[16:20], ["new0", "new1"]]
    assert backend._group_of("k09") == first[8:16]
    assert backend._group_of("new1") == ["new0", "new1"]     # recorded for the next process
    assert backend._group_of("never") == ["never"]


def test_loaded_groups_are_not_loaded_again(loads):
    backend.precompile(_insts(["a", "b", "c"]), jobs=1, chunk=2)
    backend.precompile(_insts(["a", "b"]), jobs=1, chunk=2)
    assert loads == [["a", "b"], ["c"]]


def test_without_an_explicit_cache_dir_nothing_is_recorded(loads, monkeypatch, tmp_path):
    monkeypatch.delenv("CUPY_CACHE_DIR")
    backend.precompile(_insts(["b", "a", "c"]), jobs=1, chunk=2)
    assert loads == [["a", "b"], ["c"]]
    assert backend._group_of("a") == ["a"]
    assert not any(tmp_path.iterdir())


def test_an_unreadable_record_counts_as_none(loads, tmp_path):
    (tmp_path / backend.GROUPS_FILE).write_text("{not json")
    assert backend._group_of("x") == ["x"]
    backend.precompile(_insts(["x", "y"]), jobs=1, chunk=8)
    assert loads == [["x", "y"]]
    assert backend._group_of("x") == ["x", "y"]

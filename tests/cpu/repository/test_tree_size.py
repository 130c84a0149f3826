"""The tracked tree stays small. The working tree travels to the GPU machine with the cuTile
bundle (about 60 MB) under a 64 MiB cap, so everything tracked stays under 5 MiB: committed runs
are stored compacted (``python -m analysis.data compact``: machine files as ``.xz``, re-pinned),
and a change that grows the tree past the bar fails here instead of on the GPU machine."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import ROOT

LIMIT = 5 * 2**20
"""Bytes: the sum of the sizes of the files ``git ls-files`` lists."""


def tracked_sizes() -> dict[str, int]:
    """{path: bytes} of every tracked file present in the checkout; skips outside a git checkout."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    r = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if r.returncode != 0:
        pytest.skip("not a git checkout (an installed package or an unpacked archive)")
    paths = [f for f in r.stdout.decode().split("\0") if f]
    return {f: (ROOT / f).stat().st_size for f in paths if (ROOT / f).is_file()}


def test_tracked_tree_stays_under_5_mib():
    sizes = tracked_sizes()
    total = sum(sizes.values())
    top = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
    assert total <= LIMIT, (
        f"the tracked files total {total / 2**20:.2f} MiB, over the {LIMIT / 2**20:.0f} MiB bar; "
        f"store new runs compacted (`python -m analysis.data compact`), the largest files: "
        + ", ".join(f"{p} ({s / 1e3:.0f} kB)" for p, s in top))


def test_the_sum_counts_every_tracked_file():
    """The bar is checked on the real listing: the registry and this file are in it, with their
    sizes on disk."""
    sizes = tracked_sizes()
    here = "tests/cpu/repository/test_tree_size.py"
    assert sizes["profiles/registry.json.xz"] == (ROOT / "profiles/registry.json.xz").stat().st_size
    if here in sizes:                          # not yet committed when first written
        assert sizes[here] > 0
    assert len(sizes) > 500

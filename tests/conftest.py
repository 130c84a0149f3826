"""Test markers: ``gpu`` tests skip without a CUDA GPU; ``compile`` tests skip when the toolchain
(cuda-tile + tileiras, or nvcc) is absent, unless REQUIRE_COMPILE=1 (set by .ci/run) turns the skip
into a failure so CI cannot pass by compiling nothing."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:          # run from anywhere: the repo's packages, not PyPI's namesakes
    sys.path.insert(0, str(ROOT))


def _has_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


HAS_GPU = _has_gpu()


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip_gpu)


def require_toolchain(available: bool, what: str) -> None:
    """Skip (locally) or fail (CI) when a compile toolchain is missing."""
    if available:
        return
    if os.environ.get("REQUIRE_COMPILE") == "1":
        pytest.fail(f"{what} is required in CI (REQUIRE_COMPILE=1) but is not available")
    pytest.skip(f"{what} not available")

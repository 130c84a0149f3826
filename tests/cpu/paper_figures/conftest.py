"""Fixtures of the figure tests: every figure a test drew is closed after it."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt
    plt.close("all")

"""Fixtures shared by the CPU tests of several packages."""
from __future__ import annotations

import pytest


@pytest.fixture
def csv_reader(monkeypatch):
    """Force the ncu report reader's CSV fallback (a fake ncu writes no real report)."""
    from profiles import report
    monkeypatch.setattr(report, "load_module", lambda ncu_path=None, extras=True: None)

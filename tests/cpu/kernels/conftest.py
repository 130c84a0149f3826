"""Fixtures of the kernels tests: a fresh ``kernels.rules.config.load`` cache around a test that
points it at its own config file."""
from __future__ import annotations

import pytest

from kernels.rules import config


@pytest.fixture
def fresh_cache():
    config.load.cache_clear()
    yield
    config.load.cache_clear()

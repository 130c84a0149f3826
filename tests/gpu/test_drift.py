"""GPU test of the CTA-drift measurement (cuda_baseline.drift): a small persistent launch whose
trace build is correct, with per-step spreads that are finite, non-negative and sampled as asked."""
from __future__ import annotations

import math

import pytest

from spec import Backend, CtaSchedule, Problem, ScanOrder, Tiles, Variant, detect
from spec.records import Metric

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("order", ["linear", "sawtooth"])
def test_drift_rows_of_a_small_persistent_launch(order):
    from cuda_baseline.drift import measure
    arch = detect()
    problem = Problem(B=1, H=2, S_q=1024, D=64)
    variant = Variant(Backend.CUDA, ScanOrder.parse(order), CtaSchedule.persistent(4), Tiles(64, 64))
    rows, table = measure([(problem, variant)], arch, run="test", points=7)
    step = [r for r in rows if r.metric == Metric.STEP_NS]
    spread = [r for r in rows if r.metric == Metric.CTA_START_SPREAD_NS]
    assert len(step) == 1 and step[0].value > 0 and "ok" in step[0].note
    assert len(spread) == 7
    assert all(math.isfinite(r.value) and r.value >= 0 for r in spread)
    assert [r.x for r in spread] == sorted(r.x for r in spread)
    assert spread[0].x == 0 and len(table) == 1

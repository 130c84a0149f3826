"""GPU test of the drift study's measure hook (experiments.measurement.measure.measure_drift): a
small persistent launch whose trace build is correct, with per-step spreads that are finite,
non-negative and sampled as asked, and the build's resource rows."""
from __future__ import annotations

import math

import pytest

from spec import Backend, Case, CtaSchedule, Problem, ScanOrder, Tiles, Variant, detect
from spec.records import Metric

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("order", ["linear", "sawtooth"])
def test_drift_rows_of_a_small_persistent_launch(order):
    from experiments.measurement.measure import DRIFT_EVERY, measure_drift
    arch = detect()
    # 4 CTAs x 128 work items x 256 steps: 512 stamps each at every DRIFT_EVERY-th step
    problem = Problem(B=1, H=2, S_q=16384, D=64)
    variant = Variant(Backend.CUDA, ScanOrder.parse(order), CtaSchedule.persistent(4),
                      Tiles(64, 64))
    case = Case(problem, variant, 4, "drift-test")
    res = measure_drift([case], arch, run="test", study="drift", seed=0, points=7)
    assert not res.failed and res.passed == [case]
    step = [r for r in res.rows if r.metric == Metric.STEP_NS]
    spread = [r for r in res.rows if r.metric == Metric.CTA_START_SPREAD_NS]
    assert len(step) == 1 and step[0].value > 0 and "ok" in step[0].note
    assert len(spread) == 7
    assert all(math.isfinite(r.value) and r.value >= 0 for r in spread)
    assert [r.x for r in spread] == sorted(r.x for r in spread)
    assert spread[0].x == 0 and len(res.summary) == 1
    assert all(r.x % DRIFT_EVERY == 0 for r in spread) and spread[-1].x > 0
    regs = [r for r in res.rows if r.metric == "registers"]
    local = [r for r in res.rows if r.metric == "local_bytes"]
    assert len(regs) == 1 and regs[0].value > 0 and local[0].value == 0

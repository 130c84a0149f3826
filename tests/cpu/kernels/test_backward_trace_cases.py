"""CPU checks of the backward trace test (tests/gpu/test_backward_trace.py) that need no GPU: for
every case it launches, the record the host allocates has the spec's rows and at least one step
column to spare, a reversing order prescribes something other than the linear scan there, and
its checker rejects a kernel that never reverses its scan (e.g. a persistent dQ pass whose
items all get r = 0: it records the linear scan of the same deal) while it accepts the spec's
own table."""
from __future__ import annotations

import numpy as np
import pytest

from spec.backward_trace import PassGrid, backward_visits
from spec.orders import ScanOrder
from spec.schedules import CtaSchedule
from tests.gpu import test_backward_trace as gpu


def _cutile_cases():
    for bwd in gpu.PASSES:
        for order in gpu.ORDERS:
            for sched in gpu.CUTILE_SCHEDULES:
                for causal in (False, True):
                    pg = PassGrid(gpu.cutile_problem(causal), gpu.CUTILE_TILES, bwd, 1)
                    yield pytest.param(pg, CtaSchedule.parse(sched), order, sched,
                                       id=f"cutile-{bwd}-{order}-{sched}-{causal}")


def _cuda_cases(num_sms: int = 132):
    from cuda_baseline.host.training import dkdv_spec_schedule, plan
    for order in gpu.ORDERS:
        for sched in gpu.CUDA_SCHEDULES:
            for causal in (False, True):
                for D in gpu.HEAD_DIMS:
                    pr = gpu.cuda_problem(D, causal)
                    pl = plan(pr, ScanOrder.parse(order),
                              None if sched == "grid" else CtaSchedule.parse(sched), num_sms)
                    pg = PassGrid(pr, pl.instance.tiles, "dkdv", pl.n_chunks)
                    yield pytest.param(pg, dkdv_spec_schedule(pl), order, sched, pl,
                                       id=f"cuda-{order}-{sched}-{causal}-d{D}")


def _padded(table: np.ndarray, steps: int) -> np.ndarray:
    """``table`` as a record of ``steps`` columns, -1 beyond (what a trace build leaves)."""
    out = np.full((table.shape[0], steps, 4), -1, dtype=np.int32)
    out[:, :table.shape[1]] = table
    return out


def _check_cases(pg, schedule, order, sched, steps):
    want = backward_visits(pg, schedule, ScanOrder.parse(order)).table()
    assert steps > want.shape[1], (steps, want.shape)
    gpu._check(_padded(want, steps), pg, schedule, order, gpu._reverses(order, sched))
    linear = backward_visits(pg, schedule, ScanOrder.linear()).table()
    never_reverses = _padded(linear, steps)
    if gpu._reverses(order, sched):
        with pytest.raises(AssertionError):
            gpu._check(never_reverses, pg, schedule, order, True)
    else:
        gpu._check(never_reverses, pg, schedule, order, False)
    return want


@pytest.mark.parametrize("pg, schedule, order, sched", list(_cutile_cases()))
def test_cutile_trace_cases(pg, schedule, order, sched):
    from kernels.host.backward import trace_steps
    want = backward_visits(pg, schedule, ScanOrder.linear()).table()
    n_ctas = want.shape[0]          # the launch: every item (grid) or P < items CTAs
    assert n_ctas == (pg.items_grid.n_work if sched == "grid" else schedule.num_ctas)
    assert schedule.num_ctas is None or schedule.num_ctas < pg.items_grid.n_work
    _check_cases(pg, schedule, order, sched,
                 trace_steps(pg.problem, pg.tiles, pg.bwd.value, pg.split, n_ctas))


@pytest.mark.parametrize("pg, schedule, order, sched, pl", list(_cuda_cases()))
def test_cuda_trace_cases(pg, schedule, order, sched, pl):
    from cuda_baseline.host.training import trace_steps
    want = _check_cases(pg, schedule, order, sched, trace_steps(pl))
    assert want.shape[0] == pl.ctas
    # the cases reach items of two query heads (the head order reverses too)
    assert pl.heads_per_cta == 2


def test_cuda_spec_schedule_of_the_kernels_deal():
    """Full attention deals K/V tiles fastest (q-major), causal slowest (head-major); the causal
    grid launch is one item per CTA in that order."""
    from cuda_baseline.host.training import dkdv_spec_schedule, plan
    pr = gpu.cuda_problem(64, True)
    grid = plan(pr, ScanOrder.linear(), None, 132)
    assert dkdv_spec_schedule(grid).label == f"static{grid.n_work}h"
    assert dkdv_spec_schedule(plan(pr, ScanOrder.linear(), CtaSchedule.parse("static7"),
                                   132)).label == "static7h"
    full = gpu.cuda_problem(64, False)
    assert dkdv_spec_schedule(plan(full, ScanOrder.linear(), None, 132)).label == "grid"
    assert dkdv_spec_schedule(plan(full, ScanOrder.linear(), CtaSchedule.parse("static7"),
                                   132)).label == "static7"

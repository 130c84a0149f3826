"""GPU tests of the backward's scan order (skipped without a GPU): each backward kernel's trace
build visits exactly what ``spec.backward_trace.backward_visits`` prescribes, as the forward's
``test_trace_equals_spec`` checks the forward's.

- cuTile: both main passes, ``kernels.device.fmha_bwd.bwd_dkdv_trace`` and ``bwd_dq_trace`` (run by
  ``kernels.host.backward.trace_backward``), linear / sawtooth / reverse, grid and 5 persistent CTAs
  in q-major and head-major order, causal and not. The configuration is fixed (64 x 128 tiles,
  no group split: each dK/dV item scans both query heads of its K/V head, so the head order
  reverses too), so the test does not depend on the fitted rule.
- CUDA: the family's one scan, ``flash_bwd_dkdv_trace`` (``cuda_baseline.host.training.trace_dkdv``;
  its dQ is reduced inside the dK/dV kernel, ``flash_bwd_dq`` only converts it), linear /
  sawtooth / reverse, grid and 7 persistent CTAs, causal and not, D 64 and 128, against the
  spec's model of that kernel's deal (``dkdv_spec_schedule``). On GPUs of up to 144 SMs both
  problems keep a K/V head's two query heads in one item (``heads_per_cta`` 2).

The record is int32 [n_ctas, steps, 4] of (b, query head, Q tile, K/V tile) per CTA and step,
-1 where nothing was stored, with at least one step column more than the spec's: a kernel that
visits more than the spec leaves a mark there. Each sawtooth case on a persistent schedule and
each reverse case also asserts that its spec table differs from the linear one, so a kernel
that never reverses its scan (a persistent pass whose items all get r = 0) fails here.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from spec import Problem
from spec.backward_trace import PassGrid, backward_visits
from spec.orders import ScanOrder
from spec.problem import Tiles
from spec.schedules import CtaSchedule

pytestmark = pytest.mark.gpu

ORDERS = ["linear", "sawtooth", "reverse"]
CUTILE_SCHEDULES = ["grid", "static5", "static5h"]
CUDA_SCHEDULES = ["grid", "static7"]
CUTILE_TILES = Tiles(64, 128)
PASSES = ["dkdv", "dq"]
HEAD_DIMS = [64, 128]


def cutile_problem(causal: bool) -> Problem:
    """6 Q tiles; 3 (causal) or 4 K/V tiles, the last one partial; 2 query heads per K/V
    head. dK/dV: 12 or 16 items, dQ: 48; 5 persistent CTAs take 2 to 10 items each."""
    return Problem(B=2, H=4, H_kv=2, S_q=333, S_kv=333 if causal else 461, D=64,
                   causal=causal)


def cuda_problem(D: int, causal: bool) -> Problem:
    """K/V tiles of 128 keys: 9 per head; 2 query heads per K/V head; 288 dK/dV items."""
    return Problem(B=16, H=4, H_kv=2, S_q=1100 if causal else 1000, S_kv=1100, D=D,
                   causal=causal)


def _cutile_config(order: str, schedule: str):
    from kernels.host.backward import BackwardConfig, PassConfig
    pc = PassConfig(CUTILE_TILES, 1, 8, ScanOrder.parse(order), CtaSchedule.parse(schedule))
    return BackwardConfig(pc, pc, split=1)


def _inputs(pr: Problem, seed: int = 3):
    import torch

    from experiments.measurement.correctness import random_inputs
    q, k, v = random_inputs(pr, seed)
    gen = torch.Generator(device="cuda").manual_seed(seed + 7)
    dout = torch.randn(q.shape, generator=gen, device="cuda", dtype=q.dtype)
    return q, k, v, dout


def _reverses(order: str, schedule: str) -> bool:
    """Whether ``order`` reverses some item's scan under ``schedule``: the reverse order always,
    the sawtooth where a CTA takes several items (persistent)."""
    return order == "reverse" or (order == "sawtooth" and schedule != "grid")


def _check(got: np.ndarray, pg: PassGrid, schedule: CtaSchedule, order: str,
           reverses: bool) -> None:
    """``got`` is the spec's table, and then -1 in at least one more column; where the order
    ``reverses`` (``_reverses``) it prescribes something other than the linear scan here (so a
    kernel that never reverses fails)."""
    want = backward_visits(pg, schedule, ScanOrder.parse(order)).table()
    if reverses:
        linear = backward_visits(pg, schedule, ScanOrder.linear()).table()
        assert not np.array_equal(want, linear), "the case cannot tell the order from linear"
    assert got.shape[0] == want.shape[0], (got.shape, want.shape)
    assert got.shape[1] > want.shape[1], "no spare column in the record"
    assert (got[:, want.shape[1]:] == -1).all(), "the kernel visited more steps than the spec"
    np.testing.assert_array_equal(got[:, :want.shape[1]], want)


def _cutile_trace_jobs() -> list:
    return [(cutile_problem(c), _cutile_config(o, s), b)
            for b, o, s, c in itertools.product(PASSES, ORDERS, CUTILE_SCHEDULES, (False, True))]


def _warm_cuda_traces() -> None:
    from cuda_baseline.host.training import warm
    from spec.schedules import ScheduleKind
    warm([cuda_problem(d, c) for d in HEAD_DIMS for c in (False, True)], orders=ORDERS,
         schedules=(ScheduleKind.GRID, ScheduleKind.PERSISTENT), trace=True,
         jobs=_jobs())


def _jobs() -> int | None:
    """Compile processes: every core, or one after the runner's warm step (cache hits only)."""
    from tests.gpu.conftest import warmed
    return 1 if warmed() else None


def prewarm() -> list[str]:
    """Every trace build below (both families), compiled in parallel worker processes."""
    from kernels.host.warm import warm_backward_traces
    _warm_cuda_traces()
    return warm_backward_traces(_cutile_trace_jobs())


@pytest.fixture(scope="module")
def cutile_traces():
    """Every cuTile trace build below, compiled in parallel worker processes first (skipped
    after the runner's warm step: the launches then load from the disk cache)."""
    from kernels.host.warm import warm_backward_traces
    from tests.gpu.conftest import warmed
    if not warmed():
        for e in warm_backward_traces(_cutile_trace_jobs()):   # the test will say why
            print("precompile:", e)


@pytest.fixture(scope="module")
def cuda_traces():
    """Every CUDA trace build below and the training forwards, compiled in parallel first (a
    CuPy disk-cache hit each after the runner's warm step)."""
    _warm_cuda_traces()


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("schedule", CUTILE_SCHEDULES)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("bwd", PASSES)
def test_cutile_backward_trace_equals_spec(cutile_traces, bwd, order, schedule, causal):
    from kernels.host import backend, backward
    pr = cutile_problem(causal)
    q, k, v, dout = _inputs(pr)
    lse = backward.stat_buffer(q)
    out = backend.attention(q, k, v, causal=causal, lse=lse)
    tr = backward.trace_backward(bwd, dout, q, k, v, out, lse, causal=causal,
                                 config=_cutile_config(order, schedule))
    assert tr["tiles"] == CUTILE_TILES and tr["split"] == 1
    _check(tr["visits"], PassGrid(pr, CUTILE_TILES, bwd, 1), CtaSchedule.parse(schedule), order,
           _reverses(order, schedule))


@pytest.mark.parametrize("D", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("schedule", CUDA_SCHEDULES)
@pytest.mark.parametrize("order", ORDERS)
def test_cuda_backward_trace_equals_spec(cuda_traces, order, schedule, causal, D):
    from cuda_baseline.host import training
    pr = cuda_problem(D, causal)
    q, k, v, dout = _inputs(pr)
    out, lse = training.forward(q, k, v, causal=causal)
    tr = training.trace_dkdv(dout, q, k, v, out, lse, causal=causal, order=order,
                             schedule=schedule)
    pl = tr["plan"]
    assert tr["build"].startswith("flash_bwd_dkdv_trace<"), tr["build"]
    _check(tr["visits"], PassGrid(pr, pl.instance.tiles, "dkdv", pl.n_chunks), tr["schedule"],
           order, _reverses(order, schedule))

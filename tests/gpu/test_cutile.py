"""GPU tests of the cuTile FlashAttention family (skipped without a GPU).

Every order × schedule × causal × D × dtype against the fp32 SDPA reference (the rule of
experiments/correctness.py: NaN never passes, outputs poisoned first, fresh seeded inputs, uneven
S and grouped-query heads included); changing only the CTA schedule is bitwise identical; the trace
build visits exactly what ``spec.visit_order`` prescribes; bad input gets a clear error.

Many variants compile here (about 1-3 s each); run with ``-n 12`` (pytest-xdist) on a GPU machine.
"""
from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest

from spec import Problem
from spec.backend import BadInput, UnsupportedVariant
from spec.orders import ScanOrder
from spec.problem import TileGrid, Tiles
from spec.schedules import CtaSchedule
from spec.trace import visit_order
from spec.variant import Backend, Variant

pytestmark = pytest.mark.gpu

ORDERS = ["linear", "sawtooth", "sawtooth2", "reverse", "blockparity"]
SCHEDULES = ["grid", "tile2", "static7", "static7h", "lpt7"]


def _seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def _setup(problem: Problem, seed: int):
    import torch

    from experiments.correctness import poisoned_like, random_inputs
    torch.cuda.synchronize()
    q, k, v = random_inputs(problem, seed)
    return q, k, v, poisoned_like(q)


def _tiles(problem: Problem) -> Tiles:
    from kernels.config import default_config
    from spec import arch
    a = arch.detect()
    return default_config(a.name, problem.D, problem.causal).tiles


def _variant(order: str, schedule: str, tiles: Tiles) -> Variant:
    return Variant(Backend.CUTILE, ScanOrder.parse(order), CtaSchedule.parse(schedule), tiles)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("order", ORDERS)
def test_matches_fp32_reference(order, schedule, causal, D, dtype):
    from experiments.correctness import check
    from kernels.backend import CutileBackend
    # uneven S (not a multiple of any tile), grouped-query heads, S_q != S_kv on odd cases
    s_q = 333 if D == 64 else 397
    s_kv = s_q if causal else s_q + 77
    problem = Problem(B=2, H=4, H_kv=2, S_q=s_q, S_kv=s_kv, D=D, dtype=dtype, causal=causal)
    q, k, v, out = _setup(problem, _seed(order, schedule, causal, D, dtype))
    be = CutileBackend()
    be.run(be.prepare(_variant(order, schedule, _tiles(problem)), problem), q, k, v, out)
    res = check(out, q, k, v, causal)
    assert res.passed, f"{order}/{schedule}/{problem.label}: {res}"


@pytest.mark.parametrize("order", ["linear", "reverse"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_schedule_alone_is_bitwise_identical(order, causal):
    """The schedule only moves work between CTAs: same order within each item -> same bits."""
    import torch

    from kernels.backend import CutileBackend
    problem = Problem(B=1, H=4, H_kv=1, S_q=1000, S_kv=1000, D=64, causal=causal)
    q, k, v, _ = _setup(problem, _seed("bitwise", order, causal))
    be = CutileBackend()
    outs = {}
    for s in SCHEDULES + ["static132", "tile3"]:
        out = torch.full_like(q, float("nan"))
        be.run(be.prepare(_variant(order, s, _tiles(problem)), problem), q, k, v, out)
        outs[s] = out
    torch.cuda.synchronize()
    ref = outs["grid"]
    assert not torch.isnan(ref).any()
    for s, o in outs.items():
        assert torch.equal(o.view(torch.int16), ref.view(torch.int16)), f"{s} differs from grid"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("schedule", SCHEDULES + ["tile3", "static5"])
@pytest.mark.parametrize("order", ORDERS + ["sawtooth3"])
def test_trace_equals_spec(order, schedule, causal):
    from kernels.backend import CutileBackend
    problem = Problem(B=2, H=2, H_kv=1, S_q=700, S_kv=700, D=64, causal=causal)
    tiles = _tiles(problem)
    q, k, v, out = _setup(problem, 1)
    be = CutileBackend()
    var = _variant(order, schedule, tiles)
    got = be.trace(be.prepare(var, problem), q, k, v, out)["visits"]
    want = visit_order(TileGrid(problem, tiles), var.schedule, var.order).table()
    assert got.shape[0] == want.shape[0]
    assert (got[:, want.shape[1]:] == -1).all(), "the kernel visited more steps than the spec"
    np.testing.assert_array_equal(got[:, :want.shape[1]], want)


# ------------------------------------------------------------------------------------------
# the user function and bad input
# ------------------------------------------------------------------------------------------
def test_attention_function_defaults_and_orders():
    import torch

    from experiments.correctness import check
    from kernels.backend import attention
    problem = Problem(B=1, H=8, H_kv=8, S_q=1500, S_kv=1500, D=128, causal=True)
    q, k, v, _ = _setup(problem, 7)
    for order, sched in itertools.product(["linear", "sawtooth"], [None, "lpt132", "tile2"]):
        out = attention(q, k, v, causal=True, order=order, schedule=sched)
        res = check(out, q, k, v, True)
        assert res.passed, f"{order}/{sched}: {res}"
    torch.cuda.synchronize()


def _t(*shape, dtype=None, device="cuda"):
    import torch
    return torch.randn(*shape, dtype=dtype or torch.float16, device=device)


def test_bad_input_messages():
    import torch

    from kernels.backend import attention
    q, k, v = _t(1, 2, 64, 64), _t(1, 2, 64, 64), _t(1, 2, 64, 64)
    cases = [
        ((q.cpu(), k, v), "cpu"),
        ((q.float(), k.float(), v.float()), "float32"),
        ((q, k.to(torch.bfloat16), v), "share one dtype"),
        ((q.transpose(2, 3), k, v), "contiguous"),
        ((q, _t(1, 2, 64, 32), _t(1, 2, 64, 32)), "disagree"),
        ((q, k, _t(1, 2, 65, 64)), "same shape"),
        ((_t(1, 3, 64, 64), k, v), "multiple of H_kv"),
        ((_t(1, 2, 64, 96), _t(1, 2, 64, 96), _t(1, 2, 64, 96)), "head dim 96"),
    ]
    for args, needle in cases:
        with pytest.raises(BadInput, match=needle):
            attention(*args)


def test_wrong_arch_is_named():
    from kernels.backend import attention
    from spec import arch
    present = arch.detect().name
    other = "b200" if present != "b200" else "h100"
    q = _t(1, 2, 64, 64)
    with pytest.raises(UnsupportedVariant, match=f"{other}.*present"):
        attention(q, q, q, arch=other)
    attention(q, q, q, arch=present)    # the present one is accepted


def test_tuning_ladder_levels_agree():
    import torch

    from experiments.correctness import check
    from kernels.backend import attention
    problem = Problem(B=1, H=4, S_q=777, D=64, causal=True)
    q, k, v, _ = _setup(problem, 11)
    for level in range(1, 7):
        out = attention(q, k, v, causal=True, order="sawtooth", schedule="static33", level=level)
        res = check(out, q, k, v, True)
        assert res.passed, f"level {level}: {res}"
    torch.cuda.synchronize()


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("order", ["reverse", "sawtooth", "blockparity"])
def test_backward_causal_with_tall_tiles(order, D, dtype):
    """TILE_M > TILE_N: a backward causal scan starts on tiles fully masked for some rows (the
    NaN trap of cutile-notes.md §0); the finite power-of-two mask keeps every row finite."""
    from experiments.correctness import check
    from kernels.backend import CutileBackend
    problem = Problem(B=1, H=4, H_kv=4, S_q=517, S_kv=517, D=D, dtype=dtype, causal=True)
    q, k, v, out = _setup(problem, _seed("tall", order, D, dtype))
    be = CutileBackend()
    var = Variant(Backend.CUTILE, ScanOrder.parse(order), CtaSchedule.parse("static5"),
                  Tiles(128, 64), 1)
    be.run(be.prepare(var, problem), q, k, v, out)
    res = check(out, q, k, v, True)
    assert res.passed, f"{order}/{problem.label}: {res}"

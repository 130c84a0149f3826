"""GPU tests of the cuTile FlashAttention family (skipped without a GPU).

Every order × schedule, and pairwise every other pair of causal, D and dtype, against the fp32 SDPA
reference (the rule of experiments/measurement/correctness.py: NaN never passes, outputs poisoned
first, fresh seeded inputs, uneven S and grouped-query heads included); changing only the CTA
schedule is bitwise identical; the trace build visits exactly what ``spec.visit_order`` prescribes;
bad input gets a clear error. Each shape class of kernels.rules.config (S_q != S_kv with causal
top-left aligned as SDPA's ``is_causal``, grouped query heads, uneven S, batched short, bf16)
through ``attention()``'s default configuration, against a reference whose mask is built explicitly.

The variants are module-level data: ``builds(arch)`` lists every (variant, problem, trace) each
test launches, and tests/gpu/conftest.py compiles them all in parallel before the first test.
"""
from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest

from spec import Arch, Problem
from spec.family import BadInput, UnsupportedVariant
from spec.orders import ScanOrder
from spec.problem import TileGrid, Tiles
from spec.schedules import CtaSchedule
from spec.trace import visit_order
from spec.variant import Backend, Variant
from tests.pairwise import pairwise

pytestmark = pytest.mark.gpu

ORDERS = ["linear", "sawtooth", "sawtooth2", "reverse", "blockparity"]
# glpt3 (a short last section) and snake7 (odd rounds dealt in reverse): the default schedules
# of kernels/rules/configs/h100.json besides grid, persistent and lpt
SCHEDULES = ["grid", "tile2", "static7", "static7h", "lpt7", "glpt3", "snake7"]
DTYPES = ["fp16", "bf16"]
HEAD_DIMS = [64, 128]
BITWISE_ORDERS = ["linear", "reverse"]
# glpt3: a short last section; snake7: odd rounds dealt in reverse
BITWISE_SCHEDULES = SCHEDULES + ["static132", "tile3"]
TRACE_ORDERS = ORDERS + ["sawtooth3"]
TRACE_SCHEDULES = SCHEDULES + ["tile3", "static5", "snake5"]
TALL_ORDERS = ["reverse", "sawtooth", "blockparity"]
TALL = Tiles(128, 64)
ATTENTION_CALLS = list(itertools.product(["linear", "sawtooth"], [None, "lpt132", "tile2"]))
# The reference matrix and the trace matrix are pairwise (tests/pairwise.py): every order meets
# every schedule (the full order x schedule product, 35 and 60 builds) and every value of each
# other axis meets every value of every other axis at least once.
REFERENCE_CASES = pairwise([ORDERS, SCHEDULES, (False, True), HEAD_DIMS, DTYPES])
TRACE_CASES = pairwise([TRACE_ORDERS, TRACE_SCHEDULES, (False, True)])


def _case_id(*vals) -> str:
    return "-".join({False: "full", True: "causal"}.get(v, str(v)) if isinstance(v, bool)
                    else str(v) for v in vals)
LADDER_LEVELS = range(1, 7)


def problem(D: int, causal: bool, dtype: str = "fp16") -> Problem:
    """The correctness problem: uneven S (not a multiple of any tile), grouped-query heads,
    S_q != S_kv when not causal."""
    s_q = 333 if D == 64 else 397
    return Problem(B=2, H=4, H_kv=2, S_q=s_q, S_kv=s_q if causal else s_q + 77, D=D,
                   dtype=dtype, causal=causal)


def trace_problem(causal: bool) -> Problem:
    return Problem(B=2, H=2, H_kv=1, S_q=700, S_kv=700, D=64, causal=causal)


def tall_problem(D: int, dtype: str) -> Problem:
    return Problem(B=1, H=4, H_kv=4, S_q=517, S_kv=517, D=D, dtype=dtype, causal=True)


ATTENTION_PROBLEM = Problem(B=1, H=8, H_kv=8, S_q=1500, S_kv=1500, D=128, causal=True)


def shape_class_problems() -> list[Problem]:
    """One or more small problems per shape class (kernels.rules.config.shape_class), both head
    dims: cross (fewer and more queries than keys, causal), GQA (bf16, uneven S), small (one wave of
    Q tiles, fp16 and bf16), uneven (a batch), batched short (causal and not, bf16 and fp16)."""
    out = []
    for D in HEAD_DIMS:
        out += [Problem(B=1, H=4, S_q=200, S_kv=700, D=D, causal=True),
                Problem(B=1, H=4, S_q=700, S_kv=300, D=D, dtype="bf16", causal=True),
                Problem(B=2, H=8, H_kv=2, S_q=1000, S_kv=1000, D=D, dtype="bf16", causal=True),
                Problem(B=1, H=4, S_q=1000, S_kv=1000, D=D, causal=True),
                Problem(B=2, H=8, S_q=1000, S_kv=1000, D=D, dtype="bf16", causal=True),
                Problem(B=3, H=8, S_q=1000, S_kv=1000, D=D, causal=True),
                Problem(B=12, H=4, S_q=512, S_kv=512, D=D, dtype="bf16", causal=False),
                Problem(B=12, H=4, S_q=512, S_kv=512, D=D, causal=True)]
    return out


SHAPE_CLASS_PROBLEMS = shape_class_problems()
LADDER_PROBLEM = Problem(B=1, H=4, S_q=777, D=64, causal=True)
SMALL_PROBLEM = Problem(B=1, H=2, S_q=64, D=64)          # test_wrong_arch_is_named


def _seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def _setup(problem: Problem, seed: int):
    import torch

    from experiments.measurement.correctness import poisoned_like, random_inputs
    torch.cuda.synchronize()
    q, k, v = random_inputs(problem, seed)
    return q, k, v, poisoned_like(q)


def _tiles(problem: Problem, arch: str | None = None) -> Tiles:
    from kernels.rules.config import default_config
    from spec import arch as registry
    return default_config(arch or registry.detect().name, problem.D, problem.causal).tiles


def _variant(order: str, schedule: str, tiles: Tiles, occupancy=None, level=None) -> Variant:
    return Variant(Backend.CUTILE, ScanOrder.parse(order), CtaSchedule.parse(schedule), tiles,
                   occupancy, level)


def _attention_variant(arch: Arch, pr: Problem, order: str, schedule: str | None,
                       level: int = 6) -> Variant:
    """The variant ``kernels.host.backend.attention`` launches for these arguments."""
    from kernels.host.backend import default_schedule
    from kernels.rules.choice import problem_config
    cfg = problem_config(arch.name, pr)
    sched = (default_schedule(pr, cfg, cfg.tiles, arch) if schedule is None
             else CtaSchedule.parse(schedule))
    return Variant(Backend.CUTILE, ScanOrder.parse(order), sched, cfg.tiles, None,
                   None if level == 6 else level)


def builds(arch: Arch) -> dict[str, list[tuple[Variant, Problem, bool]]]:
    """Per test: every (variant, problem, trace build?) it launches on ``arch``."""
    a = arch.name
    out = {
        "test_matches_fp32_reference": [
            (_variant(o, s, _tiles(p, a)), p, False)
            for o, s, c, d, dt in REFERENCE_CASES
            for p in [problem(d, c, dt)]],
        "test_schedule_alone_is_bitwise_identical": [
            (_variant(o, s, _tiles(p, a)), p, False)
            for o, c, s in itertools.product(BITWISE_ORDERS, (False, True), BITWISE_SCHEDULES)
            for p in [problem(64, c)]],
        "test_trace_equals_spec": [
            (_variant(o, s, _tiles(p, a)), p, True)
            for o, s, c in TRACE_CASES
            for p in [trace_problem(c)]],
        "test_attention_function_defaults_and_orders": [
            (_attention_variant(arch, ATTENTION_PROBLEM, o, s), ATTENTION_PROBLEM, False)
            for o, s in ATTENTION_CALLS],
        "test_occupancy_is_the_drivers_at_the_launch_size": [(OCC_VARIANT, OCC_PROBLEM, False)],
        "test_wrong_arch_is_named": [
            (_attention_variant(arch, SMALL_PROBLEM, "linear", None), SMALL_PROBLEM, False)],
        "test_tuning_ladder_levels_agree": [
            (_attention_variant(arch, LADDER_PROBLEM, "sawtooth", "static33", lv),
             LADDER_PROBLEM, False) for lv in LADDER_LEVELS],
        "test_shape_classes_through_attention": [
            (_attention_variant(arch, p, "linear", None), p, False) for p in SHAPE_CLASS_PROBLEMS],
        "test_backward_causal_with_tall_tiles": [
            (_variant(o, "static5", TALL, 1), p, False)
            for o, d, dt in itertools.product(TALL_ORDERS, HEAD_DIMS, DTYPES)
            for p in [tall_problem(d, dt)]],
    }
    return out


@pytest.mark.parametrize("order,schedule,causal,D,dtype", REFERENCE_CASES,
                         ids=[_case_id(*c) for c in REFERENCE_CASES])
def test_matches_fp32_reference(order, schedule, causal, D, dtype):
    from experiments.measurement.correctness import check
    from kernels.host.backend import CutileFamily
    pr = problem(D, causal, dtype)
    q, k, v, out = _setup(pr, _seed(order, schedule, causal, D, dtype))
    fam = CutileFamily()
    fam.run(fam.prepare(_variant(order, schedule, _tiles(pr)), pr), q, k, v, out)
    res = check(out, q, k, v, causal)
    assert res.passed, f"{order}/{schedule}/{pr.label}: {res}"


@pytest.mark.parametrize("order", BITWISE_ORDERS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_schedule_alone_is_bitwise_identical(order, causal):
    """The schedule only moves work between CTAs: same order within each item -> same bits."""
    import torch

    from kernels.host.backend import CutileFamily
    pr = problem(64, causal)
    q, k, v, _ = _setup(pr, _seed("bitwise", order, causal))
    fam = CutileFamily()
    outs = {}
    for s in BITWISE_SCHEDULES:
        out = torch.full_like(q, float("nan"))
        fam.run(fam.prepare(_variant(order, s, _tiles(pr)), pr), q, k, v, out)
        outs[s] = out
    torch.cuda.synchronize()
    ref = outs["grid"]
    assert not torch.isnan(ref).any()
    for s, o in outs.items():
        assert torch.equal(o.view(torch.int16), ref.view(torch.int16)), f"{s} differs from grid"


@pytest.mark.parametrize("order,schedule,causal", TRACE_CASES,
                         ids=[_case_id(*c) for c in TRACE_CASES])
def test_trace_equals_spec(order, schedule, causal):
    from kernels.host.backend import CutileFamily
    pr = trace_problem(causal)
    tiles = _tiles(pr)
    q, k, v, out = _setup(pr, 1)
    fam = CutileFamily()
    var = _variant(order, schedule, tiles)
    got = fam.trace(fam.prepare(var, pr), q, k, v, out)["visits"]
    want = visit_order(TileGrid(pr, tiles), var.schedule, var.order).table()
    assert got.shape[0] == want.shape[0]
    assert (got[:, want.shape[1]:] == -1).all(), "the kernel visited more steps than the spec"
    np.testing.assert_array_equal(got[:, :want.shape[1]], want)


# ------------------------------------------------------------------------------------------
# the user function and bad input
# ------------------------------------------------------------------------------------------
def test_attention_function_defaults_and_orders():
    import torch

    from experiments.measurement.correctness import check, poisoned_like
    from kernels.host.backend import attention
    q, k, v, _ = _setup(ATTENTION_PROBLEM, 7)
    for order, sched in ATTENTION_CALLS:
        out = attention(q, k, v, causal=True, order=order, schedule=sched, out=poisoned_like(q))
        res = check(out, q, k, v, True)
        assert res.passed, f"{order}/{sched}: {res}"
    torch.cuda.synchronize()


def _t(*shape, dtype=None, device="cuda"):
    import torch
    return torch.randn(*shape, dtype=dtype or torch.float16, device=device)


def test_bad_input_messages():
    import torch

    from kernels.host.backend import attention
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


OCC_VARIANT = Variant(Backend.CUTILE, ScanOrder.linear(), CtaSchedule.tile_x(2), Tiles(64, 64), 2)
OCC_PROBLEM = Problem(B=8, H=1, S_q=2048, D=64)


def test_occupancy_is_the_drivers_at_the_launch_size():
    """The recorded CTAs per SM are the driver's occupancy at the CTA size the build launches
    with (the cubin's ``.reqntid``), which equals the count from its resources under the
    device's limits; for the sawtooth study's cuTile ``occ2`` build on sm_90 that is 256 threads
    and 2 per SM, what ncu shows (``profiles/h100/occupancy-20261125``), not the 1 the driver
    gives at the register-limited 512 threads."""
    from kernels.host.backend import CutileFamily
    from spec import arch
    from spec.family import device_limits
    prep = CutileFamily().prepare(OCC_VARIANT, OCC_PROBLEM)
    limits = device_limits(0)
    assert prep.ctas_per_sm == limits.ctas_per_sm(prep.threads, prep.registers, prep.smem_bytes)
    if arch.detect().sm == "sm_90":
        assert (prep.threads, prep.ctas_per_sm) == (256, 2)


def test_wrong_arch_is_named():
    from kernels.host.backend import attention
    from spec import arch
    present = arch.detect().name
    other = "b200" if present != "b200" else "h100"
    p = SMALL_PROBLEM
    q = _t(p.B, p.H, p.S_q, p.D)
    with pytest.raises(UnsupportedVariant, match=f"{other}.*present"):
        attention(q, q, q, arch=other)
    attention(q, q, q, arch=present)    # the present one is accepted


def test_tuning_ladder_levels_agree():
    import torch

    from experiments.measurement.correctness import check, poisoned_like
    from kernels.host.backend import attention
    q, k, v, _ = _setup(LADDER_PROBLEM, 11)
    for level in LADDER_LEVELS:
        out = attention(q, k, v, causal=True, order="sawtooth", schedule="static33", level=level,
                        out=poisoned_like(q))
        res = check(out, q, k, v, True)
        assert res.passed, f"level {level}: {res}"
    torch.cuda.synchronize()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("D", HEAD_DIMS)
@pytest.mark.parametrize("order", TALL_ORDERS)
def test_backward_causal_with_tall_tiles(order, D, dtype):
    """TILE_M > TILE_N: a backward causal scan starts on tiles fully masked for some rows (the
    NaN trap of cutile-notes.md §0); the finite power-of-two mask keeps every row finite."""
    from experiments.measurement.correctness import check
    from kernels.host.backend import CutileFamily
    pr = tall_problem(D, dtype)
    q, k, v, out = _setup(pr, _seed("tall", order, D, dtype))
    fam = CutileFamily()
    fam.run(fam.prepare(_variant(order, "static5", TALL, 1), pr), q, k, v, out)
    res = check(out, q, k, v, True)
    assert res.passed, f"{order}/{pr.label}: {res}"


# ------------------------------------------------------------------------------------------
# shape classes through the user function
# ------------------------------------------------------------------------------------------
def _top_left_reference(q, k, v, causal: bool):
    """fp32 attention with an explicit mask: query row r sees keys 0..r (top-left aligned, which
    the PyTorch docs give as ``is_causal``'s meaning: ``causal_upper_left``), K/V heads expanded
    for grouped queries. Independent of how any SDPA backend reads ``is_causal``."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    g = q.shape[1] // k.shape[1]
    k, v = k.float().repeat_interleave(g, dim=1), v.float().repeat_interleave(g, dim=1)
    mask = None
    if causal:
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
    with sdpa_kernel([SDPBackend.MATH]):
        return F.scaled_dot_product_attention(q.float(), k, v, attn_mask=mask)


@pytest.mark.parametrize("pr", SHAPE_CLASS_PROBLEMS, ids=lambda p: p.label)
def test_shape_classes_through_attention(pr):
    """``attention()`` with its default configuration for the problem's class matches the
    explicitly masked reference; where S_q != S_kv, SDPA's own ``is_causal`` (the reference of
    the correctness gate and of the peers) is checked to be that same top-left mask."""
    import torch

    from experiments.measurement.correctness import check, poisoned_like, reference
    from kernels.host.backend import attention
    from kernels.rules.config import shape_class
    q, k, v, _ = _setup(pr, _seed("shape-class", pr.label))
    ref = _top_left_reference(q, k, v, pr.causal)
    if pr.S_q != pr.S_kv:
        torch.testing.assert_close(reference(q, k, v, pr.causal), ref, atol=1e-4, rtol=1e-4)
    out = attention(q, k, v, causal=pr.causal, out=poisoned_like(q))
    res = check(out, q, k, v, pr.causal, ref)
    # SDPA's own error sets the tolerance: it must be an error, not a different mask
    assert res.peer_err < 0.05, f"SDPA at {pr.dtype.value} is off by {res.peer_err}"
    assert res.passed, f"{shape_class(pr).value} {pr.label}: {res}"

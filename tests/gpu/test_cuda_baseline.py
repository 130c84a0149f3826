"""GPU tests of the raw CUDA FlashAttention family (skipped without a GPU).

Every order × schedule × causal × D against the fp32 SDPA reference at 64×64 tiles, and at every
other tested tile every order (grid launch) and every schedule (sawtooth order); in bf16 every
schedule at 64×64 and every order at 128×64; causal with fewer and with more queries than keys
(top-left aligned) for every case of the matrix (the rule of experiments/measurement/correctness.py:
NaN never passes, outputs poisoned first, fresh seeded inputs, uneven S and grouped-query heads
included); schedule-only changes are bitwise identical (and the
sawtooth equals the linear or reverse scan tile by tile); the trace build visits exactly what
``spec.visit_order`` prescribes; P = 1 and P = all resident CTAs are correct; bad input gets a
clear error before any launch. Every K/V pipeline depth other than the default (1, 3) computes
bit for bit what the double buffer computes (the depth changes when tiles arrive, never the
arithmetic) and its trace build visits what the spec prescribes.

The variants are module-level data: ``builds(arch)`` lists every instantiation the tests launch,
and tests/gpu/conftest.py compiles them all in parallel before the first test.
"""
from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest

from spec import Arch, Problem
from spec.family import BadInput, UnsupportedVariant
from spec.orders import ScanOrder
from spec.problem import DType, TileGrid, Tiles
from spec.schedules import CtaSchedule
from spec.trace import visit_order
from spec.variant import Backend, Variant

pytestmark = pytest.mark.gpu

ORDERS = ["linear", "sawtooth", "sawtooth2", "reverse", "blockparity"]
SCHEDULES = ["grid", "tile2", "static7", "static7h", "snake7", "lpt7",
             "glpt3"]   # glpt3: short last section
FULL_TILES = Tiles(64, 64)                 # every order x schedule; also the trace tiles
TILES = [FULL_TILES, Tiles(80, 80), Tiles(128, 64), Tiles(128, 128)]
HEAD_DIMS = [64, 128]
# bf16: every schedule (sawtooth order) at 64x64 and every order (grid launch) at 128x64, the
# attention() default tile of causal and D=64 problems
BF16_CASES = list(dict.fromkeys([("sawtooth", s, FULL_TILES) for s in SCHEDULES]
                                + [(o, "grid", Tiles(128, 64)) for o in ORDERS]))
# causal with S_q != S_kv (top-left aligned: query row r sees keys 0..r), fewer and more
# queries than keys; the instantiations are the fp16 matrix's (lengths are run-time arguments)
CROSS_LENGTHS = [(389, 517), (517, 301)]
# K/V pipeline depths other than the default: the miss-cost study's builds (80x80, persistent,
# linear and sawtooth) and the grid / tile-X kernels at 64x64 (cuda_baseline.build.source
# stage_instances, compiled in CI); P = 7 gives every CTA several work items.
STAGES = [1, 3, 4]
STAGE_CASES = [("linear", "static7", Tiles(80, 80)), ("sawtooth", "static7", Tiles(80, 80)),
               ("sawtooth", "grid", FULL_TILES), ("sawtooth", "tile2", FULL_TILES)]


def pairs(tiles: Tiles) -> list[tuple[str, str]]:
    """(order, schedule) pairs tested at ``tiles``: all of them at FULL_TILES; elsewhere every
    order with the grid launch and every schedule with the sawtooth order (the tile shape
    changes the index arithmetic of each, not how they combine: that is FULL_TILES' job)."""
    if tiles == FULL_TILES:
        return list(itertools.product(ORDERS, SCHEDULES))
    return list(dict.fromkeys([(o, "grid") for o in ORDERS] + [("sawtooth", s) for s in SCHEDULES]))


CASES = [(o, s, t) for t in TILES for o, s in pairs(t)]


def _problem(D: int, causal: bool, dtype=DType.FP16, lengths: tuple[int, int] | None = None
             ) -> Problem:
    # uneven S (not a multiple of any tile), S_kv != S_q, grouped-query heads
    s_q, s_kv = lengths or (389, 389 if causal else 301)
    return Problem(B=2, H=4, S_q=s_q, S_kv=s_kv, D=D, H_kv=2, dtype=dtype, causal=causal)


def _variant(order: str, schedule: str, tiles: Tiles, stages: int | None = None) -> Variant:
    return Variant(Backend.CUDA, ScanOrder.parse(order), CtaSchedule.parse(schedule), tiles,
                   stages=stages)


def builds(arch: Arch) -> dict[str, list[tuple[Variant, Problem, bool]]]:
    """Per test: every (variant, problem, trace build?) it launches (one instantiation each;
    the persistent P and the occupancy checks reuse these instantiations)."""
    grid = list(itertools.product(HEAD_DIMS, (False, True)))
    plain = [(_variant(o, s, t), _problem(d, c), False) for d, c in grid for o, s, t in CASES]
    return {
        "test_matches_reference": plain,
        "test_schedule_only_changes_are_bitwise_identical": plain,
        "test_persistent_extremes": [(_variant(o, "static1", FULL_TILES), _problem(d, c), False)
                                     for d, c in grid for o in ("linear", "sawtooth")],
        "test_occupancy_matches_the_driver": [
            (_variant(o, s, t), _problem(d, False), False) for d in HEAD_DIMS for t in TILES
            for o, s in (("linear", "grid"), ("sawtooth", "static1"))],
        "test_bf16": [(_variant(o, s, t), _problem(d, c, DType.BF16), False)
                      for d, c in grid for o, s, t in BF16_CASES],
        "test_causal_with_other_key_length": [
            (_variant(o, s, t), _problem(d, True, lengths=n), False)
            for d in HEAD_DIMS for o, s, t in CASES for n in CROSS_LENGTHS],
        "test_trace_equals_spec": [(_variant(o, s, FULL_TILES), _problem(d, c), True)
                                   for d, c in grid for o, s in pairs(FULL_TILES)],
        "test_stage_depths_are_bitwise_the_double_buffer": [
            (_variant(o, s, t, st), _problem(d, c), False)
            for d, c in grid for o, s, t in STAGE_CASES for st in STAGES + [None]],
        "test_default_attention_matches_reference": [
            (_default_variant(prob, arch), prob, False) for prob in _default_problems()],
        "test_stage_trace_equals_spec": [
            (_variant(o, s, t, st), _problem(d, c), True)
            for d, c in grid for o, s, t in STAGE_CASES[:2] for st in STAGES],
    }


def _default_problems() -> list[Problem]:
    """attention()'s defaults: grid (full) and longest first (causal), here with several LPT
    rounds (512 work items of 128 x 64 tiles over at most 264 CTAs) and with fewer items than
    CTAs (the uneven GQA problem)."""
    return [Problem(B=1, H=16, S_q=4096, D=d, causal=c) for d in HEAD_DIMS for c in (False, True)] \
        + [_problem(d, True) for d in HEAD_DIMS]


def _default_variant(problem: Problem, arch: Arch) -> Variant:
    from cuda_baseline.host.backend import default_schedule, default_tiles
    tiles = default_tiles(problem, arch)
    return Variant(Backend.CUDA, ScanOrder.linear(), default_schedule(problem, tiles, arch), tiles)


@pytest.fixture(scope="session")
def backend():
    from cuda_baseline.host.backend import CudaFamily
    return CudaFamily()


_CASES: dict = {}


def _case(problem: Problem):
    """Inputs, fp32 reference and the check closure of a problem (shared across variants)."""
    import torch

    from experiments.measurement.correctness import check, random_inputs, reference
    if problem not in _CASES:
        seed = zlib.crc32(problem.label.encode())
        q, k, v = random_inputs(problem, seed)
        ref = reference(q, k, v, problem.causal)
        _CASES[problem] = (q, k, v, ref)
    q, k, v, ref = _CASES[problem]
    return q, k, v, (lambda out: check(out, q, k, v, problem.causal, ref=ref)), torch


def _run(backend, variant: Variant, problem: Problem):
    from experiments.measurement.correctness import poisoned_like
    q, k, v, chk, torch = _case(problem)
    out = poisoned_like(q)
    p = backend.prepare(variant, problem)
    backend.run(p, q, k, v, out)
    torch.cuda.synchronize()
    return out, chk(out), p


@pytest.mark.parametrize("D", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("order, schedule, tiles", CASES,
                         ids=[f"{o}-{s}-{t.label}" for o, s, t in CASES])
def test_matches_reference(backend, order, schedule, tiles, causal, D):
    out, res, p = _run(backend, _variant(order, schedule, tiles), _problem(D, causal))
    assert res.passed, f"{p.id} on {p.problem.label}: {res}"


@pytest.mark.parametrize("D", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("order, schedule, tiles", BF16_CASES,
                         ids=[f"{o}-{s}-{t.label}" for o, s, t in BF16_CASES])
def test_bf16(backend, order, schedule, tiles, causal, D):
    out, res, p = _run(backend, _variant(order, schedule, tiles), _problem(D, causal, DType.BF16))
    assert res.passed, f"{p.id}: {res}"


@pytest.mark.parametrize("D", HEAD_DIMS)
@pytest.mark.parametrize("lengths", CROSS_LENGTHS, ids=lambda n: f"q{n[0]}kv{n[1]}")
@pytest.mark.parametrize("order, schedule, tiles", CASES,
                         ids=[f"{o}-{s}-{t.label}" for o, s, t in CASES])
def test_causal_with_other_key_length(backend, order, schedule, tiles, lengths, D):
    """Causal attention with S_q != S_kv, top-left aligned like SDPA's ``is_causal`` (the
    reference): rows past S_kv see every key, and with S_kv > S_q the keys past S_q are never
    seen."""
    pr = _problem(D, True, lengths=lengths)
    out, res, p = _run(backend, _variant(order, schedule, tiles), pr)
    assert res.passed, f"{p.id} on {pr.label}: {res}"


@pytest.mark.parametrize("D", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("tiles", TILES, ids=lambda t: t.label)
def test_schedule_only_changes_are_bitwise_identical(backend, tiles, causal, D):
    """Linear and reverse scans: every schedule gives the same bits. Sawtooth and block-parity:
    each Q tile equals, bit for bit, the linear or the reverse result, as its direction says."""
    import torch
    pr = _problem(D, causal)
    g = TileGrid(pr, tiles)
    base = {o: _run(backend, _variant(o, "grid", tiles), pr)[0] for o in ("linear", "reverse")}
    for order, sched in pairs(tiles):
        out = _run(backend, _variant(order, sched, tiles), pr)[0]
        so, cs = ScanOrder.parse(order), CtaSchedule.parse(sched)
        wi = cs.work_items(g)
        back = so.reversed_for(wi.iter, wi.cta)
        for bh, qt, rev in zip(wi.bh, wi.q, back):
            b, h = divmod(int(bh), pr.H)
            rows = slice(int(qt) * tiles.m, (int(qt) + 1) * tiles.m)
            want = base["reverse" if rev else "linear"][b, h, rows]
            assert torch.equal(out[b, h, rows], want), \
                f"{order}/{sched} {tiles.label} q_tile {qt} of b{b}h{h} differs from " \
                f"{'reverse' if rev else 'linear'}/grid"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D", HEAD_DIMS)
def test_persistent_extremes(backend, causal, D):
    """P = 1 (one CTA does everything) and P = every resident CTA are both correct."""
    pr = _problem(D, causal)
    ps = [backend.prepare(_variant(o, "static1", FULL_TILES), pr) for o in ("linear", "sawtooth")]
    resident = min(p.resident_ctas for p in ps)
    num_sms = resident // min(p.ctas_per_sm for p in ps)
    for p_ctas in (1, num_sms, resident):
        for order in ("linear", "sawtooth"):
            out, res, p = _run(backend, _variant(order, f"static{p_ctas}", FULL_TILES), pr)
            assert res.passed, f"P={p_ctas} {order}: {res}"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D", HEAD_DIMS)
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("order", ORDERS)
def test_trace_equals_spec(backend, order, schedule, D, causal):
    from experiments.measurement.correctness import poisoned_like
    pr = _problem(D, causal)
    var = _variant(order, schedule, FULL_TILES)
    q, k, v, chk, torch = _case(pr)
    p = backend.prepare(var, pr)
    out = poisoned_like(q)
    tr = backend.trace(p, q, k, v, out)
    want = visit_order(TileGrid(pr, var.tiles), var.schedule, var.order).table()
    assert tr["visits"].shape == want.shape, (tr["visits"].shape, want.shape)
    np.testing.assert_array_equal(tr["visits"], want)
    ns = tr["time_ns"]
    valid = ns >= 0
    assert (valid == (want[:, :, 0] >= 0)).all()
    for row, ok in zip(ns, valid):   # the timer never runs backwards within a CTA
        assert (np.diff(row[ok]) >= 0).all()
    assert chk(out).passed, "the trace build computes the same attention"


@pytest.mark.parametrize("D", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("stages", STAGES)
@pytest.mark.parametrize("order, schedule, tiles", STAGE_CASES,
                         ids=[f"{o}-{s}-{t.label}" for o, s, t in STAGE_CASES])
def test_stage_depths_are_bitwise_the_double_buffer(backend, order, schedule, tiles, stages,
                                                    causal, D):
    import torch
    pr = _problem(D, causal)
    out, res, p = _run(backend, _variant(order, schedule, tiles, stages), pr)
    assert res.passed, f"{p.id} on {pr.label}: {res}"
    assert p.build.startswith("flash_fwd_staged<") and p.build.endswith(f", {stages}>")
    base = _run(backend, _variant(order, schedule, tiles), pr)[0]
    assert torch.equal(out, base), f"{p.id} differs from the double-buffered build"


@pytest.mark.parametrize("D", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("stages", STAGES)
@pytest.mark.parametrize("order", ["linear", "sawtooth"])
def test_stage_trace_equals_spec(backend, order, stages, causal, D):
    from experiments.measurement.correctness import poisoned_like
    pr = _problem(D, causal)
    var = _variant(order, "static7", Tiles(80, 80), stages)
    q, k, v, chk, torch = _case(pr)
    p = backend.prepare(var, pr)
    out = poisoned_like(q)
    tr = backend.trace(p, q, k, v, out)
    assert tr["build"].endswith(f"true, {stages}>"), tr["build"]
    want = visit_order(TileGrid(pr, var.tiles), var.schedule, var.order).table()
    np.testing.assert_array_equal(tr["visits"], want)
    assert len(set(tr["smid"].tolist())) >= 1 and (tr["smid"] >= 0).all()
    assert chk(out).passed, "the trace build computes the same attention"


@pytest.mark.parametrize("problem", _default_problems(), ids=lambda p: p.label)
def test_default_attention_matches_reference(problem):
    """``attention()`` with its default schedule (LPT for causal) on a poisoned output."""
    import torch

    from cuda_baseline import attention
    from experiments.measurement.correctness import poisoned_like
    q, k, v, chk, _ = _case(problem)
    out = attention(q, k, v, causal=problem.causal, out=poisoned_like(q))
    torch.cuda.synchronize()
    verdict = chk(out)
    assert verdict.passed, verdict


# -- bad input -------------------------------------------------------------------------------

def _tensors(shape=(1, 2, 128, 64), dtype="float16", device="cuda"):
    import torch
    dt = getattr(torch, dtype)
    return [torch.randn(*shape, dtype=dt, device=device) for _ in range(3)]


def test_bad_input_is_rejected_before_launch():
    import torch

    from cuda_baseline import attention
    q, k, v = _tensors(device="cpu")
    with pytest.raises(BadInput, match="cuda"):
        attention(q, k, v)
    q, k, v = _tensors(dtype="float32")
    with pytest.raises(BadInput, match="dtype"):
        attention(q, k, v)
    q, k, v = _tensors(shape=(1, 2, 128, 96))
    with pytest.raises(BadInput, match="head dim"):
        attention(q, k, v)
    q, k, v = _tensors()
    with pytest.raises(BadInput, match="4-D"):
        attention(q[0], k[0], v[0])
    with pytest.raises(UnsupportedVariant, match="shared memory"):
        attention(*_tensors(shape=(1, 1, 512, 128)), tiles=(256, 256))
    with pytest.raises(UnsupportedVariant, match="resident"):
        attention(q, k, v, schedule="static100000")
    padded = torch.randn(1, 2, 128, 66, dtype=torch.float16, device="cuda")[..., :64]
    with pytest.raises(BadInput, match="multiple of 8"):   # row stride 66: no 16-byte rows
        attention(padded, k, v)
    unaligned = torch.randn(2 * 128 * 64 + 1, dtype=torch.float16, device="cuda")[1:]
    with pytest.raises(BadInput, match="aligned"):         # an address off by 2 bytes
        attention(unaligned.view(1, 2, 128, 64), k, v)
    with pytest.raises(BadInput, match="prepared"):
        from cuda_baseline.host.backend import CudaFamily
        b = CudaFamily()
        p = b.prepare(_variant("linear", "grid", Tiles(64, 64)),
                      Problem(B=1, H=2, S_q=256, D=64))
        b.run(p, q, k, v, torch.empty_like(q))


def test_compile_error_names_the_instantiation():
    from cuda_baseline.build.source import Instance
    from cuda_baseline.host.backend import CompileError, _load
    from spec.orders import OrderKind
    from spec.schedules import ScheduleKind, WorkOrder
    bad = Instance(OrderKind.LINEAR, ScheduleKind.GRID, WorkOrder.Q_MAJOR, Tiles(64, 64), 96,
                   False, DType.FP16)
    with pytest.raises(CompileError, match=r"(?s)flash_fwd<.*96.*head dim 64 or 128"):
        _load([bad.name], 0)


@pytest.mark.parametrize("D", HEAD_DIMS)
@pytest.mark.parametrize("tiles", TILES, ids=lambda t: t.label)
def test_occupancy_matches_the_driver(backend, tiles, D):
    """The backend's CTAs-per-SM (which bounds P) equals
    cuOccupancyMaxActiveBlocksPerMultiprocessor."""
    import cupy
    for order, sched in (("linear", "grid"), ("sawtooth", "static1")):
        p = backend.prepare(_variant(order, sched, tiles), _problem(D, False))
        fn = p.kernel.kernel.ptr
        drv = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn, p.threads,
                                                                          p.smem_bytes)
        assert p.ctas_per_sm == drv, (p.id, p.registers, p.ctas_per_sm, drv)


@pytest.mark.parametrize("every", [3, 64])
@pytest.mark.parametrize("order", ["linear", "sawtooth"])
def test_sparse_trace_records_every_kth_step(backend, order, every):
    """``trace(..., every=k)`` records steps 0, k, 2k, ... of each CTA (the drift study's
    low-perturbation stamps): its visits are every k-th column of the spec's visit order, its
    stamps increase along each CTA, and the output is still right."""
    from experiments.measurement.correctness import poisoned_like
    pr = _problem(64, False)
    var = _variant(order, "static7", Tiles(80, 80), None)
    q, k, v, chk, torch = _case(pr)
    p = backend.prepare(var, pr)
    out = poisoned_like(q)
    tr = backend.trace(p, q, k, v, out, every=every)
    want = visit_order(TileGrid(pr, var.tiles), var.schedule, var.order).table()[:, ::every]
    assert tr["every"] == every
    np.testing.assert_array_equal(tr["visits"], want)
    t = tr["time_ns"]
    for c in range(t.shape[0]):
        row = t[c][t[c] >= 0]
        assert (np.diff(row) > 0).all()
    assert chk(out).passed

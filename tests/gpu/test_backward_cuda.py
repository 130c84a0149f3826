"""GPU tests of the CUDA twin's training support (``from cuda_baseline import attention``).

- Gradients of q, k, v against the fp32 reference (SDPA's math on upcast inputs) over the variant
  matrix (D 64 / 128, fp16 / bf16, causal / full, grouped and multi-query heads, unequal and
  uneven S_q / S_kv, one-row queries, a non-default scale, the backward's scan orders and
  schedules, the opt-in build options), fresh random inputs and output gradient, every buffer
  the forward and backward allocate (out, LSE, Δ, the fp32 dQ accumulator, the fp32 split
  partials, the gradients) filled with NaN at its allocation (tests/gpu/poison.py) and checked
  to hold no NaN afterwards. Tolerance per tensor: twice SDPA's own error at the input precision
  (its default backend, grouped heads expanded) plus ``ABS_TOL``; NaN never passes.
- No silent detached output: the output requires grad; ``out=`` or a build without a backward
  (``stages=1``) refuse in one line; the inference op called directly still differentiates.
- ``scale=``: forward and gradients match SDPA's; a scale <= 0 is refused in one line (the
  kernels rank scores by their raw maximum: ``spec.ops.resolve_scale``).
- ``torch.library.opcheck`` of the three operators.
- Training: the copy task (tests/gpu/training.py) reaches SDPA's loss in eager,
  ``torch.compile(fullgraph=True)`` and a captured CUDA graph; the detached control does not; one
  step's parameter gradients match SDPA's within bf16 tolerance.
"""
from __future__ import annotations

import zlib

import pytest

from spec import Problem
from spec.family import BadInput
from tests.gpu.poison import poisoned_allocations, unwritten

pytestmark = pytest.mark.gpu

ABS_TOL = 1e-3

MATRIX = [
    Problem(B=2, H=4, S_q=128, D=64),
    Problem(B=2, H=4, S_q=256, D=64, dtype="bf16", causal=True),
    Problem(B=1, H=4, H_kv=2, S_q=333, D=64, dtype="bf16", causal=True),
    Problem(B=1, H=8, H_kv=1, S_q=200, S_kv=457, D=128),
    Problem(B=2, H=4, H_kv=2, S_q=457, S_kv=200, D=128, dtype="bf16", causal=True),
    Problem(B=1, H=2, S_q=1, S_kv=77, D=64, causal=True),
    Problem(B=1, H=2, S_q=77, S_kv=1, D=128, dtype="bf16"),
    Problem(B=1, H=2, S_q=1000, D=128, dtype="bf16", causal=True),
    Problem(B=16, H=4, H_kv=2, S_q=1100, D=64, causal=False),     # whole group per work item
    Problem(B=1, H=6, H_kv=3, S_q=1025, S_kv=777, D=128, causal=False),
]
BACKWARDS = [("linear", None), ("sawtooth", "static16"), ("reverse", None)]
OPTIONS = ["onepart+dqsq", "onepart+dqsq+dqv4"]
"""Opt-in backward builds (``cuda_baseline.build.bwd_source.BwdOption``), checked on
``OPTION_MATRIX``: both head dims, causal and full, grouped heads, Q tiles cut by S_q (the
predicated dQ rows)."""
OPTION_MATRIX = [MATRIX[2], MATRIX[4], MATRIX[8], MATRIX[9]]


TASK = Problem(B=32, H=2, S_q=64, D=64, dtype="bf16", causal=True)   # training.Task's attention


def builds(arch):
    return {}


def _jobs() -> int | None:
    """Compile processes: every core, or one after the runner's warm step (cache hits only)."""
    from tests.gpu.conftest import warmed
    return 1 if warmed() else None


def prewarm() -> list[str]:
    """Every training forward and backward build the tests launch, compiled in parallel into
    CuPy's disk cache (and the forwards loaded here)."""
    from cuda_baseline.build.bwd_source import parse_bwd_options
    from cuda_baseline.host.training import warm
    from spec.schedules import ScheduleKind
    extra = [Problem(B=1, H=4, H_kv=2, S_q=300, D=64, dtype="bf16", causal=True),
             Problem(B=1, H=4, H_kv=2, S_q=130, D=64, causal=True),
             Problem(B=1, H=2, S_q=100, D=64), TASK]
    warm(MATRIX + extra, orders=[o for o, _ in BACKWARDS],
         schedules=(ScheduleKind.GRID, ScheduleKind.PERSISTENT), jobs=_jobs())
    for opts in OPTIONS:
        warm(OPTION_MATRIX, options=parse_bwd_options(opts), jobs=_jobs())
    return []


@pytest.fixture(scope="module", autouse=True)
def _compiled():
    """``prewarm()`` in this process (after the runner's warm step every build is a CuPy disk
    cache hit; the forwards' modules must still be loaded here)."""
    prewarm()


def _ids(p: Problem) -> str:
    return p.label


def _inputs(pr: Problem, seed: int):
    import torch

    from experiments.measurement.correctness import random_inputs
    q, k, v = random_inputs(pr, seed)
    gen = torch.Generator(device="cuda").manual_seed(seed + 7)
    dout = torch.randn(q.shape, generator=gen, device="cuda", dtype=q.dtype)
    return q, k, v, dout


def _grads(fn, q, k, v, dout, causal, scale=None):
    """(out, dq, dk, dv) of fn(q, k, v) on leaf copies of the inputs."""
    import torch
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out = fn(*leaves, causal=causal, scale=scale)
    dq, dk, dv = torch.autograd.grad(out, leaves, dout.to(out.dtype))
    return out.detach(), dq, dk, dv


def _sdpa(q, k, v, causal, scale=None):
    import torch.nn.functional as F
    g = q.shape[1] // k.shape[1]
    if g > 1:
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def _ref(q, k, v, causal, scale=None):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.MATH]):
        return _sdpa(q.float(), k.float(), v.float(), causal, scale)


def _peer(fn, *args):
    """SDPA at the input precision: its default backend, or (where that returns a non-finite
    value: the flash backend on a negative or zero scale) the memory-efficient / math one."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    got = fn(*args)
    if all(bool(torch.isfinite(t).all()) for t in got):
        return got
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        return fn(*args)


def _check_grads(pr: Problem, fn, seed: int, scale=None) -> list[str]:
    import torch
    q, k, v, dout = _inputs(pr, seed)
    ref = _grads(_ref, q, k, v, dout, pr.causal, scale)
    peer = _peer(_grads, _sdpa, q, k, v, dout, pr.causal, scale)
    _grads(fn, q, k, v, dout, pr.causal, scale)    # builds the cached launch set-ups first
    with poisoned_allocations() as made:     # every output and scratch buffer starts as NaN
        got = _grads(fn, q, k, v, dout, pr.causal, scale)
    assert len(made) >= 4, f"only {len(made)} poisoned allocations: the poisoning missed"
    bad = [f"left unwritten: {b}" for b in unwritten(made, pr.S_q)]
    for name, g, p, r in zip(("out", "dq", "dk", "dv"), got, peer, ref):
        assert g.shape == r.shape, (name, g.shape, r.shape)
        err = (g.float() - r).abs()
        e = float(torch.nan_to_num(err, nan=float("inf")).max())
        tol = 2 * float((p.float() - r).abs().max()) + ABS_TOL
        assert tol < float("inf"), (name, tol)   # a NaN tolerance would pass anything
        if torch.isnan(g).any() or not e <= tol:
            bad.append(f"{name}: max|err| {e:.3e} > tol {tol:.3e}")
    return bad


@pytest.mark.parametrize("order,bwd", BACKWARDS, ids=[o for o, _ in BACKWARDS])
@pytest.mark.parametrize("pr", MATRIX, ids=_ids)
def test_gradients_match_the_fp32_reference(pr, order, bwd):
    from cuda_baseline import attention

    def fn(q, k, v, causal, scale):
        return attention(q, k, v, causal=causal, scale=scale, order=order,
                         backward_schedule=bwd)
    bad = _check_grads(pr, fn, seed=zlib.crc32(f"{pr.label}{order}".encode()) % 1000)
    assert not bad, f"{pr.label} {order}/{bwd}: " + "; ".join(bad)


@pytest.mark.parametrize("opts", OPTIONS)
@pytest.mark.parametrize("pr", OPTION_MATRIX, ids=_ids)
def test_opt_in_backward_builds_match_the_fp32_reference(pr, opts):
    from cuda_baseline import attention

    def fn(q, k, v, causal, scale):
        return attention(q, k, v, causal=causal, scale=scale, backward_options=opts)
    bad = _check_grads(pr, fn, seed=zlib.crc32(f"{pr.label}{opts}".encode()) % 1000)
    assert not bad, f"{pr.label} {opts}: " + "; ".join(bad)


def test_unknown_backward_option_is_refused_at_the_forward():
    from cuda_baseline import attention
    q, k, v, _ = _inputs(Problem(B=1, H=2, S_q=64, D=64), 3)
    q.requires_grad_(True)
    with pytest.raises(BadInput, match="backward_options='fast'"):
        attention(q, k, v, backward_options="fast")


def test_scale_at_most_zero_is_refused_in_one_line():
    import torch

    from cuda_baseline import attention
    q, k, v, _ = _inputs(Problem(B=1, H=2, S_q=64, D=64), 2)
    for scale in (-0.5, 0.0, float("nan")):
        with pytest.raises(BadInput, match="scale="):
            attention(q, k, v, scale=scale)
        with pytest.raises(BadInput, match="scale="):
            attention(q.requires_grad_(True), k, v, scale=scale)
        q = q.detach()
    with torch.no_grad():
        assert torch.isfinite(attention(q, k, v, scale=2.0)).all()


@pytest.mark.parametrize("scale", [0.3, 2.0])
def test_scale_matches_sdpa(scale):
    from cuda_baseline import attention
    pr = Problem(B=1, H=4, H_kv=2, S_q=300, D=64, dtype="bf16", causal=True)

    def fn(q, k, v, causal, scale):
        return attention(q, k, v, causal=causal, scale=scale)
    bad = _check_grads(pr, fn, seed=11, scale=scale)
    assert not bad, f"scale={scale}: " + "; ".join(bad)
    import torch
    q, k, v, _ = _inputs(pr, 3)
    with torch.no_grad():   # the inference path takes scale= too
        out = attention(q, k, v, causal=True, scale=scale)
    ref = _ref(q, k, v, True, scale)
    peer = _peer(lambda *a: (_sdpa(*a),), q, k, v, True, scale)[0]
    tol = 2 * float((peer.float() - ref).abs().max()) + ABS_TOL
    assert tol < float("inf") and float((out.float() - ref).abs().max()) <= tol


def test_no_silent_detached_output():
    import torch

    from cuda_baseline import attention
    pr = Problem(B=1, H=2, S_q=100, D=64)
    q, k, v, _ = _inputs(pr, 5)
    q.requires_grad_(True)
    out = attention(q, k, v)
    assert out.requires_grad and out.grad_fn is not None
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all() and q.grad.abs().sum() > 0
    with pytest.raises(BadInput, match="out="):
        attention(q, k, v, out=torch.empty_like(q))
    with pytest.raises(BadInput, match="stages=1"):
        attention(q, k, v, stages=1)
    with torch.no_grad():
        assert not attention(q, k, v).requires_grad


def test_opcheck():
    import torch

    from cuda_baseline.host.op import CudaFront
    from spec.front import knob_text
    pr = Problem(B=1, H=4, H_kv=2, S_q=130, D=64, causal=True)
    q, k, v, dout = _inputs(pr, 9)
    req = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    knobs = knob_text(CudaFront.knobs)
    torch.library.opcheck(torch.ops.sawtooth.cuda_attention.default,
                          (*req, True, "linear", None, None, None, 0.125, True, "linear", None,
                           None, None, knobs))
    out, lse = torch.ops.sawtooth.cuda_attention(q, k, v, True, "linear", None, None, None,
                                                 0.125, True, "linear", None, None, None, knobs)
    torch.library.opcheck(torch.ops.sawtooth.cuda_attention_backward.default,
                          (dout, q, k, v, out, lse, True, 0.125, "linear", None, None, None,
                           knobs))
    torch.library.opcheck(torch.ops.sawtooth.cuda_attention.default,   # inference: no lse
                          (q, k, v, True, "linear", None, None, None, 0.125, False, "linear",
                           None, None, None, knobs))


@pytest.fixture(scope="module")
def sdpa_loss():
    from tests.gpu.training import final_loss, sdpa, train_copy_task
    return final_loss(train_copy_task(sdpa))


MARGIN = 0.1
"""A trained model's final loss may exceed SDPA's by this much (the chance loss is 4.16)."""


@pytest.mark.parametrize("mode", ["eager", "compile", "graph"])
def test_copy_task_trains_to_sdpa_loss(mode, sdpa_loss):
    from cuda_baseline import attention
    from tests.gpu.training import final_loss, train_copy_task
    loss = final_loss(train_copy_task(attention, mode=mode))
    print(f"copy task {mode}: cuda {loss:.4f}, SDPA eager {sdpa_loss:.4f}")
    assert loss <= sdpa_loss + MARGIN, (mode, loss, sdpa_loss)


def test_detached_control_fails_the_copy_task(sdpa_loss):
    from cuda_baseline import attention
    from tests.gpu.training import detached, final_loss, train_copy_task
    loss = final_loss(train_copy_task(detached(attention)))
    print(f"copy task detached control: {loss:.4f}, SDPA eager {sdpa_loss:.4f}")
    assert loss > sdpa_loss + MARGIN


def test_one_step_parameter_grads_match_sdpa():
    from cuda_baseline import attention
    from tests.gpu.training import grad_errors, one_step_grads, sdpa, sdpa_fp32
    ref = one_step_grads(sdpa_fp32)
    peer = grad_errors(one_step_grads(sdpa), ref)
    ours = grad_errors(one_step_grads(attention), ref)
    bad = {n: (e, peer[n]) for n, e in ours.items() if not e <= 2 * peer[n] + 1e-2}
    assert not bad, bad

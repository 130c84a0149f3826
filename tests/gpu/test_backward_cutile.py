"""GPU tests of the cuTile backward pass (skipped without a GPU): gradients as PyTorch expects them.

- Gradients of ``kernels.attention`` (autograd through ``sawtooth::cutile_attention``) against
  the fp32 reference (SDPA on upcast inputs, autograd), over the variant matrix (D 64/128,
  fp16/bf16, causal or not, GQA and MQA, uneven and unequal S_q/S_kv, a single partial tile,
  ``scale=``), fresh random inputs and output gradients per case; the tolerance is twice SDPA's own
  error at the input precision plus a small absolute term, NaN never passes. The same gradients
  from ``kernels.host.backward.attention_backward`` with the LSE and every buffer it allocates
  (Δ, the fp32 split partials, the gradients) NaN-poisoned (tests/gpu/poison.py): each
  overwritten, the gradients bitwise equal (dQ of the one-pass backward, whose sum across CTAs
  has no fixed order, within the tolerance). The matrix adds one problem per configuration the
  forward and backward rules can choose (tests/rule_witnesses.py).
- The one-pass backward (``BackwardConfig.one_pass``) on every problem of the matrix, causal
  ones and the group split included, its fp32 dQ sum poisoned too; under
  ``torch.use_deterministic_algorithms`` the default takes the two passes (bitwise repeatable)
  and an explicit one-pass configuration is refused in one line.
- Changing the backward's CTA schedule alone gives bitwise-identical gradients (dQ of the one
  pass: within the tolerance); changing its scan
  order (sawtooth, reverse) or summing a K/V head's query heads on chip instead of as fp32
  partial sums (the group split) changes rounding only.
- ``torch.library.opcheck`` of both operators; a differentiable output; ``out=`` and a level
  without a backward refuse grad in one line.
- Training (tests/gpu/training.py): a small LM's parameter gradients after one step equal the SDPA
  model's within bf16 tolerance, and the copy task trains to SDPA's loss eagerly, under
  ``torch.compile(fullgraph=True)`` and as one captured CUDA graph; the detached-attention control
  fails both checks.
"""
from __future__ import annotations

import math
import zlib

import pytest

from spec import Problem
from tests.gpu.poison import poisoned_allocations, unwritten
from tests.rule_witnesses import witnesses

pytestmark = pytest.mark.gpu

ABS = 1e-3

MATRIX = [
    Problem(B=2, H=4, S_q=256, D=64, dtype="fp16", causal=False),
    Problem(B=2, H=4, S_q=256, D=64, dtype="fp16", causal=True),
    Problem(B=1, H=4, S_q=384, D=128, dtype="bf16", causal=False),
    Problem(B=1, H=4, S_q=384, D=128, dtype="bf16", causal=True),
    Problem(B=2, H=8, H_kv=2, S_q=333, D=64, dtype="bf16", causal=True),        # GQA, uneven
    Problem(B=1, H=8, H_kv=1, S_q=200, D=128, dtype="fp16", causal=False),      # MQA, uneven
    Problem(B=1, H=4, S_q=200, S_kv=457, D=128, dtype="fp16", causal=False),    # S_q < S_kv
    Problem(B=1, H=4, S_q=200, S_kv=457, D=64, dtype="bf16", causal=True),
    Problem(B=1, H=2, S_q=300, S_kv=150, D=64, dtype="fp16", causal=True),      # S_q > S_kv
    Problem(B=3, H=2, S_q=17, D=64, dtype="bf16", causal=True),                 # one partial tile
    Problem(B=1, H=4, H_kv=2, S_q=1000, S_kv=1000, D=128, dtype="bf16", causal=True),
    Problem(B=4, H=16, H_kv=4, S_q=2048, D=64, dtype="fp16", causal=True),   # GQA, no split
    Problem(B=1, H=4, S_q=2100, D=64, dtype="bf16", causal=False),   # the default's WIDE one pass
]


def _rule_arch() -> str:
    from spec import detect
    present = detect()
    return present.name if present is not None else "h200"


RULE_MATRIX = witnesses(_rule_arch(), MATRIX)
"""One problem per (kernel, D, causal, configuration) the forward and backward rules can choose
that ``MATRIX`` does not already exercise (tests/rule_witnesses.py; audit G2)."""


def _ids(p: Problem) -> str:
    return p.label


def training_jobs() -> list:
    """The (problem, backward config or None: the default) training builds the tests launch."""
    from dataclasses import replace

    from kernels.host.backend import default_variant
    from spec import get_arch

    def config(p, order="linear", schedule=None):     # the backward half reads no arch
        return default_variant(p, get_arch("h100"), order=order, training=True,
                               backward_schedule=schedule).backward
    jobs = [(p, None) for p in MATRIX + RULE_MATRIX]
    jobs.append((MATRIX[4], replace(config(MATRIX[4]), split=1)))
    for p in (MATRIX[4], MATRIX[6]):
        jobs += [(p, config(p, o, s)) for o, s in (
            ("linear", "static7"), ("linear", "static5h"), ("sawtooth", "static7"),
            ("reverse", None), ("sawtooth2", "static5h"))]
    jobs += [(p, one_pass(p)) for p in MATRIX]
    jobs += [(p, default_variant(p, get_arch("h100"), training=True,
                                 backward_one_pass=True).backward) for p in MATRIX]
    return jobs


def one_pass(p: Problem):
    """The one-pass backward of ``p`` on ``BASE`` (the default's one pass at D=128)."""
    from kernels.host.backward import BASE, BackwardConfig
    return BackwardConfig(BASE, BASE, one_pass=True)


def _default_one_pass(p: Problem) -> bool:
    from kernels.host.backend import default_variant
    from spec import get_arch
    return default_variant(p, get_arch("h100"), training=True).backward.one_pass


def prewarm() -> list[str]:
    """Compile the training builds in parallel worker processes
    (``kernels.host.warm.warm_training``); the error lines."""
    from kernels.host.warm import warm_training
    return warm_training(training_jobs())


@pytest.fixture(scope="module", autouse=True)
def _precompiled():
    """The builds compiled first (skipped after the runner's warm step: every launch then loads
    from the disk cache); a miss only costs a compile at the first launch."""
    from tests.gpu.conftest import warmed
    if not warmed():
        for e in prewarm():     # the test that launches the build will say why
            print("precompile:", e)


def _inputs(pr: Problem, seed: int):
    import torch

    from experiments.measurement.correctness import random_inputs
    q, k, v = random_inputs(pr, seed)
    gen = torch.Generator(device="cuda").manual_seed(seed + 7)
    dout = torch.randn(q.shape, generator=gen, device="cuda", dtype=q.dtype)
    return q, k, v, dout


def _sdpa_grads(q, k, v, dout, causal, scale, fp32: bool):
    """SDPA's output and (dq, dk, dv) by autograd; grouped K/V heads expanded (autograd sums
    the group). ``fp32``: on upcast inputs, the reference."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    leaves = [t.detach().float() if fp32 else t.detach() for t in (q, k, v)]
    for t in leaves:
        t.requires_grad_(True)
    qq, kk, vv = leaves
    g = q.shape[1] // k.shape[1]
    if g > 1:
        kk, vv = kk.repeat_interleave(g, dim=1), vv.repeat_interleave(g, dim=1)
    backends = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH] if fp32 else \
        [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    with sdpa_kernel(backends):
        out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal, scale=scale)
    grads = torch.autograd.grad(out, leaves, dout.float() if fp32 else dout)
    return out.detach(), grads


def _check(name, got, ref, peer):
    """max|got − ref| ≤ 2·max|peer − ref| + ABS·max(1, max|ref|); NaN never passes."""
    import torch
    ref = ref.float()
    err = (got.float() - ref).abs()
    assert not torch.isnan(got).any(), f"{name}: NaN"
    peer_err = float((peer.float() - ref).abs().max())
    tol = 2 * peer_err + ABS * max(1.0, float(ref.abs().max()))
    worst = float(err.max())
    assert worst <= tol, f"{name}: max|err| {worst:.3e} > tol {tol:.3e} (SDPA's own {peer_err:.3e})"
    return worst, tol


def _attention_grads(pr, q, k, v, dout, scale=None):
    import torch

    from kernels import attention
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out = attention(*leaves, causal=pr.causal, scale=scale)
    assert out.requires_grad, "attention() returned a non-differentiable output"
    grads = torch.autograd.grad(out, leaves, dout)
    return out.detach(), grads


@pytest.mark.parametrize("pr", MATRIX + RULE_MATRIX, ids=_ids)
def test_gradients_match_reference(pr):
    import torch

    from kernels.host import backward
    q, k, v, dout = _inputs(pr, seed=zlib.crc32(pr.label.encode()) % 1000)
    out, grads = _attention_grads(pr, q, k, v, dout)
    ref_out, ref = _sdpa_grads(q, k, v, dout, pr.causal, None, fp32=True)
    peer_out, peer = _sdpa_grads(q, k, v, dout, pr.causal, None, fp32=False)
    _check("out", out, ref_out, peer_out)
    for name, g, r, p in zip(("dq", "dk", "dv"), grads, ref, peer):
        assert g.shape == r.shape, f"{name} shape {tuple(g.shape)} != {tuple(r.shape)}"
        _check(name, g, r, p)
    # the same kernels writing into NaN-poisoned buffers (the LSE, and every buffer the backward
    # allocates: Δ, the fp32 split partials, the gradients): every element written, same bits
    lse = backward.stat_buffer(q).fill_(float("nan"))
    from kernels.host import backend
    o2 = backend.attention(q, k, v, causal=pr.causal, lse=lse)
    assert not torch.isnan(lse).any(), "the forward left LSE elements unwritten"
    dq, dk, dv = _poisoned_backward(dout, q, k, v, o2, lse, causal=pr.causal)
    for name, a, b, r, p in zip(("dq", "dk", "dv"), (dq, dk, dv), grads, ref, peer):
        assert not torch.isnan(a).any(), f"{name}: an element was not written"
        if name == "dq" and _default_one_pass(pr):
            _check("direct dq", a, r, p)        # summed across CTAs in no fixed order
        else:
            assert torch.equal(a, b), f"{name}: the direct call differs from the autograd one"


def _poisoned_backward(dout, q, k, v, out, lse, **kw):
    """``attention_backward`` with every buffer it allocates poisoned (tests/gpu/poison.py),
    after one plain call that builds the launch; asserts each was overwritten."""
    from kernels.host import backward
    backward.attention_backward(dout, q, k, v, out, lse, **kw)
    with poisoned_allocations() as made:
        got = backward.attention_backward(dout, q, k, v, out, lse, **kw)
    assert len(made) >= 4, f"only {len(made)} poisoned allocations: the poisoning missed"
    bad = unwritten(made, q.shape[2])
    assert not bad, f"{kw}: left unwritten: {bad}"
    return got


@pytest.mark.parametrize("scale", [0.3, 0.05, 1.0])
def test_scale_matches_sdpa(scale):
    pr = Problem(B=1, H=4, H_kv=2, S_q=300, D=64, dtype="bf16", causal=True)
    q, k, v, dout = _inputs(pr, seed=11)
    out, grads = _attention_grads(pr, q, k, v, dout, scale=scale)
    ref_out, ref = _sdpa_grads(q, k, v, dout, True, scale, fp32=True)
    peer_out, peer = _sdpa_grads(q, k, v, dout, True, scale, fp32=False)
    _check("out", out, ref_out, peer_out)
    for name, g, r, p in zip(("dq", "dk", "dv"), grads, ref, peer):
        _check(name, g, r, p)


def test_scale_none_is_inverse_sqrt_d():
    import torch

    from kernels import attention
    pr = Problem(B=1, H=2, S_q=128, D=128, dtype="fp16", causal=False)
    q, k, v, _ = _inputs(pr, seed=3)
    assert torch.equal(attention(q, k, v), attention(q, k, v, scale=1 / math.sqrt(128)))


@pytest.mark.parametrize("pr", [MATRIX[4], MATRIX[6]], ids=_ids)
def test_backward_schedule_is_bitwise_and_order_rounds_only(pr):
    from kernels.host import backend, backward
    q, k, v, dout = _inputs(pr, seed=5)
    lse = backward.stat_buffer(q)
    out = backend.attention(q, k, v, causal=pr.causal, lse=lse)
    base = _poisoned_backward(dout, q, k, v, out, lse, causal=pr.causal)
    _, ref = _sdpa_grads(q, k, v, dout, pr.causal, None, fp32=True)
    _, peer = _sdpa_grads(q, k, v, dout, pr.causal, None, fp32=False)
    for sched in ("static7", "static5h"):
        got = _poisoned_backward(dout, q, k, v, out, lse, causal=pr.causal, schedule=sched)
        for name, a, b, r, p in zip(("dq", "dk", "dv"), got, base, ref, peer):
            if name == "dq" and _default_one_pass(pr):
                _check(f"{sched} dq", a, r, p)      # the one pass's dQ: no fixed order
            else:
                assert (a == b).all(), f"{sched}: {name} differs from the grid launch's"
    for order, sched in (("sawtooth", "static7"), ("reverse", None), ("sawtooth2", "static5h")):
        got = _poisoned_backward(dout, q, k, v, out, lse, causal=pr.causal, order=order,
                                 schedule=sched)
        for name, g, r, p in zip(("dq", "dk", "dv"), got, ref, peer):
            _check(f"{order}/{sched} {name}", g, r, p)
    if pr.H != pr.H_kv:     # the group's sum on chip (split 1) instead of fp32 partial sums
        from dataclasses import replace

        from kernels.host.backend import default_variant
        from spec import detect
        cfg = default_variant(pr, detect(), training=True).backward
        got = _poisoned_backward(dout, q, k, v, out, lse, causal=pr.causal,
                                 config=replace(cfg, split=1))
        for name, g, r, p in zip(("dq", "dk", "dv"), got, ref, peer):
            _check(f"split1 {name}", g, r, p)


@pytest.mark.parametrize("pr", MATRIX, ids=_ids)
def test_one_pass_matches_reference(pr):
    """The one pass on every matrix problem (causal, ragged, S_q ≠ S_kv, GQA/MQA with the group
    split), on ``BASE``, on the default's one-pass tiles (``WIDE`` at D=64) and on the tiles and
    hints the two passes' rule gives their dK/dV pass (64 x 64, two CTAs per SM at D=128
    causal), every buffer it allocates poisoned (its fp32 dQ
    sum must be zeroed by ``bwd_prep``)."""
    from dataclasses import replace

    from kernels.host import backend, backward
    from spec import get_arch
    q, k, v, dout = _inputs(pr, seed=zlib.crc32(pr.label.encode()) % 1000 + 1)
    lse = backward.stat_buffer(q)
    out = backend.attention(q, k, v, causal=pr.causal, lse=lse)
    _, ref = _sdpa_grads(q, k, v, dout, pr.causal, None, fp32=True)
    _, peer = _sdpa_grads(q, k, v, dout, pr.causal, None, fp32=False)
    two = backend.default_variant(pr, get_arch("h100"), training=True,
                                  backward_one_pass=False).backward
    forced = backend.default_variant(pr, get_arch("h100"), training=True,
                                     backward_one_pass=True).backward
    for cfg in dict.fromkeys((one_pass(pr), replace(two, one_pass=True), forced)):
        got = _poisoned_backward(dout, q, k, v, out, lse, causal=pr.causal, config=cfg)
        for name, g, r, p in zip(("dq", "dk", "dv"), got, ref, peer):
            _check(f"{cfg.label()} {name}", g, r, p)


def test_deterministic_mode_takes_the_two_passes():
    import torch

    from kernels.host import backend, backward
    from spec.family import UnsupportedVariant
    pr = MATRIX[2]                                  # D=128, no mask: the default's one pass
    assert _default_one_pass(pr)
    q, k, v, dout = _inputs(pr, seed=9)
    lse = backward.stat_buffer(q)
    out = backend.attention(q, k, v, causal=pr.causal, lse=lse)
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        a = backward.attention_backward(dout, q, k, v, out, lse, causal=pr.causal)
        b = backward.attention_backward(dout, q, k, v, out, lse, causal=pr.causal)
        assert all(torch.equal(x, y) for x, y in zip(a, b)), "deterministic mode: runs differ"
        with pytest.raises(UnsupportedVariant, match="one_pass=False") as e:
            backward.attention_backward(dout, q, k, v, out, lse, causal=pr.causal,
                                        config=one_pass(pr))
        assert "\n" not in str(e.value)
    finally:
        torch.use_deterministic_algorithms(was)


def test_unsupported_backward_schedule_is_one_line():
    from kernels.host import backend, backward
    from spec.family import UnsupportedVariant
    pr = MATRIX[0]
    q, k, v, dout = _inputs(pr, seed=1)
    lse = backward.stat_buffer(q)
    out = backend.attention(q, k, v, lse=lse)
    with pytest.raises(UnsupportedVariant, match="backward"):
        backward.attention_backward(dout, q, k, v, out, lse, causal=False, schedule="lpt8")


def test_opcheck():
    import torch

    from kernels.host.op import CutileFront  # registers the operators
    from spec.front import knob_text
    pr = Problem(B=1, H=4, H_kv=2, S_q=200, D=64, dtype="bf16", causal=True)
    q, k, v, dout = _inputs(pr, seed=2)
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    knobs = knob_text(CutileFront.knobs)
    args = (*leaves, True, "linear", None, None, None, None, True, "linear", None, None, None,
            knobs)
    torch.library.opcheck(torch.ops.sawtooth.cutile_attention.default, args)
    args = (*leaves, False, "sawtooth", None, None, None, 0.2, True, "linear", None, None, None,
            knobs)
    torch.library.opcheck(torch.ops.sawtooth.cutile_attention.default, args)
    out, lse = torch.ops.sawtooth.cutile_attention(q, k, v, True, "linear", None, None, None,
                                                   None, True, "linear", None, None, None, knobs)
    torch.library.opcheck(torch.ops.sawtooth.cutile_attention_backward.default,
                          (dout, q, k, v, out, lse, True, None, "linear", None, None, None,
                           knobs))


def test_refusals_are_one_line():
    import torch

    from kernels import attention
    from spec.family import BadInput, UnsupportedVariant
    pr = MATRIX[0]
    q, k, v, _ = _inputs(pr, seed=4)
    qg = q.detach().clone().requires_grad_(True)
    with pytest.raises(BadInput, match="out=") as e:
        attention(qg, k, v, out=torch.empty_like(q))
    assert "\n" not in str(e.value)
    with pytest.raises(UnsupportedVariant, match="level") as e:
        attention(qg, k, v, level=1)
    assert "\n" not in str(e.value)
    with torch.no_grad():           # no grad needed: out= and level 1 run
        attention(qg, k, v, out=torch.empty_like(q))
        attention(qg, k, v, level=1)
    for bad in (float("nan"), 0.0, -0.05, "0.1"):
        with pytest.raises(BadInput, match="scale") as e:
            attention(q, k, v, scale=bad)
        assert "\n" not in str(e.value)


# ------------------------------------------------------------------------------------------------
# training
# ------------------------------------------------------------------------------------------------
def _cutile(q, k, v, causal=True, scale=None):
    from kernels import attention
    return attention(q, k, v, causal=causal, scale=scale)


def _grads_pass(grads, ref, peer) -> tuple[bool, str]:
    """Each parameter: relative error to the fp32-attention model ≤ 2× the bf16 SDPA model's
    + 0.01."""
    from tests.gpu.training import grad_errors
    e, p = grad_errors(grads, ref), grad_errors(peer, ref)
    bad = {n: (e[n], p[n]) for n in e if not e[n] <= 2 * p[n] + 0.01}
    return not bad, ", ".join(f"{n}: {a:.3g} (SDPA {b:.3g})" for n, (a, b) in bad.items())


def test_one_step_parameter_gradients_equal_sdpa():
    from tests.gpu.training import detached, one_step_grads, sdpa, sdpa_fp32
    ref = one_step_grads(sdpa_fp32)
    peer = one_step_grads(sdpa)
    ok, why = _grads_pass(one_step_grads(_cutile), ref, peer)
    assert ok, f"parameter gradients differ from SDPA's: {why}"
    ok, _ = _grads_pass(one_step_grads(detached(_cutile)), ref, peer)
    assert not ok, "the detached-attention control passed: the check cannot fail"


@pytest.fixture(scope="module")
def sdpa_curve():
    from tests.gpu.training import sdpa, train_copy_task
    return train_copy_task(sdpa, steps=150)


def _trains_like(curve, ref_curve) -> bool:
    from tests.gpu.training import Task, final_loss
    return final_loss(curve) <= final_loss(ref_curve) + 0.1 and \
        final_loss(curve) < 0.25 * Task().chance_loss


@pytest.mark.parametrize("mode", ["eager", "compile", "graph"])
def test_copy_task_trains_to_sdpa_loss(mode, sdpa_curve):
    from tests.gpu.training import final_loss, train_copy_task
    assert final_loss(sdpa_curve) < 0.2, f"SDPA itself did not learn: {final_loss(sdpa_curve)}"
    curve = train_copy_task(_cutile, steps=150, mode=mode)
    assert _trains_like(curve, sdpa_curve), \
        f"{mode}: final loss {final_loss(curve):.3f}, SDPA {final_loss(sdpa_curve):.3f}"


def test_copy_task_detached_control_fails(sdpa_curve):
    from tests.gpu.training import detached, final_loss, train_copy_task
    curve = train_copy_task(detached(_cutile), steps=150)
    assert not _trains_like(curve, sdpa_curve), \
        f"the detached control trained (final {final_loss(curve):.3f}): the check cannot fail"

"""``kernels.attention``: the cuTile kernel as a PyTorch operator, for eager code, CUDA graphs and
``torch.compile(fullgraph=True)``.

    >>> import torch
    >>> from kernels import attention
    >>> q, k, v = (torch.randn(2, 8, 1000, 64, device="cuda", dtype=torch.bfloat16)
    ...            for _ in range(3))
    >>> out = attention(q, k, v, causal=True)               # eager: one lookup, one launch
    >>> out = torch.compile(lambda q, k, v: attention(q, k, v), fullgraph=True)(q, k, v)

Two ``torch.library.custom_op`` s, ``sawtooth::cutile_attention`` (returns a new tensor) and
``sawtooth::cutile_attention_out`` (writes ``out``), each with a fake implementation that checks the
tensors' metadata the way the eager path does (``spec.ops.check_metadata``, i.e.
``spec.family.problem_from_tensors``: the same one-line ``BadInput``) and describes the result
(``empty_like(q)``, the strides the eager path allocates). Under ``torch.compile`` the traced
program calls the operator, whose real implementation is the eager path of
``kernels.host.backend.attention``. Outside it ``attention()`` calls that eager path directly: the
dispatcher's own cost per call (argument parsing, the operator's Python wrapper) is what the
``hostpath`` study measures beside it, and it buys nothing when nothing traces the call. CUDA-graph
capture records the launch either way (it is one kernel on torch's current stream). Measured on an
H100 (profiles/h100/hostpath-20261126): 13.8-14.3 us of host time per eager call, 31 us through the
dispatcher, SDPA 18-21 us.

Training. ``sawtooth::cutile_attention`` returns (out, lse) and takes ``save_lse``: with it the
forward is the training build (``kernels.device.fmha.fmha_fwd_lse``), which also stores the
log-sum-exp; its autograd is registered (``torch.library.register_autograd``) and calls
``sawtooth::cutile_attention_backward`` (``kernels.host.backward``: Δ, dK/dV, dQ kernels).
``attention()`` asks for it when grad is enabled and q, k or v requires grad: under
``torch.compile`` through the operator, eagerly through ``_EagerAttention`` (an
``autograd.Function`` with the same forward and backward, without the dispatcher's cost).
``out=`` and a tuning-ladder level below 2 have no backward and say so in one line when a
gradient is required; ``scale`` is SDPA's ``scale=`` (> 0; None: 1/sqrt(D)).

Under ``torch.compile`` a bad tensor is refused while tracing, before anything runs, by the
fake implementation's ``BadInput``; dynamo may re-raise it wrapped in its own error type, whose
message carries the ``BadInput`` line (tests/gpu/test_attention_op.py checks one or the other).
"""
from functools import lru_cache
from typing import Optional

import torch
from torch.autograd.function import once_differentiable

from kernels.host import backend, backward
from spec.family import BadInput, UnsupportedVariant
from spec.ops import check_metadata, op_spelling, resolve_scale
from spec.problem import Tiles

Tensor = torch.Tensor
# The operators' annotations are evaluated (no ``from __future__ import annotations``): torch
# infers each schema from them.


@lru_cache(maxsize=None)
def _tiles(tile_m, tile_n):
    return None if tile_m is None else Tiles(tile_m, tile_n)


def _needs_grad(q, k, v) -> bool:
    return torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


@torch.library.custom_op("sawtooth::cutile_attention", mutates_args=())
def cutile_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, order: str,
                     schedule: Optional[str], tile_m: Optional[int], tile_n: Optional[int],
                     occupancy: Optional[int], arch: Optional[str], level: int,
                     scale: Optional[float], save_lse: bool) -> tuple[Tensor, Tensor]:
    lse = backward.stat_buffer(q) if save_lse else q.new_empty((0,), dtype=torch.float32)
    out = backend.attention(q, k, v, causal=causal, order=order, schedule=schedule,
                            tiles=_tiles(tile_m, tile_n), occupancy=occupancy, arch=arch,
                            level=level, scale=scale, lse=lse if save_lse else None)
    return out, lse


@cutile_attention.register_fake
def _(q, k, v, causal, order, schedule, tile_m, tile_n, occupancy, arch, level, scale,
      save_lse):
    check_metadata(q, k, v, causal)
    if not save_lse:
        return torch.empty_like(q), q.new_empty((0,), dtype=torch.float32)
    B, H, S, _ = q.shape
    sp = (S + 3) // 4 * 4
    return torch.empty_like(q), torch.empty_strided((B, H, S), (H * sp, sp, 1),
                                                    dtype=torch.float32, device=q.device)


@torch.library.custom_op("sawtooth::cutile_attention_backward", mutates_args=())
def cutile_attention_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                              lse: Tensor, causal: bool, scale: Optional[float],
                              bwd_order: str, bwd_schedule: Optional[str]
                              ) -> tuple[Tensor, Tensor, Tensor]:
    return backward.attention_backward(dout, q, k, v, out, lse, causal=causal, scale=scale,
                                       order=bwd_order, schedule=bwd_schedule)


@cutile_attention_backward.register_fake
def _(dout, q, k, v, out, lse, causal, scale, bwd_order, bwd_schedule):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, order, schedule, tm, tn, occupancy, arch, level, scale, save_lse = inputs
    out, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.causal, ctx.scale, ctx.save_lse = causal, scale, save_lse


def _backward(ctx, dout, _dlse):
    if not ctx.save_lse:
        raise RuntimeError("kernels.attention: this output was computed without the "
                           "log-sum-exp (no input required grad when it ran); call it again "
                           "with grad enabled to differentiate it")
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.sawtooth.cutile_attention_backward(
        dout, q, k, v, out, lse, ctx.causal, ctx.scale, "linear", None)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None, None


torch.library.register_autograd("sawtooth::cutile_attention", _backward,
                                setup_context=_setup_context)


@torch.library.custom_op("sawtooth::cutile_attention_out", mutates_args=("out",))
def cutile_attention_out(q: Tensor, k: Tensor, v: Tensor, out: Tensor, causal: bool, order: str,
                         schedule: Optional[str], tile_m: Optional[int],
                         tile_n: Optional[int], occupancy: Optional[int], arch: Optional[str],
                         level: int, scale: Optional[float]) -> None:
    backend.attention(q, k, v, causal=causal, order=order, schedule=schedule,
                      tiles=_tiles(tile_m, tile_n), occupancy=occupancy, arch=arch, level=level,
                      out=out, scale=scale)


@cutile_attention_out.register_fake
def _(q, k, v, out, causal, order, schedule, tile_m, tile_n, occupancy, arch, level, scale):
    check_metadata(q, k, v, causal, out)


def attention(q, k, v, *, causal=False, order="linear", schedule=None, tiles=None,
              occupancy=None, arch=None, level=6, out=None, scale=None):
    """``kernels.host.backend.attention`` (same arguments, same result) as a PyTorch operator: the
    eager path directly outside ``torch.compile`` when no gradient is needed, the custom op
    (differentiable: ``sawtooth::cutile_attention_backward``) inside it or when one is.

    ``scale`` is SDPA's ``scale=`` (None: 1/sqrt(D)). With grad enabled and any of q, k, v
    requiring grad the forward also stores the log-sum-exp and the output is differentiable;
    ``out=`` cannot be (one-line error then)."""
    if _needs_grad(q, k, v):
        if out is not None:
            raise BadInput("attention(out=...) cannot be differentiated and q, k or v requires "
                           "grad: drop out= (the result is then differentiable) or call it "
                           "under torch.no_grad()")
        if level < 2:
            raise UnsupportedVariant(f"level={level} has no backward (the log-sum-exp the "
                                     "backward reads needs level >= 2): use level >= 2, or "
                                     "call it under torch.no_grad()")
        if not torch.compiler.is_compiling():
            return _EagerAttention.apply(q, k, v, causal, order, schedule, tiles, occupancy,
                                         arch, level, scale)
        o, s, tm, tn = op_spelling(order, schedule, tiles)
        return torch.ops.sawtooth.cutile_attention(q, k, v, causal, o, s, tm, tn, occupancy,
                                                   arch, level, _scale_arg(scale), True)[0]
    if torch.compiler.is_compiling():
        o, s, tm, tn = op_spelling(order, schedule, tiles)
        if out is None:
            return torch.ops.sawtooth.cutile_attention(q, k, v, causal, o, s, tm, tn, occupancy,
                                                       arch, level, _scale_arg(scale),
                                                       False)[0]
        torch.ops.sawtooth.cutile_attention_out(q, k, v, out, causal, o, s, tm, tn, occupancy,
                                                arch, level, _scale_arg(scale))
        return out
    return backend.attention(q, k, v, causal=causal, order=order, schedule=schedule,
                             tiles=tiles, occupancy=occupancy, arch=arch, level=level, out=out,
                             scale=scale)


class _EagerAttention(torch.autograd.Function):
    """The differentiable eager call: the same forward (with the log-sum-exp) and backward as
    the operator's registered autograd, without the dispatcher's per-call cost (the operator is
    what ``torch.compile`` traces; opcheck tests its registration)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, order, schedule, tiles, occupancy, arch, level, scale):
        lse = backward.stat_buffer(q)
        out = backend.attention(q, k, v, causal=causal, order=order, schedule=schedule,
                                tiles=tiles, occupancy=occupancy, arch=arch, level=level,
                                scale=scale, lse=lse)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale = causal, scale
        return out

    @staticmethod
    @once_differentiable        # no double backward: one line from autograd if asked
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = backward.attention_backward(dout, q, k, v, out, lse, causal=ctx.causal,
                                                 scale=ctx.scale)
        return dq, dk, dv, None, None, None, None, None, None, None, None


def _scale_arg(scale):
    """The operator's ``scale`` argument (a float or None), checked like the eager path's."""
    if scale is None:
        return None
    resolve_scale(scale, 64)           # the one-line BadInput for a bad value
    return float(scale)

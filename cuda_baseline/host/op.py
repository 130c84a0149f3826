"""``cuda_baseline.attention``: the raw CUDA kernel as a PyTorch operator, for eager code, CUDA
graphs and ``torch.compile(fullgraph=True)``.

    >>> import torch
    >>> from cuda_baseline import attention
    >>> q, k, v = (torch.randn(2, 8, 1000, 64, device="cuda", dtype=torch.float16)
    ...            for _ in range(3))
    >>> out = attention(q, k, v, causal=True)               # eager: one lookup, one launch
    >>> out = torch.compile(lambda q, k, v: attention(q, k, v), fullgraph=True)(q, k, v)

The twin of ``kernels.host.op``: ``sawtooth::cuda_attention`` and ``sawtooth::cuda_attention_out``,
whose fake implementations check the tensors' metadata as the eager path does
(``spec.family.problem_from_tensors`` and ``cuda_baseline.host.backend.check_strides``: the same
one-line ``BadInput``; the 16-byte alignment of the addresses is checked by the real call) and
describe the result as ``empty_like(q)`` (under ``torch.compile`` a bad tensor is refused while
tracing, as in ``kernels.host.op``). Outside ``torch.compile``, ``attention()`` calls the
eager path (``cuda_baseline.host.launch.attention``) directly; see ``kernels.host.op`` for why.
"""
from functools import lru_cache
from typing import Optional

import torch

from cuda_baseline.build.bwd_source import BWD_OPTION_NAMES, parse_bwd_options
from cuda_baseline.host import launch, training
from cuda_baseline.host.backend import check_strides
from spec.family import BadInput
from spec.ops import check_metadata, op_spelling, resolve_scale
from spec.problem import Tiles
from spec.variant import DEFAULT_STAGES

Tensor = torch.Tensor
# The operators' annotations are evaluated (no ``from __future__ import annotations``): torch
# infers each schema from them.


@lru_cache(maxsize=None)
def _tiles(tile_m, tile_n):
    return None if tile_m is None else Tiles(tile_m, tile_n)


@lru_cache(maxsize=None)
def _options(text):
    """``backward_options`` checked when the forward runs (not first at the backward)."""
    if text is not None:
        try:
            parse_bwd_options(text)
        except (ValueError, AttributeError, TypeError):
            raise BadInput(f"backward_options={text!r}: names of "
                           f"{', '.join(BWD_OPTION_NAMES)} joined by + (e.g. 'onepart+dqsq'), "
                           "or None") from None
    return text


@torch.library.custom_op("sawtooth::cuda_attention", mutates_args=())
def cuda_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, order: str,
                   schedule: Optional[str], tile_m: Optional[int], tile_n: Optional[int],
                   stages: Optional[int], scale: Optional[float] = None) -> Tensor:
    return launch.attention(q, k, v, causal=causal, order=order, schedule=schedule,
                            tiles=_tiles(tile_m, tile_n), stages=stages, scale=scale)


@cuda_attention.register_fake
def _(q, k, v, causal, order, schedule, tile_m, tile_n, stages, scale):
    check_metadata(q, k, v, causal)
    check_strides(q, k, v)
    return torch.empty_like(q)


@torch.library.custom_op("sawtooth::cuda_attention_out", mutates_args=("out",))
def cuda_attention_out(q: Tensor, k: Tensor, v: Tensor, out: Tensor, causal: bool, order: str,
                       schedule: Optional[str], tile_m: Optional[int], tile_n: Optional[int],
                       stages: Optional[int], scale: Optional[float] = None) -> None:
    launch.attention(q, k, v, causal=causal, order=order, schedule=schedule,
                     tiles=_tiles(tile_m, tile_n), stages=stages, out=out, scale=scale)


@cuda_attention_out.register_fake
def _(q, k, v, out, causal, order, schedule, tile_m, tile_n, stages, scale):
    check_metadata(q, k, v, causal, out)
    check_strides(q, k, v, out)


def _lse_shape(q):
    B, H, S, _ = q.shape
    return (B, H, S)


@torch.library.custom_op("sawtooth::cuda_attention_train", mutates_args=())
def cuda_attention_train(q: Tensor, k: Tensor, v: Tensor, causal: bool, order: str,
                         schedule: Optional[str], tile_m: Optional[int], tile_n: Optional[int],
                         scale: float, backward_schedule: Optional[str],
                         backward_tile_m: Optional[int] = None,
                         backward_tile_n: Optional[int] = None,
                         backward_options: Optional[str] = None) -> tuple[Tensor, Tensor]:
    """The training forward: (out, lse), lse [B, H, S_q] fp32 in log2 units."""
    return training.forward(q, k, v, causal, order, schedule, _tiles(tile_m, tile_n), scale)


@cuda_attention_train.register_fake
def _(q, k, v, causal, order, schedule, tile_m, tile_n, scale, backward_schedule,
      backward_tile_m=None, backward_tile_n=None, backward_options=None):
    check_metadata(q, k, v, causal)
    check_strides(q, k, v)
    return torch.empty_like(q), q.new_empty(_lse_shape(q), dtype=torch.float32)


@torch.library.custom_op("sawtooth::cuda_attention_backward", mutates_args=())
def cuda_attention_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                            lse: Tensor, causal: bool, order: str,
                            backward_schedule: Optional[str], scale: float,
                            backward_tile_m: Optional[int] = None,
                            backward_tile_n: Optional[int] = None,
                            backward_options: Optional[str] = None
                            ) -> tuple[Tensor, Tensor, Tensor]:
    return training.backward(dout, q, k, v, out, lse, causal, order, backward_schedule, scale,
                             _tiles(backward_tile_m, backward_tile_n), backward_options)


@cuda_attention_backward.register_fake
def _(dout, q, k, v, out, lse, causal, order, backward_schedule, scale, backward_tile_m=None,
      backward_tile_n=None, backward_options=None):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _train_setup(ctx, inputs, output):
    q, k, v, causal, order, _, _, _, scale, bwd, btm, btn, bopts = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.args = (causal, order, bwd, scale, btm, btn, bopts)


def _train_backward(ctx, dout, dlse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.sawtooth.cuda_attention_backward(
        _grad_layout(dout), q, k, v, out, lse, *ctx.args)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None, None


def _grad_layout(dout):
    """The output gradient as the kernels read it (last dimension contiguous, strides multiples
    of 8): as given when it is, else a contiguous copy."""
    if dout.stride(-1) != 1 or any(s % 8 for s in dout.stride()[:3]):
        return dout.contiguous()
    return dout


cuda_attention_train.register_autograd(_train_backward, setup_context=_train_setup)


def _infer_setup(ctx, inputs, output):
    q, k, v, causal, order, schedule, tile_m, tile_n, stages, scale = inputs
    ctx.save_for_backward(q, k, v)
    ctx.args = (causal, order, schedule, tile_m, tile_n, scale)


def _infer_backward(ctx, dout):
    """The inference op called directly on inputs that require grad: its forward kept no
    log-sum-exp, so the training forward runs again for it (``attention()`` takes the training
    op instead and pays no second forward)."""
    q, k, v = ctx.saved_tensors
    causal, order, schedule, tile_m, tile_n, scale = ctx.args
    sc = resolve_scale(scale, q.shape[-1])
    out, lse = torch.ops.sawtooth.cuda_attention_train(q, k, v, causal, order, schedule, tile_m,
                                                       tile_n, sc, None)
    dq, dk, dv = torch.ops.sawtooth.cuda_attention_backward(
        _grad_layout(dout), q, k, v, out, lse, causal, order, None, sc)
    return dq, dk, dv, None, None, None, None, None, None, None


cuda_attention.register_autograd(_infer_backward, setup_context=_infer_setup)


class _Train(torch.autograd.Function):
    """The eager form of ``cuda_attention_train`` and its registered backward: the same two
    launches (``training.forward`` / ``training.backward``) without the operator dispatch, whose
    host cost (tens of microseconds per call) small problems would pay twice per step."""

    @staticmethod
    def forward(ctx, q, k, v, causal, order, schedule, tiles, scale, bwd, btiles, bopts):
        out, lse = training.forward(q, k, v, causal, order, schedule, tiles, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (causal, order, bwd, scale, btiles, bopts)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        causal, order, bwd, scale, btiles, bopts = ctx.args
        dq, dk, dv = training.backward(dout, q, k, v, out, lse, causal, order, bwd, scale,
                                       btiles, bopts)
        return dq, dk, dv, None, None, None, None, None, None, None, None


def _needs_grad(q, k, v) -> bool:
    return torch.is_grad_enabled() and any(
        isinstance(t, Tensor) and t.requires_grad for t in (q, k, v))


def attention(q, k, v, *, causal=False, order="linear", schedule=None, tiles=None, stages=None,
              out=None, scale=None, backward_schedule=None, backward_tiles=None,
              backward_options=None):
    """``cuda_baseline.host.launch.attention`` (same arguments, same result) as a PyTorch operator:
    the eager path directly outside ``torch.compile``, the custom op inside it. ``scale``: the
    softmax scale as SDPA's ``scale=`` (None: 1/sqrt(D)). With grad enabled and an input that
    requires grad, the training op (``sawtooth::cuda_attention_train``, the forward that keeps
    the log-sum-exp, with its registered backward): ``order`` is then also the Q scan of the
    dK/dV kernel, ``backward_schedule`` its CTA schedule (None or "grid": one K/V tile per
    CTA; "static<P>": P persistent CTAs) and ``backward_tiles`` its (TILE_M query rows per step,
    TILE_N keys per CTA), default ``training.default_backward_tiles``, ``backward_options`` its
    opt-in build options (``cuda_baseline.build.bwd_source.BwdOption`` names joined by +, e.g.
    "onepart+dqv4"; None: the default build). Eager calls take
    ``autograd.Function`` (the same launches, no operator dispatch)."""
    sc = resolve_scale(scale, q.shape[-1] if isinstance(q, Tensor) else 64)
    if _needs_grad(q, k, v):
        if out is not None:
            raise BadInput("out= cannot be used when q, k or v requires grad (autograd needs the "
                           "op's own output); drop out= or call under torch.no_grad()")
        if stages is not None and stages != DEFAULT_STAGES:
            raise BadInput(f"stages={stages} has no training build; leave stages None to train")
        o, s, tm, tn = op_spelling(order, schedule, tiles)
        bs = backward_schedule if backward_schedule is None or isinstance(
            backward_schedule, str) else backward_schedule.label
        _, _, btm, btn = op_spelling(order, None, backward_tiles)
        backward_options = _options(backward_options)
        if torch.compiler.is_compiling():
            return torch.ops.sawtooth.cuda_attention_train(q, k, v, causal, o, s, tm, tn, sc, bs,
                                                           btm, btn, backward_options)[0]
        return _Train.apply(q, k, v, causal, o, s, _tiles(tm, tn), sc, bs, _tiles(btm, btn),
                            backward_options)
    if torch.compiler.is_compiling():
        o, s, tm, tn = op_spelling(order, schedule, tiles)
        if out is None:
            return torch.ops.sawtooth.cuda_attention(q, k, v, causal, o, s, tm, tn, stages, sc)
        torch.ops.sawtooth.cuda_attention_out(q, k, v, out, causal, o, s, tm, tn, stages, sc)
        return out
    return launch.attention(q, k, v, causal=causal, order=order, schedule=schedule, tiles=tiles,
                            stages=stages, out=out, scale=sc)

"""``cuda_baseline.attention``: the raw CUDA kernel as a PyTorch operator, for eager code, CUDA
graphs and ``torch.compile(fullgraph=True)``.

    >>> import torch
    >>> from cuda_baseline import attention
    >>> q, k, v = (torch.randn(2, 8, 1000, 64, device="cuda", dtype=torch.float16)
    ...            for _ in range(3))
    >>> out = attention(q, k, v, causal=True)               # eager: one lookup, one launch
    >>> out = torch.compile(lambda q, k, v: attention(q, k, v), fullgraph=True)(q, k, v)

The twin of ``kernels.op``: ``sawtooth::cuda_attention`` and ``sawtooth::cuda_attention_out``,
whose fake implementations check the tensors' metadata as the eager path does
(``spec.family.problem_from_tensors`` and ``cuda_baseline.backend.check_strides``: the same
one-line ``BadInput``; the 16-byte alignment of the addresses is checked by the real call) and
describe the result as ``empty_like(q)`` (under ``torch.compile`` a bad tensor is refused while
tracing, as in ``kernels.op``). Outside ``torch.compile``, ``attention()`` calls the
eager path (``cuda_baseline.launch.attention``) directly; see ``kernels.op`` for why.
"""
from functools import lru_cache
from typing import Optional

import torch

from spec.family import BadInput
from spec.ops import check_metadata, op_spelling, resolve_scale
from spec.problem import Tiles

from . import launch
from .backend import check_strides

Tensor = torch.Tensor
# The operators' annotations are evaluated (no ``from __future__ import annotations``): torch
# infers each schema from them.


@lru_cache(maxsize=None)
def _tiles(tile_m, tile_n):
    return None if tile_m is None else Tiles(tile_m, tile_n)


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


def positive_scale(q, scale: float):
    """(q', scale') with scale' > 0 and softmax(scale' q' kᵀ) = softmax(scale q kᵀ): the kernels
    take the running maximum of the raw scores, which ranks them only for a positive scale, so
    a negative scale negates q and a zero scale zeroes it (uniform weights; as SDPA, q and k
    then get zero gradient). Autograd differentiates the negation as any torch op."""
    if scale > 0:
        return q, scale
    return (-q, -scale) if scale < 0 else (q * 0, 1.0)


def _needs_grad(q, k, v) -> bool:
    return torch.is_grad_enabled() and any(
        isinstance(t, Tensor) and t.requires_grad for t in (q, k, v))


def attention(q, k, v, *, causal=False, order="linear", schedule=None, tiles=None, stages=None,
              out=None, scale=None):
    """``cuda_baseline.launch.attention`` (same arguments, same result) as a PyTorch operator:
    the eager path directly outside ``torch.compile``, the custom op inside it. ``scale``: the
    softmax scale as SDPA's ``scale=`` (None: 1/sqrt(D))."""
    if _needs_grad(q, k, v):
        raise BadInput("q, k or v requires grad, but this build of cuda_baseline.attention has "
                       "no backward; call it under torch.no_grad() or use SDPA for training")
    sc = resolve_scale(scale, q.shape[-1] if isinstance(q, Tensor) else 64)
    q, sc = positive_scale(q, sc)
    if torch.compiler.is_compiling():
        o, s, tm, tn = op_spelling(order, schedule, tiles)
        if out is None:
            return torch.ops.sawtooth.cuda_attention(q, k, v, causal, o, s, tm, tn, stages, sc)
        torch.ops.sawtooth.cuda_attention_out(q, k, v, out, causal, o, s, tm, tn, stages, sc)
        return out
    return launch.attention(q, k, v, causal=causal, order=order, schedule=schedule, tiles=tiles,
                            stages=stages, out=out, scale=sc)

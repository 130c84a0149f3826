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
``kernels.backend.attention``. Outside it ``attention()`` calls that eager path directly: the
dispatcher's own cost per call (argument parsing, the operator's Python wrapper) is what the
``hostpath`` study measures beside it, and it buys nothing when nothing traces the call. CUDA-graph
capture records the launch either way (it is one kernel on torch's current stream). Measured on an
H100 (profiles/h100/hostpath-20261126): 13.8-14.3 us of host time per eager call, 31 us through the
dispatcher, SDPA 18-21 us.

Under ``torch.compile`` a bad tensor is refused while tracing, before anything runs, by the
fake implementation's ``BadInput``; dynamo may re-raise it wrapped in its own error type, whose
message carries the ``BadInput`` line (tests/gpu/test_attention_op.py checks one or the other).
"""
from functools import lru_cache
from typing import Optional

import torch

from spec.ops import check_metadata, op_spelling
from spec.problem import Tiles

from . import backend

Tensor = torch.Tensor
# The operators' annotations are evaluated (no ``from __future__ import annotations``): torch
# infers each schema from them.


@lru_cache(maxsize=None)
def _tiles(tile_m, tile_n):
    return None if tile_m is None else Tiles(tile_m, tile_n)


@torch.library.custom_op("sawtooth::cutile_attention", mutates_args=())
def cutile_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, order: str,
                     schedule: Optional[str], tile_m: Optional[int], tile_n: Optional[int],
                     occupancy: Optional[int], arch: Optional[str], level: int) -> Tensor:
    return backend.attention(q, k, v, causal=causal, order=order, schedule=schedule,
                             tiles=_tiles(tile_m, tile_n), occupancy=occupancy, arch=arch,
                             level=level)


@cutile_attention.register_fake
def _(q, k, v, causal, order, schedule, tile_m, tile_n, occupancy, arch, level):
    check_metadata(q, k, v, causal)
    return torch.empty_like(q)


@torch.library.custom_op("sawtooth::cutile_attention_out", mutates_args=("out",))
def cutile_attention_out(q: Tensor, k: Tensor, v: Tensor, out: Tensor, causal: bool, order: str,
                         schedule: Optional[str], tile_m: Optional[int],
                         tile_n: Optional[int], occupancy: Optional[int], arch: Optional[str],
                         level: int) -> None:
    backend.attention(q, k, v, causal=causal, order=order, schedule=schedule,
                      tiles=_tiles(tile_m, tile_n), occupancy=occupancy, arch=arch, level=level,
                      out=out)


@cutile_attention_out.register_fake
def _(q, k, v, out, causal, order, schedule, tile_m, tile_n, occupancy, arch, level):
    check_metadata(q, k, v, causal, out)


def attention(q, k, v, *, causal=False, order="linear", schedule=None, tiles=None,
              occupancy=None, arch=None, level=6, out=None):
    """``kernels.backend.attention`` (same arguments, same result) as a PyTorch operator: the
    eager path directly outside ``torch.compile``, the custom op inside it (module docstring)."""
    if torch.compiler.is_compiling():
        o, s, tm, tn = op_spelling(order, schedule, tiles)
        if out is None:
            return torch.ops.sawtooth.cutile_attention(q, k, v, causal, o, s, tm, tn, occupancy,
                                                       arch, level)
        torch.ops.sawtooth.cutile_attention_out(q, k, v, out, causal, o, s, tm, tn, occupancy,
                                                arch, level)
        return out
    return backend.attention(q, k, v, causal=causal, order=order, schedule=schedule,
                             tiles=tiles, occupancy=occupancy, arch=arch, level=level, out=out)

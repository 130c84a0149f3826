"""The interface both kernel families implement, and the input checks they share.

A backend turns a ``Variant`` and a ``Problem`` into something launchable (``prepare``: compile,
check resources), launches it on the torch current stream (``run``), and runs its trace build
(``trace``), which records per CTA and step the (b, h, q_tile, kv_tile) visited so a GPU test can
compare it with ``spec.visit_order``. Nothing here imports torch at module import time.
"""
from __future__ import annotations

from typing import Any, Protocol

from .problem import SUPPORTED_HEAD_DIMS, DType, Problem
from .variant import Variant


class UnsupportedVariant(ValueError):
    """A variant/problem combination a backend cannot build; the message says why and what works."""


class BadInput(ValueError):
    """Tensors that do not describe a valid attention call; the message names what was passed and
    what is accepted."""


class AttentionBackend(Protocol):
    name: str

    def prepare(self, variant: Variant, problem: Problem) -> Any:
        """Compile (or fetch from cache) the specialisation; raise UnsupportedVariant if impossible."""

    def run(self, prepared: Any, q, k, v, out) -> None:
        """Launch on ``torch.cuda.current_stream()``; ``out`` is written, nothing is returned."""

    def trace(self, prepared: Any, q, k, v, out) -> dict:
        """Run the trace build; returns at least ``{"visits": int32 [n_ctas, max_steps, 4]}``
        padded with -1, the layout of ``spec.Visits.table()``."""


_TORCH_DTYPES = {"float16": DType.FP16, "bfloat16": DType.BF16}


def problem_from_tensors(q, k, v, causal: bool, out=None) -> Problem:
    """Validate [B, H, S, D] torch tensors and describe them as a ``Problem``.

    Raises BadInput naming the offending tensor, what it is, and what is accepted.
    """
    names = {"q": q, "k": k, "v": v} | ({"out": out} if out is not None else {})
    for name, t in names.items():
        if not hasattr(t, "is_cuda") or not hasattr(t, "dim"):
            raise BadInput(f"{name} must be a torch.Tensor on a CUDA device, got {type(t).__name__}")
        if not t.is_cuda:
            raise BadInput(f"{name} is on {t.device}; move it to the GPU first (tensor.cuda())")
        if t.dim() != 4:
            raise BadInput(f"{name} has shape {tuple(t.shape)}; expected 4-D [B, H, S, D]")
        if t.stride(-1) != 1:
            raise BadInput(f"{name} has stride {t.stride(-1)} in its last dimension; it must be "
                           "contiguous there (call .contiguous())")
        dt = str(t.dtype).removeprefix("torch.")
        if dt not in _TORCH_DTYPES:
            raise BadInput(f"{name} has dtype {t.dtype}; accepted: torch.float16, torch.bfloat16")
    if len({str(t.dtype) for t in names.values()}) != 1:
        raise BadInput("q, k, v (and out) must share one dtype, got "
                       + ", ".join(f"{n}={t.dtype}" for n, t in names.items()))
    if len({t.device for t in names.values()}) != 1:
        raise BadInput("q, k, v (and out) must be on one device, got "
                       + ", ".join(f"{n}={t.device}" for n, t in names.items()))
    B, H, S_q, D = q.shape
    Bk, H_kv, S_kv, Dk = k.shape
    if tuple(v.shape) != tuple(k.shape):
        raise BadInput(f"k {tuple(k.shape)} and v {tuple(v.shape)} must have the same shape")
    if Bk != B or Dk != D:
        raise BadInput(f"q {tuple(q.shape)} and k {tuple(k.shape)} disagree on batch or head dim")
    if H % H_kv:
        raise BadInput(f"q has {H} heads, k/v have {H_kv}: H must be a multiple of H_kv")
    if D not in SUPPORTED_HEAD_DIMS:
        raise BadInput(f"head dim {D} is not supported; accepted: {SUPPORTED_HEAD_DIMS}")
    if out is not None and tuple(out.shape) != tuple(q.shape):
        raise BadInput(f"out {tuple(out.shape)} must have q's shape {tuple(q.shape)}")
    return Problem(B=B, H=H, S_q=S_q, D=D, S_kv=S_kv, H_kv=H_kv,
                   dtype=_TORCH_DTYPES[str(q.dtype).removeprefix("torch.")], causal=causal)

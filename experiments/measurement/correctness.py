"""Correctness gate for every kernel variant: fp32 reference, peer-relative tolerance,
NaN never passes.

The rule (design.md): an output passes when its max absolute error against an fp32 reference
(PyTorch SDPA on inputs upcast to fp32) is at most twice the error of PyTorch's own SDPA at the
input precision, plus a small absolute term. Inputs are fresh seeded ``randn`` tensors (never
zeros); outputs are poisoned with NaN before the kernel runs, so a kernel that skips a tile fails.
"""
from __future__ import annotations

from dataclasses import dataclass

from spec import Problem

ABS_TOL = 1e-3


@dataclass(frozen=True)
class Check:
    max_err: float
    peer_err: float
    tol: float
    has_nan: bool

    @property
    def passed(self) -> bool:
        return (not self.has_nan) and self.max_err <= self.tol

    def __str__(self) -> str:
        verdict = "ok" if self.passed else ("NaN" if self.has_nan else "FAIL")
        return (f"{verdict}: max|err|={self.max_err:.2e} "
                f"(SDPA own {self.peer_err:.2e}, tol {self.tol:.2e})")


def random_inputs(problem: Problem, seed: int, device="cuda"):
    """q [B,H,S_q,D], k and v [B,H_kv,S_kv,D], standard normal, from a seeded generator."""
    import torch
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[problem.dtype.value]
    gen = torch.Generator(device=device).manual_seed(seed)
    p = problem
    q = torch.randn(p.B, p.H, p.S_q, p.D, generator=gen, device=device, dtype=dt)
    k = torch.randn(p.B, p.H_kv, p.S_kv, p.D, generator=gen, device=device, dtype=dt)
    v = torch.randn(p.B, p.H_kv, p.S_kv, p.D, generator=gen, device=device, dtype=dt)
    return q, k, v


def poisoned_like(q):
    import torch
    return torch.full_like(q, float("nan"))


def _sdpa(q, k, v, causal: bool):
    import torch.nn.functional as F
    g = q.shape[1] // k.shape[1]
    if g > 1:   # grouped-query: expand K/V heads (enable_gqa is not in every backend)
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def reference(q, k, v, causal: bool):
    """fp32 SDPA on upcast inputs (memory-efficient backend where it applies, math otherwise)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        return _sdpa(q.float(), k.float(), v.float(), causal)


def check(out, q, k, v, causal: bool, ref=None) -> Check:
    """Compare ``out`` with the fp32 reference; the tolerance comes from SDPA's own error."""
    import torch
    ref = reference(q, k, v, causal) if ref is None else ref
    peer = (_sdpa(q, k, v, causal).float() - ref).abs().max().item()
    err = (out.float() - ref).abs()
    return Check(max_err=float(torch.nan_to_num(err, nan=float("inf")).max().item()),
                 peer_err=peer, tol=2 * peer + ABS_TOL, has_nan=bool(torch.isnan(out).any()))

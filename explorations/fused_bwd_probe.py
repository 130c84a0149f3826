"""Does the one-pass backward beat the two passes? The cuTile backward's one pass
(``BackwardConfig(one_pass=True)``: dK/dV and dQ in one kernel, dQ summed across CTAs by TMA bulk
reduce, FlashAttention-3's scheme) and its two passes (the fitted rule's tiles), beside SDPA's
flash and cuDNN backwards; and ``bwd_fused_red`` below, a prototype of the one pass that adds
dQ with relaxed per-element atomics instead (FlashAttention-2's scheme; its kernel alone). Kernel
time on a cold L2, launchers alternated, median of ``--reps``; each launcher's gradients against
an fp32 reference (max |error| / max |reference|).

    python -m explorations.fused_bwd_probe [--reps 10] [--causal schedules|tiles|rule]
    python -m explorations.fused_bwd_probe --variants rule

``--causal schedules``: where the one pass loses (causal), is it the tail of unequal items (a
K/V tile near the diagonal scans few Q tiles, the first one all)? The one pass on the grid
launch, with a reversed scan, and on 132 persistent CTAs dealt head-major (the longest items of
every head first) and q-major, each against the two passes. ``--causal tiles``: or its tiles
(the two passes' rule takes 64 x 64 K/V tiles for the causal dK/dV at D=128)? ``rule``: the one
pass on the two passes' dK/dV configuration (``--variants``: on every problem; ``--D 64``:
those of D=64). ``wide``: 64 x 64 and 128 x 128 tiles (the latter spill-free at D=64 only).

Problems: none of the model suite's validation half (the training bench's judged half)."""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import cuda.tile as ct

from kernels.device.fmha import ZERO
from kernels.device.work import ConstBool, ConstInt, q_range


def _step(Q, dO, LSE, Delta, dQacc, k, v, dk, dv, b, h, m, qk_scale, sm_scale, offs_n, cols,
          TILE_D: ConstInt, TILE_M: ConstInt, TILE_N: ConstInt, MASKED: ConstBool):
    qt = ct.load(Q, index=(b, h, 0, m), shape=(1, 1, TILE_D, TILE_M), order=(0, 1, 3, 2),
                 padding_mode=ZERO, latency=2)
    qt = ct.reshape(qt, (TILE_D, TILE_M))
    st = ct.mma(k, qt, ct.full((TILE_N, TILE_M), 0.0, dtype=ct.float32))
    lse = ct.reshape(ct.load(LSE, index=(b, h, m), shape=(1, 1, TILE_M), padding_mode=ZERO),
                     (1, TILE_M))
    pt = ct.exp2(st * qk_scale - lse, flush_to_zero=True)
    offs_m = m * TILE_M + ct.arange(TILE_M, dtype=ct.int32)
    if MASKED:
        pt = ct.where(offs_m[None, :] >= offs_n[:, None], pt, 0.0)
    do = ct.reshape(ct.load(dO, index=(b, h, m, 0), shape=(1, 1, TILE_M, TILE_D),
                            padding_mode=ZERO, latency=3), (TILE_M, TILE_D))
    dv = ct.mma(pt.astype(do.dtype), do, dv)
    dpt = ct.mma(v, ct.transpose(do), ct.full((TILE_N, TILE_M), 0.0, dtype=ct.float32))
    delta = ct.reshape(ct.load(Delta, index=(b, h, m), shape=(1, 1, TILE_M), padding_mode=ZERO),
                       (1, TILE_M))
    dst = (pt * (dpt - delta)).astype(do.dtype)
    dk = ct.mma(dst, ct.transpose(qt), dk)
    dq = ct.mma(ct.transpose(dst), k, ct.full((TILE_M, TILE_D), 0.0, dtype=ct.float32))
    ct.atomic_add(dQacc, (b, h, offs_m[:, None], cols[None, :]), dq * sm_scale,
                  memory_order=ct.MemoryOrder.RELAXED)
    return dk, dv


@ct.kernel
def bwd_fused_red(Q, K, V, dO, LSE, Delta, dK, dV, dQacc, qk_scale: float, sm_scale: float,
              HEADS: int, TILE_D: ConstInt, TILE_M: ConstInt, TILE_N: ConstInt,
              CAUSAL: ConstBool):
    n_tile = ct.bid(0)
    bh = ct.bid(1)
    H_kv = K.shape[1]
    b = bh // H_kv
    kvh = bh % H_kv
    n_q = ct.cdiv(Q.shape[2], TILE_M)
    k = ct.reshape(ct.load(K, index=(b, kvh, n_tile, 0), shape=(1, 1, TILE_N, TILE_D),
                           padding_mode=ZERO), (TILE_N, TILE_D))
    v = ct.reshape(ct.load(V, index=(b, kvh, n_tile, 0), shape=(1, 1, TILE_N, TILE_D),
                           padding_mode=ZERO), (TILE_N, TILE_D))
    offs_n = n_tile * TILE_N + ct.arange(TILE_N, dtype=ct.int32)
    cols = ct.arange(TILE_D, dtype=ct.int32)
    dk = ct.full((TILE_N, TILE_D), 0.0, dtype=ct.float32)
    dv = ct.full((TILE_N, TILE_D), 0.0, dtype=ct.float32)
    m_start, m_full = q_range(n_tile, n_q, TILE_M, TILE_N, CAUSAL)
    for g in range(0, HEADS):
        h = kvh * HEADS + g
        if CAUSAL:
            for m in range(m_start, m_full):
                dk, dv = _step(Q, dO, LSE, Delta, dQacc, k, v, dk, dv, b, h, m, qk_scale,
                               sm_scale, offs_n, cols, TILE_D, TILE_M, TILE_N, True)
            for m in range(m_full, n_q):
                dk, dv = _step(Q, dO, LSE, Delta, dQacc, k, v, dk, dv, b, h, m, qk_scale,
                               sm_scale, offs_n, cols, TILE_D, TILE_M, TILE_N, False)
        else:
            for m in range(0, n_q):
                dk, dv = _step(Q, dO, LSE, Delta, dQacc, k, v, dk, dv, b, h, m, qk_scale,
                               sm_scale, offs_n, cols, TILE_D, TILE_M, TILE_N, False)
    ct.store(dK, index=(b, kvh, n_tile, 0),
             tile=ct.reshape(dk * sm_scale, (1, 1, TILE_N, TILE_D)).astype(dK.dtype))
    ct.store(dV, index=(b, kvh, n_tile, 0),
             tile=ct.reshape(dv, (1, 1, TILE_N, TILE_D)).astype(dV.dtype))


PROBLEMS = [  # (B, H, H_kv, S_q, S_kv, D, dtype, causal): unseen, then the suite's tuning half
    (2, 16, 16, 4096, 4096, 128, "bf16", False), (2, 16, 16, 4096, 4096, 128, "bf16", True),
    (4, 16, 16, 4096, 4096, 64, "fp16", False), (4, 16, 16, 4096, 4096, 64, "fp16", True),
    (1, 32, 8, 4096, 4096, 128, "bf16", True), (2, 32, 32, 2048, 2048, 128, "bf16", True),
    (2, 32, 8, 4096, 4096, 128, "bf16", False), (2, 16, 16, 512, 4096, 128, "bf16", False),
    (1, 16, 16, 1000, 2500, 128, "bf16", False), (4, 16, 1, 1000, 1000, 64, "fp16", False),
    (2, 12, 12, 3000, 3000, 64, "bf16", False),
    (16, 12, 12, 512, 512, 64, "fp16", False), (2, 8, 8, 4096, 4096, 64, "fp16", False),
    (16, 16, 16, 577, 577, 64, "bf16", False), (64, 12, 12, 197, 197, 64, "bf16", False),
    (1, 32, 8, 1024, 6000, 128, "bf16", True), (2, 32, 8, 3001, 3001, 128, "bf16", True)]


def _reference(q, k, v, dout, causal):
    """fp32 gradients of softmax(q kᵀ / sqrt(D)) v (grouped heads expanded)."""
    import torch
    g = q.shape[1] // k.shape[1]
    qf, kf, vf = (t.detach().float().requires_grad_(True) for t in (q, k, v))
    s = qf @ kf.repeat_interleave(g, 1).transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device)
                          .triu(1), float("-inf"))
    o = torch.softmax(s, -1) @ vf.repeat_interleave(g, 1)
    return torch.autograd.grad(o, (qf, kf, vf), dout.float())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m explorations.fused_bwd_probe")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--causal", choices=sorted(CAUSAL_VARIANTS),
                    help="the causal problems only: the one pass under other scan orders and "
                    "CTA schedules, or other tiles, beside the two passes")
    ap.add_argument("--variants", choices=sorted(CAUSAL_VARIANTS),
                    help="as --causal, on every problem")
    ap.add_argument("--D", type=int, choices=(64, 128), help="only the problems of this D")
    a = ap.parse_args(argv)
    if a.causal or a.variants:
        return causal_variants(a.reps, CAUSAL_VARIANTS[a.causal or a.variants],
                               causal_only=bool(a.causal), D=a.D)
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from experiments.measurement.correctness import random_inputs
    from experiments.measurement.timing import time_interleaved
    from kernels.device import fmha
    from kernels.host import backend, backward
    from spec import Problem, get_arch
    red = bwd_fused_red.replace_hints(occupancy=1, num_worker_warps=8)
    names = ("2pass", "1pass", "red", "cudnn", "flash")
    print(f"{'problem':36s}" + "".join(f"{n:>8s}" for n in names)
          + f"{'1p/2p':>7s}{'cudnn/1p':>9s}{'cudnn/2p':>9s}  err 2pass, 1pass (dq dk dv)")
    for B, H, Hkv, Sq, Skv, D, dt, causal in PROBLEMS:
        pr = Problem(B, H, Sq, D, S_kv=Skv, H_kv=Hkv, dtype=dt, causal=causal)
        q, k, v = random_inputs(pr, 0)
        dout = torch.randn(q.shape, generator=torch.Generator(device="cuda").manual_seed(1),
                           device="cuda", dtype=q.dtype)
        lse = backward.stat_buffer(q)
        out = backend.attention(q, k, v, causal=causal, lse=lse)
        ref = _reference(q, k, v, dout, causal)
        two, one = (backend.default_variant(pr, get_arch("h100"), training=True,
                                            backward_one_pass=n == 1).backward for n in (2, 1))
        fns, errs = {}, []
        for name, cfg in (("2pass", two), ("1pass", one)):
            launch = backward.launch_for(pr, cfg, device_index=torch.cuda.current_device())
            bufs = (backward.stat_buffer(q), torch.full_like(q, float("nan")),
                    torch.full_like(k, float("nan")), torch.full_like(v, float("nan")))
            fns[name] = (lambda launch=launch, bufs=bufs:
                         launch(dout, q, k, v, out, lse, *bufs))
            fns[name]()
            torch.cuda.synchronize()
            errs.append(" ".join(f"{float((g.float() - r).abs().max() / r.abs().max()):.1e}"
                                 for g, r in zip(bufs[1:], ref)))
        if Sq == Skv:
            acc = torch.zeros(q.shape, dtype=torch.float32, device="cuda")
            scale = D ** -0.5
            args = (q, k, v, dout, lse, backward.stat_buffer(q), torch.empty_like(k),
                    torch.empty_like(v), acc, fmha.qk_scale_for(D, 6, scale), scale, H // Hkv,
                    D, 64, 128, causal)
            grid = (-(-Skv // 128), B * Hkv, 1)
            fns["red"] = lambda args=args, grid=grid: ct.launch(
                torch.cuda.current_stream(), grid, red, args)
        qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
        for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                         ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel(be):
                    o = torch.nn.functional.scaled_dot_product_attention(
                        qg, kg, vg, is_causal=causal, enable_gqa=H != Hkv)
                torch.autograd.grad(o, (qg, kg, vg), dout, retain_graph=True)
                fns[name] = (lambda o=o: torch.autograd.grad(o, (qg, kg, vg), dout,
                                                              retain_graph=True))
            except RuntimeError:
                pass
        med = {n: s.median for n, s in time_interleaved(fns, reps=a.reps).items()}
        nan = float("nan")
        print(f"{pr.label:36s}" + "".join(f"{med.get(n, nan):8.3f}" for n in names)
              + f"{med['1pass'] / med['2pass']:7.3f}{med.get('cudnn', nan) / med['1pass']:9.3f}"
              f"{med.get('cudnn', nan) / med['2pass']:9.3f}  {errs[0]}, {errs[1]}", flush=True)
    return 0


CAUSAL_VARIANTS = {
    "schedules": {"1pass": {}, "1p-rev": {"order": "reverse"},
                  "1p-s132h": {"backward_schedule": "static132h"},
                  "1p-s132": {"backward_schedule": "static132"}},
    "tiles": {"1pass": {}, "1p-m64n64": {"backward_tiles": (64, 64)},
              "1p-m128n64": {"backward_tiles": (128, 64)}},
    "rule": {"1pass": {}, "1p-rule": None},
    "wide": {"1pass": {}, "1p-m64n64": {"backward_tiles": (64, 64)},
             "1p-m128n128": {"backward_tiles": (128, 128)}}}
"""One-pass variants: ``default_variant`` keywords (the tiles keep BASE's hints: one CTA per
SM, 8 worker warps; both spill-free with the dQ reduce at D=128); None: the one pass on the
configuration the two passes' rule picks for their dK/dV pass (at D=128 causal 64 x 64 K/V
tiles, two CTAs per SM, spill-free with the dQ made in two halves along D)."""


def causal_variants(reps: int, variants: dict, causal_only: bool = True,
                    D: int | None = None) -> int:
    import torch

    from experiments.measurement.correctness import random_inputs
    from experiments.measurement.timing import time_interleaved
    from kernels.host import backend, backward
    from spec import Problem, get_arch
    print(f"{'problem':36s}{'2pass':>8s}" + "".join(f"{n:>9s}" for n in variants)
          + "  (ms; then each over 2pass)")
    for B, H, Hkv, Sq, Skv, d, dt, causal in PROBLEMS:
        if (causal_only and not causal) or d != (D or d):
            continue
        pr = Problem(B, H, Sq, d, S_kv=Skv, H_kv=Hkv, dtype=dt, causal=causal)
        q, k, v = random_inputs(pr, 0)
        dout = torch.randn_like(q)
        lse = backward.stat_buffer(q)
        out = backend.attention(q, k, v, causal=causal, lse=lse)
        cfgs = {"2pass": backend.default_variant(pr, get_arch("h100"), training=True,
                                                 backward_one_pass=False).backward}
        for name, kw in variants.items():
            cfgs[name] = (replace(cfgs["2pass"], one_pass=True) if kw is None else
                          backend.default_variant(pr, get_arch("h100"), training=True,
                                                  backward_one_pass=True, **kw).backward)
        fns = {}
        for name, cfg in cfgs.items():
            launch = backward.launch_for(pr, cfg, device_index=torch.cuda.current_device())
            bufs = (backward.stat_buffer(q), torch.empty_like(q), torch.empty_like(k),
                    torch.empty_like(v))
            fns[name] = lambda launch=launch, bufs=bufs: launch(dout, q, k, v, out, lse, *bufs)
        med = {n: s.median for n, s in time_interleaved(fns, reps=reps).items()}
        print(f"{pr.label:36s}{med['2pass']:8.3f}" + "".join(f"{med[n]:9.3f}" for n in variants)
              + "  " + " ".join(f"{med[n] / med['2pass']:.3f}" for n in variants), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

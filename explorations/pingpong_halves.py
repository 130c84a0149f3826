"""Exploration (H100, 2026-11-21): two independent 64-row halves per CTA sharing K/V loads
(ping-pong).

    python -m explorations.pingpong_halves

Negative result, kept so it can be re-run: see explorations/README.md (the shared
measurement is explorations/harness.py)."""
import math

import cuda.tile as ct
import torch
from cuda.tile import PaddingMode, RoundingMode

from explorations.harness import compare
from kernels.device import fmha

CI = ct.Constant[int]
ZERO = PaddingMode.ZERO


def _soft(qk, m_i, l_i, acc, qk_scale):
    m_ij = ct.maximum(m_i, ct.max(qk, axis=-1, keepdims=True) * qk_scale)
    p = ct.exp2(qk * qk_scale - m_ij, flush_to_zero=True)
    alpha = ct.exp2(m_i - m_ij, flush_to_zero=True)
    l_i = l_i * alpha + ct.sum(p, axis=-1, keepdims=True)
    return p, m_ij, l_i, acc * alpha


@ct.kernel
def fwd2(Q, K, V, Out, qk_scale: float, H: CI, TILE_D: CI, HALF: CI, TILE_N: CI):
    cta = ct.bid(0)
    n_q = ct.cdiv(Q.shape[2], 2 * HALF)
    bh = cta // n_q
    qt = cta % n_q
    b = bh // H
    h = bh % H
    q0 = ct.reshape(ct.load(Q, index=(b, h, 2 * qt, 0), shape=(1, 1, HALF, TILE_D),
                            padding_mode=ZERO), (HALF, TILE_D))
    q1 = ct.reshape(ct.load(Q, index=(b, h, 2 * qt + 1, 0), shape=(1, 1, HALF, TILE_D),
                            padding_mode=ZERO), (HALF, TILE_D))
    m0 = ct.full((HALF, 1), -math.inf, dtype=ct.float32)
    m1 = ct.full((HALF, 1), -math.inf, dtype=ct.float32)
    l0 = ct.full((HALF, 1), 0.0, dtype=ct.float32)
    l1 = ct.full((HALF, 1), 0.0, dtype=ct.float32)
    a0 = ct.full((HALF, TILE_D), 0.0, dtype=ct.float32)
    a1 = ct.full((HALF, TILE_D), 0.0, dtype=ct.float32)
    Tc = ct.cdiv(K.shape[2], TILE_N)
    for j in range(0, Tc):
        kt = ct.reshape(ct.load(K, index=(b, h, 0, j), shape=(1, 1, TILE_D, TILE_N),
                                order=(0, 1, 3, 2), padding_mode=ZERO, latency=2),
                        (TILE_D, TILE_N))
        s0 = ct.mma(q0, kt, ct.full((HALF, TILE_N), 0.0, dtype=ct.float32))
        s1 = ct.mma(q1, kt, ct.full((HALF, TILE_N), 0.0, dtype=ct.float32))
        v = ct.reshape(ct.load(V, index=(b, h, j, 0), shape=(1, 1, TILE_N, TILE_D),
                               padding_mode=ZERO, latency=4), (TILE_N, TILE_D))
        p0, m0, l0, a0 = _soft(s0, m0, l0, a0, qk_scale)
        a0 = ct.mma(p0.astype(q0.dtype), v, a0)
        p1, m1, l1, a1 = _soft(s1, m1, l1, a1, qk_scale)
        a1 = ct.mma(p1.astype(q1.dtype), v, a1)
    a0 = ct.truediv(a0, l0, flush_to_zero=True, rounding_mode=RoundingMode.APPROX)
    a1 = ct.truediv(a1, l1, flush_to_zero=True, rounding_mode=RoundingMode.APPROX)
    ct.store(Out, index=(b, h, 2 * qt, 0),
             tile=ct.reshape(a0, (1, 1, HALF, TILE_D)).astype(Out.dtype))
    ct.store(Out, index=(b, h, 2 * qt + 1, 0),
             tile=ct.reshape(a1, (1, 1, HALF, TILE_D)).astype(Out.dtype))


def launcher(q, k, v, out, D, half, tn, occ, ww):
    B, H, S, _ = q.shape
    hints = (("occupancy", occ), ("num_worker_warps", ww))
    kern = fwd2.replace_hints(**{k_: v_ for k_, v_ in hints if v_})
    grid = (B * H * math.ceil(S / (2 * half)), 1, 1)
    args = (q, k, v, out, fmha.qk_scale_for(D, 6), H, D, half, tn)
    st = torch.cuda.current_stream()
    return lambda: ct.launch(st, grid, kern, args)


CANDS = {"pp64x128-ww8": (64, 128, 1, 8), "pp64x128-ww4": (64, 128, 1, None),
         "pp64x64-ww8": (64, 64, 1, 8), "pp128x128-ww8": (128, 128, 1, 8)}


def main():
    cands = {name: (lambda q, k, v, out, D, c=c: launcher(q, k, v, out, D, *c))
             for name, c in CANDS.items()}
    compare([(128, 16384), (128, 32768), (64, 16384)], cands, seed=11)


if __name__ == "__main__":
    main()

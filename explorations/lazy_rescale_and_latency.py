"""Exploration (H100, 2026-11-21): lazy softmax rescaling and latency-hint values for the D=128
kernel, beside cuDNN.

    python -m explorations.lazy_rescale_and_latency

Negative result, kept so it can be re-run: see explorations/README.md (the shared
measurement is explorations/harness.py)."""
import math

import cuda.tile as ct
import torch
from cuda.tile import PaddingMode, RoundingMode

from explorations.harness import compare
from kernels.device import fmha

CI = ct.Constant[int]; CB = ct.Constant[bool]
ZERO = PaddingMode.ZERO


@ct.kernel
def fwd(Q, K, V, Out, qk_scale: float, H: CI, TILE_D: CI, TILE_M: CI, TILE_N: CI,
        KLAT: CI, VLAT: CI, LAZY: CB, THR: CI):
    cta = ct.bid(0)
    n_q = ct.cdiv(Q.shape[2], TILE_M)
    bh = cta // n_q
    q_tile = cta % n_q
    b = bh // H
    h = bh % H
    q = ct.reshape(ct.load(Q, index=(b, h, q_tile, 0), shape=(1, 1, TILE_M, TILE_D),
                           padding_mode=ZERO), (TILE_M, TILE_D))
    m_i = ct.full((TILE_M, 1), -math.inf, dtype=ct.float32)
    l_i = ct.full((TILE_M, 1), 0.0, dtype=ct.float32)
    acc = ct.full((TILE_M, TILE_D), 0.0, dtype=ct.float32)
    Tc = ct.cdiv(K.shape[2], TILE_N)
    for j in range(0, Tc):
        kt = ct.load(K, index=(b, h, 0, j), shape=(1, 1, TILE_D, TILE_N), order=(0, 1, 3, 2),
                     padding_mode=ZERO, latency=KLAT)
        kt = ct.reshape(kt, (TILE_D, TILE_N))
        qk = ct.full((TILE_M, TILE_N), 0.0, dtype=ct.float32)
        qk = ct.mma(q, kt, qk)
        if LAZY:
            m_new = ct.maximum(m_i, ct.max(qk, axis=-1, keepdims=True) * qk_scale)
            grow = ct.max(m_new - m_i)
            if grow > THR:
                alpha = ct.exp2(m_i - m_new, flush_to_zero=True)
                acc = acc * alpha
                l_i = l_i * alpha
                m_i = m_new
            p = ct.exp2(qk * qk_scale - m_i, flush_to_zero=True)
            l_i = l_i + ct.sum(p, axis=-1, keepdims=True)
        else:
            m_ij = ct.maximum(m_i, ct.max(qk, axis=-1, keepdims=True) * qk_scale)
            p = ct.exp2(qk * qk_scale - m_ij, flush_to_zero=True)
            alpha = ct.exp2(m_i - m_ij, flush_to_zero=True)
            l_i = l_i * alpha + ct.sum(p, axis=-1, keepdims=True)
            acc = acc * alpha
            m_i = m_ij
        v = ct.load(V, index=(b, h, j, 0), shape=(1, 1, TILE_N, TILE_D), padding_mode=ZERO,
                    latency=VLAT)
        v = ct.reshape(v, (TILE_N, TILE_D))
        acc = ct.mma(p.astype(q.dtype), v, acc)
    acc = ct.truediv(acc, l_i, flush_to_zero=True, rounding_mode=RoundingMode.APPROX)
    ct.store(Out, index=(b, h, q_tile, 0),
             tile=ct.reshape(acc, (1, 1, TILE_M, TILE_D)).astype(Out.dtype))


KERNELS = {}
def kern(occ, ww):
    if (occ, ww) not in KERNELS:
        KERNELS[(occ, ww)] = fwd.replace_hints(occupancy=occ, num_worker_warps=ww)
    return KERNELS[(occ, ww)]


def scratch_launcher(q, k, v, out, D, tm, tn, klat, vlat, lazy, thr=8, occ=1, ww=8):
    B, H, S, _ = q.shape
    grid = (B * H * math.ceil(S / tm), 1, 1)
    args = (q, k, v, out, fmha.qk_scale_for(D, 6), H, D, tm, tn, klat, vlat, lazy, thr)
    k_ = kern(occ, ww)
    st = torch.cuda.current_stream()
    return lambda: ct.launch(st, grid, k_, args)


CANDS = {  # name: (klat, vlat, lazy, thr)
    "x-base(2,4)": (2, 4, False, 8),
    "x-lazy8": (2, 4, True, 8),
    "x-lat(1,2)": (1, 2, False, 8),
    "x-lat(3,6)": (3, 6, False, 8),
    "x-lat(4,8)": (4, 8, False, 8),
    "x-lat(4,4)": (4, 4, False, 8),
    "x-lazy8-lat(4,8)": (4, 8, True, 8),
}


def main():
    cands = {name: (lambda q, k, v, out, D, c=c: scratch_launcher(q, k, v, out, D, 128, 128, *c))
             for name, c in CANDS.items()}
    compare([(128, 4096), (128, 16384), (128, 32768), (64, 16384)], cands, seed=7)


if __name__ == "__main__":
    main()

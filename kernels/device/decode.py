"""Split-K/V decode in cuTile Python: a few query rows per head over a long K/V cache.

Decode is bound by reading K and V once. The split-Q forward (``kernels.device.fmha``) launches
one CTA per (head, Q tile): at S_q ≤ 16 that is B·H CTAs, each streaming its head's whole cache
with a 64- or 128-row Q tile of which 1..16 rows are real, and every query head of a GQA group
reads the same K/V again. Here (FlashDecoding with the group packed, as FlashAttention's
``flash_attn_with_kvcache`` and FlashInfer's decode kernels do):

* **Group packing** (``spec.decode.packing``). A CTA takes one K/V head and ``HG`` query heads
  of its group (``HG`` the largest power of two dividing G = H/H_kv with ``HG·SQP ≤ 64``) times
  their ``S_q`` rows, packed as the M dimension of one tile ``[HG·SQP, D]`` (``SQP`` = S_q
  rounded up to a power of two, and further so that M ≥ 16). Each K/V tile it loads serves all
  of them: with G = 8 and S_q = 1 one K/V read feeds 8 query rows, where the split-Q forward
  reads it 8 times.
* **Split K/V.** The grid is ``(splits, B·H_kv·G/HG)``; CTA (s, ·) scans the contiguous chunk of
  K/V tiles ``[s·chunk, (s+1)·chunk)`` (``chunk = ⌈n_tiles / splits⌉``, ``n_tiles`` of the cache
  capacity S_kv) with the online softmax of ``fmha`` (exp2, the scale folded by 1/ln 2), and
  writes an fp32 partial output ``Opart[s, b, h, r, :]`` (normalised by its own sum) and its
  log-sum-exp ``Lpart[s, b, h, r]`` in log2 units (``m + log2 l``). ``decode_combine`` merges
  them: ``m = max_s lse_s``, ``out = Σ 2^(lse_s − m)·o_s / Σ 2^(lse_s − m)``. A split that sees
  no key (its chunk starts beyond the sequence's length, or causal rows before the first key)
  writes ``lse = −inf`` and zeros, which the merge weighs 0; a row no split sees comes out 0.
  With one split (``SPLIT`` False) the kernel writes the output itself and nothing is merged.
  The merge is a programmatic dependent launch (sm_90's ``griddepcontrol``): the split kernel
  triggers it implicitly as its CTAs exit (an explicit trigger anywhere in it changes the
  register allocation of these 255-register builds, which then spill), and it waits at its start
  until the split grid has completed and its writes are visible, so its launch is prepared
  while the split kernel drains instead of after it.
* **Lengths.** ``KvLen`` int32 [B] is each sequence's cache length L_b ≤ S_kv, read on the
  device only (``ct.gather`` of one element): the host never syncs on it. With per-sequence
  lengths causal is bottom-right aligned per sequence, as FlashAttention's kvcache: query row r
  of S_q sees keys ``0 .. L_b − S_q + r`` (``BOTTOM_RIGHT``); without them (L_b = S_kv) causal
  keeps the front's meaning, SDPA's top-left ``is_causal`` (row r sees keys 0 .. r), so routing
  a call to this kernel never changes its result. Keys at or beyond L_b are masked in S and their
  V rows zeroed (a cache slot past the length may hold anything, NaN included: 0·NaN would poison
  the accumulator).

The K/V loop is split in two ``for`` loops with no ``if`` inside (cutile-notes.md §5.3): the
tiles every real row sees whole (``j < n_full``), then the masked tail (causal diagonal and the
ragged end), each clipped to the CTA's chunk. The mask replaces a score by ``fmha.NEG_BIG``
(finite, a power of two: the NaN trap of the ``fmha`` docstring; replaced rather than added so
that a NaN key past the length cannot leak into the row maximum); a row whose running maximum
stayed at that level saw no key and is written as dead (``lse = −inf``, zeros). ``REVERSE``
runs the chunk from its end (masked tail first): the same sums in another order, for a decode
loop that alternates the direction step by step so that each step starts on the tiles the
previous one left in L2 (``experiments.simulation.decode``: the prediction).

Worked example (S_kv = 1000, TILE_N = 64, 4 splits, bottom-right causal, S_q = 4): n_tiles =
16, chunk = 4; split 3 takes tiles 12..15; every row sees keys 0..996, so n_full = ⌊997/64⌋ =
15: tiles 12..14 run unmasked, tile 15 (keys 960..1023) masked. Top-left causal at S_q = 4 sees
keys 0..3 only: tile 0, masked, in split 0; splits 1..3 see nothing and write lse = −inf.
"""
from __future__ import annotations

import math
from functools import lru_cache

import cuda.tile as ct
from cuda.tile import PaddingMode

from kernels.device.fmha import NEG_BIG
from kernels.device.work import ConstBool, ConstInt

ZERO = PaddingMode.ZERO
DEAD = -2.0 ** 80     # a row maximum below this (in qk_scale units) saw only masked keys
LATENCY = 2           # TMA load latency hint of the K and V tiles (tactics notes: 2..4)
MERGE_OCCUPANCY = 8   # the combine's hint: 32 registers, ≤ 20 KB of shared memory on sm_90;
#                       1.04x hint 4 on the MQA fit set (explorations/README.md)


def _kv_step(q, K, V, b, kvh, j, m_i, l_i, acc, qk_scale, L, lim, TILE_D: ConstInt,
             TILE_N: ConstInt, CAUSAL: ConstBool, MASKED: ConstBool, LAT: ConstInt):
    """One K/V tile j of the online softmax for the packed rows (``lim`` [M, 1]: the last key
    each row sees, causal). Returns the new (m, l, acc)."""
    kt = ct.load(K, index=(b, kvh, 0, j), shape=(1, 1, TILE_D, TILE_N), order=(0, 1, 3, 2),
                 padding_mode=ZERO, latency=LAT)
    kt = ct.reshape(kt, (TILE_D, TILE_N))                                     # [D, TILE_N]
    qk = ct.full((q.shape[0], TILE_N), 0.0, dtype=ct.float32)
    qk = ct.mma(q, kt, qk)                                                    # [M, TILE_N]
    v = ct.load(V, index=(b, kvh, j, 0), shape=(1, 1, TILE_N, TILE_D), padding_mode=ZERO,
                latency=LAT)
    v = ct.reshape(v, (TILE_N, TILE_D))                                       # [TILE_N, D]
    if MASKED:
        offs_n = j * TILE_N + ct.arange(TILE_N, dtype=ct.int32)               # [TILE_N]
        keep = offs_n[None, :] < L                                            # [1, TILE_N]
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= lim)                            # [M, TILE_N]
        qk = ct.where(keep, qk, NEG_BIG)      # replaced, not added: a NaN key past L
        v = ct.where(offs_n[:, None] < L, v, ct.zeros((TILE_N, TILE_D), dtype=v.dtype))
    m_ij = ct.maximum(m_i, ct.max(qk, axis=-1, keepdims=True) * qk_scale)      # [M, 1]
    p = ct.exp2(qk * qk_scale - m_ij, flush_to_zero=True)                      # [M, TILE_N]
    alpha = ct.exp2(m_i - m_ij, flush_to_zero=True)                            # [M, 1]
    l_i = l_i * alpha + ct.sum(p, axis=-1, keepdims=True)                      # [M, 1]
    acc = acc * alpha                                                          # [M, D]
    acc = ct.mma(p.astype(q.dtype), v, acc)                                    # [M, D]
    return m_ij, l_i, acc


@ct.kernel
def decode_split(Q, K, V, KvLen, Opart, Lpart, Out, qk_scale: float, TILE_D: ConstInt,
                 TILE_N: ConstInt, HG: ConstInt, SQP: ConstInt, CAUSAL: ConstBool,
                 BOTTOM_RIGHT: ConstBool, SPLIT: ConstBool, LAT: ConstInt, REVERSE: ConstBool):
    """Q [B, H, S_q, D]; K, V [B, H_kv, S_kv, D]; KvLen int32 [B]; Opart fp32 [splits, B, H,
    S_q, D] and Lpart fp32 [splits, B, H, S_q] (``SPLIT``), else Out like Q (the final output).
    Grid (splits, B·H_kv·(G/HG)): bid(0) the split, bid(1) = (b·H_kv + kvh)·(G/HG) + head chunk.
    ``CAUSAL`` with ``BOTTOM_RIGHT``: row r sees keys 0 .. L_b − S_q + r (the kv_lengths
    semantics); without: keys 0 .. r (SDPA's ``is_causal``, the front's ``causal`` when no
    lengths are given)."""
    M = HG * SQP
    H = Q.shape[1]
    H_kv = K.shape[1]
    S_q = Q.shape[2]
    S_kv = K.shape[2]
    n_hc = H // H_kv // HG                    # head chunks per group
    s = ct.bid(0)
    u = ct.bid(1)
    b = u // (H_kv * n_hc)
    hu = u % (H_kv * n_hc)                    # head tile index along H in units of HG
    kvh = hu // n_hc
    L = ct.minimum(ct.gather(KvLen, b), S_kv)                                 # this sequence
    if BOTTOM_RIGHT:
        off = L - S_q                         # row r sees keys 0 .. off + r
    else:
        off = 0
    q = ct.load(Q, index=(b, hu, 0, 0), shape=(1, HG, SQP, TILE_D), padding_mode=ZERO)
    q = ct.reshape(q, (M, TILE_D))                                            # [M, D]
    row = ct.arange(M, dtype=ct.int32) % SQP                                  # [M] query row
    lim = ct.reshape(off + row, (M, 1))                                       # [M, 1]
    if CAUSAL:
        kend = ct.minimum(L, off + S_q)       # keys any real row sees
        full = ct.minimum(L, off + 1)         # keys every real row sees
    else:
        kend = L
        full = L
    # this split's chunk of K/V tiles (of the capacity), clipped to the keys seen
    n_tiles = ct.cdiv(S_kv, TILE_N)
    chunk = ct.cdiv(n_tiles, ct.num_blocks(0))
    t0 = s * chunk
    t1 = ct.minimum(t0 + chunk, ct.cdiv(ct.maximum(kend, 0), TILE_N))
    n_full = ct.maximum(full, 0) // TILE_N
    m_i = ct.full((M, 1), -math.inf, dtype=ct.float32)
    l_i = ct.full((M, 1), 0.0, dtype=ct.float32)
    acc = ct.full((M, TILE_D), 0.0, dtype=ct.float32)
    mid = ct.maximum(t0, ct.minimum(t1, n_full))
    if REVERSE:                     # the chunk from its end: masked tail, then the rest
        for i in range(0, t1 - mid):
            m_i, l_i, acc = _kv_step(q, K, V, b, kvh, t1 - 1 - i, m_i, l_i, acc, qk_scale, L,
                                     lim, TILE_D, TILE_N, CAUSAL, True, LAT)
        for i in range(0, mid - t0):
            m_i, l_i, acc = _kv_step(q, K, V, b, kvh, mid - 1 - i, m_i, l_i, acc, qk_scale, L,
                                     lim, TILE_D, TILE_N, CAUSAL, False, LAT)
    else:
        for j in range(t0, mid):                                              # unmasked
            m_i, l_i, acc = _kv_step(q, K, V, b, kvh, j, m_i, l_i, acc, qk_scale, L, lim,
                                     TILE_D, TILE_N, CAUSAL, False, LAT)
        for j in range(mid, t1):                                              # masked tail
            m_i, l_i, acc = _kv_step(q, K, V, b, kvh, j, m_i, l_i, acc, qk_scale, L, lim,
                                     TILE_D, TILE_N, CAUSAL, True, LAT)
    dead = m_i < DEAD                                                         # [M, 1]
    o = ct.where(dead, 0.0, acc / ct.where(dead, 1.0, l_i))                   # [M, D]
    if SPLIT:
        lse = ct.where(dead, -math.inf, m_i + ct.log2(ct.where(dead, 1.0, l_i)))  # [M, 1]
        ct.store(Opart, index=(s, b, hu, 0, 0), tile=ct.reshape(o, (1, 1, HG, SQP, TILE_D)))
        ct.store(Lpart, index=(s, b, hu, 0), tile=ct.reshape(lse, (1, 1, HG, SQP)))
    else:
        ct.store(Out, index=(b, hu, 0, 0),
                 tile=ct.reshape(o, (1, HG, SQP, TILE_D)).astype(Out.dtype))


@ct.kernel
def decode_combine(Opart, Lpart, Out, TILE_D: ConstInt, CH: ConstInt):
    """Merge the splits of one query row: Opart fp32 [splits, B, H, S_q, D], Lpart fp32
    [splits, B, H, S_q] (log2 units, −inf for a split that saw nothing) into Out [B, H, S_q, D]
    (q's dtype). Grid (B·H·S_q,). An online merge over chunks of ``CH`` splits
    (``spec.decode.merge_chunk``): each step loads CH partials at once (splits past the last
    padded: LSE −inf, output 0), takes their maximum LSE into the running ``m``, rescales what it
    holds and adds the chunk's weighted sum; a row whose every split is −inf keeps ``l = 0`` and
    is written 0. Launched as a programmatic dependent of the split kernel (``DecodeLaunch``),
    it waits here for the split grid's completion and the visibility of its partials."""
    ct.grid_dependency_control_wait()
    H = Out.shape[1]
    S_q = Out.shape[2]
    r = ct.bid(0) % S_q
    b = ct.bid(0) // S_q // H
    h = ct.bid(0) // S_q % H
    n_chunks = ct.cdiv(Opart.shape[0], CH)
    m = ct.full((1, 1), -math.inf, dtype=ct.float32)
    l_sum = ct.full((1, 1), 0.0, dtype=ct.float32)
    acc = ct.full((1, TILE_D), 0.0, dtype=ct.float32)
    for c in range(0, n_chunks):
        lse = ct.reshape(ct.load(Lpart, index=(c, b, h, r), shape=(CH, 1, 1, 1),
                                 padding_mode=PaddingMode.NEG_INF, latency=2), (CH, 1))
        o = ct.reshape(ct.load(Opart, index=(c, b, h, r, 0), shape=(CH, 1, 1, 1, TILE_D),
                               padding_mode=ZERO, latency=2), (CH, TILE_D))  # [CH, D]
        m_new = ct.maximum(m, ct.max(lse, axis=0, keepdims=True))            # [1, 1]
        m_safe = ct.where(m_new == -math.inf, 0.0, m_new)   # no (−inf) − (−inf)
        alpha = ct.exp2(m - m_safe)
        w = ct.exp2(lse - m_safe)                                             # [CH, 1]
        acc = acc * alpha + ct.sum(o * w, axis=0, keepdims=True)              # [1, D]
        l_sum = l_sum * alpha + ct.sum(w, axis=0, keepdims=True)
        m = m_new
    out = ct.where(l_sum > 0.0, acc / ct.where(l_sum > 0.0, l_sum, 1.0), 0.0)
    ct.store(Out, index=(b, h, r, 0), tile=ct.reshape(out, (1, 1, 1, TILE_D)).astype(Out.dtype))


@lru_cache(maxsize=None)
def get_kernels(occupancy: int | None = None, merge_occupancy: int | None = None):
    """(split kernel, combine kernel), each with its occupancy hint (None: the compiler's for
    the split kernel, ``MERGE_OCCUPANCY`` for the combine); cached (``replace_hints`` makes a new
    JIT cache)."""
    split = decode_split.replace_hints(occupancy=occupancy) if occupancy else decode_split
    return split, decode_combine.replace_hints(occupancy=merge_occupancy or MERGE_OCCUPANCY)


def split_constants(*, D: int, tile_n: int, hg: int, sqp: int, causal: bool,
                    bottom_right: bool, split: bool, latency: int = LATENCY,
                    reverse: bool = False) -> tuple:
    """The constant arguments of ``decode_split`` after (…, qk_scale), in kernel order."""
    return (int(D), int(tile_n), int(hg), int(sqp), bool(causal),
            bool(causal and bottom_right), bool(split), int(latency), bool(reverse))


def combine_constants(*, D: int, chunk: int) -> tuple:
    """The constant arguments of ``decode_combine`` after (Opart, Lpart, Out)."""
    return (int(D), int(chunk))

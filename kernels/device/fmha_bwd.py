"""FlashAttention backward in cuTile Python, in two forms: two passes (a dQ pass that also makes Δ,
then a dK/dV pass; deterministic) or one pass (dK/dV and dQ together, dQ summed across CTAs by
TMA bulk reduce), with the scan order and CTA schedule taken from the same ``spec`` vocabulary as
the forward.

With ``P = exp2(Q·Kᵀ·c − LSE)`` recomputed from the forward's log-sum-exp (``c`` = scale / ln 2,
``LSE`` in the same log2 units, ``kernels.device.fmha``) and ``Δ = rowsum(dO ∘ O)``::

    dV = Pᵀ·dO        dS = P ∘ (dO·Vᵀ − Δ)        dK = scale · dSᵀ·Q        dQ = scale · dS·K

Per (Q tile, K/V tile) pair the two passes make seven MMAs (dK/dV: Sᵀ, dV, dPᵀ, dK; dQ: S, dP,
dQ, recomputing S and dP) and the one pass five (dK/dV's four and ``dS·K``), at the price of a
``TILE_M × D`` fp32 reduce into L2 per pair (FlashAttention-3's scheme; FlashAttention-2's
per-element atomics cost 1.5-2.1x the two passes in cuTile, ``explorations/fused_bwd_probe.py``).
The sum's order across CTAs is not fixed, so the one pass is not bitwise repeatable.

Two passes, launched in this order (a third kernel with the group split), no atomics:

- ``bwd_dq``: a work item is one Q tile; its CTA keeps Q, dO, LSE, Δ and the dQ accumulator and
  scans the K/V tiles, exactly like the forward (the 3-loop form of ``kernels.device.fmha``).
  Each query row belongs to exactly one item, so the item first makes its rows' Δ (one load of
  its O tile beside the dO tile it keeps anyway) and stores it for the dK/dV pass: no separate
  Δ kernel, one launch and one read of dO fewer per step.
- ``bwd_dkdv``: a work item is one K/V tile ``[TILE_N, D]`` of a K/V head; its CTA keeps K, V and
  the fp32 dK, dV accumulators on chip and *scans the Q tiles* (Q, dO, LSE, Δ) of every query head
  of its group (GQA/MQA: the group's dK/dV are summed on chip, never in memory). This is the
  forward turned inside out: the streamed operand is now Q/dO (twice the bytes per step of the
  forward's K/V), and every CTA working on the same head streams the same Q/dO tiles, so the
  order of that scan decides how much of it a neighbour finds in L2.
- ``bwd_split_sum``: with the dK/dV pass's group split (few K/V heads), its fp32 partials added
  in a fixed order into dK and dV, one launch for both.

One pass: ``bwd_prep`` (Δ, and zeros for an fp32 dQ sum), ``bwd_dkdv`` with ``DQ`` (each step
also reduces its ``dS·K`` into that sum; ``bwd_split_sum`` after it with the split), then
``bwd_dq_cast`` (dQ = scale · sum, rounded once).

The scan order of each pass is a ``spec.OrderKind`` code: with ``r = reversed_for(...)`` (1: this
item's scan runs backward) a CTA owning several items (persistent) alternates its scan direction
per item under the sawtooth order, so the first tiles of an item are the ones its previous item
touched last (the forward's argument, applied to the Q scan of dK/dV and the K/V scan of dQ).
The CTA schedules are ``spec.ScheduleKind`` codes: GRID (one item per CTA) and PERSISTENT
(P CTAs, items dealt round-robin, q-major or head-major). Worked example (4 Q tiles, one CTA owning
two K/V tiles, sawtooth): its 1st K/V tile reads Q tiles 0 1 2 3, its 2nd reads 3 2 1 0.

The trace builds ``bwd_dkdv_trace`` and ``bwd_dq_trace`` (``kernels.host.backward.trace_backward``)
are the two passes with ``TRACE`` set: one more argument, an int32 record [n_ctas, steps, 4]
into which every step stores (b, query head, Q tile, K/V tile) as the forward's trace build does
(``kernels.device.fmha._record``), the layout of
``spec.backward_trace.backward_visits(...).table()`` (tests/gpu/test_backward_trace.py compares
them). They are separate entry points, as
``fmha_fwd_lse`` is, so ``bwd_dkdv`` and ``bwd_dq`` keep their signatures, and with ``TRACE`` a
constant False their code is what it was before the trace builds existed.

Masking. Causal is top-left (query row r sees keys 0..r, as SDPA's ``is_causal``). In dK/dV the
Q tiles entirely above the diagonal are skipped, those crossing it run in a masked loop and the
rest in a loop with no mask code; in dQ the K/V tiles are split like the forward's. Ragged ends
need no mask in dK/dV: a Q tile's rows past ``S_q`` read as zeros (Q, dO, LSE and Δ zero-padded)
and contribute ``Pᵀ·0 = 0`` to dV and ``0 · Q = 0`` to dK. K/V rows past ``S_kv`` only produce dK/dV
rows that the store clips. In dQ the ragged last K/V tile is masked (``P`` set to 0 there): its
zero K rows would give ``exp2(−LSE)``, which overflows for rows whose scores are all very negative,
and ``inf · 0`` is NaN.
"""
from __future__ import annotations

from functools import lru_cache

import cuda.tile as ct

from kernels.device.fmha import ZERO, _record
from kernels.device.work import (
    ConstBool,
    ConstInt,
    kv_range,
    one_item,
    q_range,
    reversed_for,
    work_bh,
    work_bound,
    work_live,
    work_start,
    work_tile,
    work_valid,
)


# ------------------------------------------------------------------------------------------------
# dK, dV: one K/V tile per work item, the Q tiles of its group streamed
# ------------------------------------------------------------------------------------------------
def _dkdv_step(Q, dO, LSE, Delta, dQacc, k, v, dk, dv, b, h, m, qk_scale, offs_n, k_len,
               TILE_D: ConstInt, TILE_M: ConstInt, TILE_N: ConstInt, MASKED: ConstBool,
               DQ: ConstBool, EVEN_K: ConstBool):
    """One Q tile ``m`` of head (b, h) against this CTA's K/V tile; returns (dk, dv). With
    ``DQ`` (the one-pass backward) it also adds this pair's ``dS·K`` to the fp32 dQ sum of the
    Q tile's rows (unscaled) by TMA bulk reduce, at D=128 in two halves of 64 columns (one
    [TILE_M, 64] fp32 accumulator live at a time, and half the staging for the reduce: no spill
    with two CTAs per SM, 16 KB less shared memory on BASE); the K/V rows past ``S_kv`` of a
    ragged last tile are then masked, since their zero K rows would carry ``Pᵀ = exp2(−LSE)``
    (inf for very negative rows) into dQ as ``inf · 0``."""
    qt = ct.load(Q, index=(b, h, 0, m), shape=(1, 1, TILE_D, TILE_M), order=(0, 1, 3, 2),
                 padding_mode=ZERO, latency=2)
    qt = ct.reshape(qt, (TILE_D, TILE_M))                                     # Qᵀ [D, TILE_M]
    st = ct.mma(k, qt, ct.full((TILE_N, TILE_M), 0.0, dtype=ct.float32))      # Sᵀ [TILE_N, TILE_M]
    lse = ct.reshape(ct.load(LSE, index=(b, h, m), shape=(1, 1, TILE_M), padding_mode=ZERO),
                     (1, TILE_M))                                             # [1, TILE_M]
    pt = ct.exp2(st * qk_scale - lse, flush_to_zero=True)                     # Pᵀ [TILE_N, TILE_M]
    if MASKED:
        offs_m = m * TILE_M + ct.arange(TILE_M, dtype=ct.int32)               # [TILE_M]
        pt = ct.where(offs_m[None, :] >= offs_n[:, None], pt, 0.0)
    if DQ and not EVEN_K:
        pt = ct.where(offs_n[:, None] < k_len, pt, 0.0)
    do = ct.load(dO, index=(b, h, m, 0), shape=(1, 1, TILE_M, TILE_D), padding_mode=ZERO,
                 latency=3)
    do = ct.reshape(do, (TILE_M, TILE_D))                                     # [TILE_M, D]
    dv = ct.mma(pt.astype(do.dtype), do, dv)                                  # [TILE_N, D]
    dpt = ct.mma(v, ct.transpose(do),
                 ct.full((TILE_N, TILE_M), 0.0, dtype=ct.float32))            # dPᵀ [TILE_N, TILE_M]
    delta = ct.reshape(ct.load(Delta, index=(b, h, m), shape=(1, 1, TILE_M), padding_mode=ZERO),
                       (1, TILE_M))                                           # [1, TILE_M]
    dst = (pt * (dpt - delta)).astype(do.dtype)                              # dSᵀ [TILE_N, TILE_M]
    dk = ct.mma(dst, ct.transpose(qt), dk)                                    # [TILE_N, D]
    if DQ:
        HALF = TILE_D // 2 if TILE_D > 64 else TILE_D
        view = dQacc.tiled_view((1, 1, TILE_M, HALF))
        for c in range(TILE_D // HALF):
            dq = ct.mma(ct.transpose(dst), ct.extract(k, (0, c), (TILE_N, HALF)),
                        ct.full((TILE_M, HALF), 0.0, dtype=ct.float32))
            view.atomic_store_add((b, h, m, c), ct.reshape(dq, (1, 1, TILE_M, HALF)))
    return dk, dv


def dkdv_tile(Q, K, V, dO, LSE, Delta, dK, dV, dQacc, Trace, qk_scale, sm_scale, b, slot,
              n_tile, r, cta, step0, SPLIT, HEADS, cfg):
    """dK, dV of K/V tile ``n_tile`` of output slot (b, slot): K/V head ``slot // SPLIT`` and
    its query heads ``slot·HEADS .. slot·HEADS + HEADS − 1``, whose Q tiles are scanned forward
    (r=0) or backward (r=1; heads in reverse too). Without a split (SPLIT=1, HEADS = the group
    size) the slot is the K/V head and dK, dV are the gradients; with one, dK, dV are fp32
    partial sums [B, H_kv·SPLIT, S_kv, D] that the host adds over the split.

    ``TRACE`` (the trace build, ``bwd_dkdv_trace``): step ``i`` of the item stores (b, query
    head, Q tile, ``n_tile``) at ``Trace[cta, step0 + i]``. Returns the item's steps. ``DQ``:
    each step also adds its dQ share to ``dQacc`` (``_dkdv_step``).
    ``cfg`` = (TILE_D, TILE_M, TILE_N, CAUSAL, EVEN_K, DQ, TRACE), the build's constants."""
    TILE_D, TILE_M, TILE_N, CAUSAL, EVEN_K, DQ, TRACE = cfg
    kvh = slot // SPLIT
    n_q = ct.cdiv(Q.shape[2], TILE_M)
    k_len = K.shape[2]
    k = ct.reshape(ct.load(K, index=(b, kvh, n_tile, 0), shape=(1, 1, TILE_N, TILE_D),
                           padding_mode=ZERO), (TILE_N, TILE_D))               # [TILE_N, D]
    v = ct.reshape(ct.load(V, index=(b, kvh, n_tile, 0), shape=(1, 1, TILE_N, TILE_D),
                           padding_mode=ZERO), (TILE_N, TILE_D))               # [TILE_N, D]
    offs_n = n_tile * TILE_N + ct.arange(TILE_N, dtype=ct.int32)              # [TILE_N]
    dk = ct.full((TILE_N, TILE_D), 0.0, dtype=ct.float32)
    dv = ct.full((TILE_N, TILE_D), 0.0, dtype=ct.float32)
    # Q tiles below m_start see none of these keys; from m_full on they see all of them
    m_start, m_full = q_range(n_tile, n_q, TILE_M, TILE_N, CAUSAL)
    if CAUSAL:
        n_masked = m_full - m_start
        n_free = n_q - m_full
    else:
        n_masked = 0
        n_free = n_q
    for g in range(0, HEADS):
        h = slot * HEADS + g + r * (HEADS - 1 - 2 * g)
        s0 = step0 + g * (n_q - m_start)               # the trace build's step of this head
        if CAUSAL:
            # forward scan: the diagonal (masked) tiles first, ascending
            for i in range(0, (1 - r) * n_masked):
                if TRACE:
                    _record(Trace, cta, s0 + i, b, h, m_start + i, n_tile)
                dk, dv = _dkdv_step(Q, dO, LSE, Delta, dQacc, k, v, dk, dv, b, h, m_start + i,
                                    qk_scale, offs_n, k_len, TILE_D, TILE_M, TILE_N, True,
                                    DQ, EVEN_K)
            for i in range(0, n_free):
                m = m_full + i + r * (n_free - 1 - 2 * i)
                if TRACE:
                    _record(Trace, cta, s0 + (1 - r) * n_masked + i, b, h, m, n_tile)
                dk, dv = _dkdv_step(Q, dO, LSE, Delta, dQacc, k, v, dk, dv, b, h, m,
                                    qk_scale, offs_n, k_len, TILE_D, TILE_M, TILE_N, False,
                                    DQ, EVEN_K)
            # backward scan: the diagonal tiles last, descending
            for i in range(0, r * n_masked):
                if TRACE:
                    _record(Trace, cta, s0 + n_free + i, b, h, m_full - 1 - i, n_tile)
                dk, dv = _dkdv_step(Q, dO, LSE, Delta, dQacc, k, v, dk, dv, b, h, m_full - 1 - i,
                                    qk_scale, offs_n, k_len, TILE_D, TILE_M, TILE_N, True,
                                    DQ, EVEN_K)
        else:
            for i in range(0, n_q):
                m = i + r * (n_q - 1 - 2 * i)
                if TRACE:
                    _record(Trace, cta, s0 + i, b, h, m, n_tile)
                dk, dv = _dkdv_step(Q, dO, LSE, Delta, dQacc, k, v, dk, dv, b, h, m,
                                    qk_scale, offs_n, k_len, TILE_D, TILE_M, TILE_N, False,
                                    DQ, EVEN_K)
    dk = dk * sm_scale
    ct.store(dK, index=(b, slot, n_tile, 0),
             tile=ct.reshape(dk, (1, 1, TILE_N, TILE_D)).astype(dK.dtype))
    ct.store(dV, index=(b, slot, n_tile, 0),
             tile=ct.reshape(dv, (1, 1, TILE_N, TILE_D)).astype(dV.dtype))
    return HEADS * (n_q - m_start)


def bwd_dkdv_impl(Q, K, V, dO, LSE, Delta, dK, dV, dQacc, Trace, qk_scale, sm_scale, N_SLOTS,
                  SPLIT, sched, cfg):
    """The body of ``bwd_dkdv`` (and, with ``TRACE``, of ``bwd_dkdv_trace``): this CTA's work
    items (spec ``CtaSchedule.work_items`` on ``spec.backward_trace.PassGrid.items_grid``,
    through the forward's work iterator, ``kernels.device.work``), one ``dkdv_tile`` each.
    ``sched`` = (ORDER, GROUP, SCHED, WORK); ``cfg`` as ``dkdv_tile``'s."""
    ORDER, GROUP, SCHED, WORK = sched
    cta = ct.bid(0)
    TILE_N = cfg[2]
    n_kv = ct.cdiv(K.shape[2], TILE_N)
    n_bh = K.shape[0] * N_SLOTS
    heads = Q.shape[1] // N_SLOTS                  # query heads per item
    ws = work_start(cta, n_kv, n_bh, SCHED, 1, 1)
    if one_item(SCHED):
        bh = work_bh(ws, 0, cta, n_kv, n_bh, SCHED, WORK)
        dkdv_tile(Q, K, V, dO, LSE, Delta, dK, dV, dQacc, Trace, qk_scale, sm_scale, bh // N_SLOTS,
                  bh % N_SLOTS, work_tile(ws, 0, cta, n_kv, n_bh, SCHED, WORK),
                  reversed_for(ORDER, GROUP, 0, cta), cta, 0, SPLIT, heads, cfg)
    else:
        bound = work_bound(ws, n_kv, SCHED, 1)
        it = 0
        step = 0
        while work_valid(ws, it, bound, SCHED):   # a while, not a for (fmha's docstring)
            bh = work_bh(ws, it, cta, n_kv, n_bh, SCHED, WORK)
            n_tile = work_tile(ws, it, cta, n_kv, n_bh, SCHED, WORK)
            if work_live(ws, it, cta, SCHED):
                tc = dkdv_tile(Q, K, V, dO, LSE, Delta, dK, dV, dQacc, Trace, qk_scale, sm_scale,
                               bh // N_SLOTS, bh % N_SLOTS, n_tile,
                               reversed_for(ORDER, GROUP, it, cta), cta, step, SPLIT, heads,
                               cfg)
                step = step + tc
            it = it + 1


@ct.kernel
def bwd_dkdv(Q, K, V, dO, LSE, Delta, dK, dV, dQacc, qk_scale: float, sm_scale: float,
             N_SLOTS: int, SPLIT: int, TILE_D: ConstInt, TILE_M: ConstInt,
             TILE_N: ConstInt, CAUSAL: ConstBool, EVEN_K: ConstBool, DQ: ConstBool,
             ORDER: ConstInt, GROUP: ConstInt, SCHED: ConstInt, WORK: ConstInt):
    """Q, dO [B, H, S_q, D]; K, V [B, H_kv, S_kv, D]; dK, dV [B, N_SLOTS, S_kv, D] with
    N_SLOTS = H_kv·SPLIT (``dkdv_tile``); LSE, Delta fp32 [B, H, S_q]. Work items
    (b, slot, K/V tile): GRID (one per CTA, K/V tiles of a slot fastest) or PERSISTENT (round
    ``it`` takes items it·P .. it·P + P − 1; q-major: K/V tiles fastest, head-major: slots
    fastest).

    The split: with few K/V heads (MQA: one) the items number B·H_kv·⌈S_kv/TILE_N⌉, fewer than
    the GPU holds, and each scans every query head of its group. SPLIT > 1 deals a group's query
    heads over SPLIT items, each writing a partial sum; ``bwd_split_sum`` adds them in a fixed
    order (deterministic, no atomics).

    ``DQ`` (the one-pass backward): dQacc, fp32 [B, H, S_q, D] zeroed by ``bwd_prep``, receives
    every step's ``dS·K`` by TMA bulk reduce (not scaled; ``bwd_dq_cast`` scales and rounds it),
    and no dQ pass runs. Without it dQacc is not touched (the host passes dK)."""
    bwd_dkdv_impl(Q, K, V, dO, LSE, Delta, dK, dV, dQacc, dK, qk_scale, sm_scale, N_SLOTS,
                  SPLIT, (ORDER, GROUP, SCHED, WORK),
                  (TILE_D, TILE_M, TILE_N, CAUSAL, EVEN_K, DQ, False))


@ct.kernel
def bwd_dkdv_trace(Q, K, V, dO, LSE, Delta, dK, dV, dQacc, Trace, qk_scale: float,
                   sm_scale: float, N_SLOTS: int, SPLIT: int, TILE_D: ConstInt, TILE_M: ConstInt,
                   TILE_N: ConstInt, CAUSAL: ConstBool, EVEN_K: ConstBool, DQ: ConstBool,
                   ORDER: ConstInt, GROUP: ConstInt, SCHED: ConstInt, WORK: ConstInt):
    """The trace build of ``bwd_dkdv`` (same arguments and constants, plus ``Trace``, int32
    [n_ctas, steps, 4]): it also stores per CTA and step the (b, query head, Q tile, K/V tile)
    read, the layout of ``spec.backward_trace.backward_visits(...).table()``."""
    bwd_dkdv_impl(Q, K, V, dO, LSE, Delta, dK, dV, dQacc, Trace, qk_scale, sm_scale, N_SLOTS,
                  SPLIT, (ORDER, GROUP, SCHED, WORK),
                  (TILE_D, TILE_M, TILE_N, CAUSAL, EVEN_K, DQ, True))


@ct.kernel
def bwd_split_sum(PK, PV, dK, dV, SPLIT: int, TILE_D: ConstInt, TILE_N: ConstInt):
    """Grid (⌈S_kv/TILE_N⌉, B·H_kv, 2): the group split's partials summed, one launch for both
    gradients. PK, PV fp32 [B, H_kv·SPLIT, S_kv, D] (``bwd_dkdv``'s outputs with SPLIT > 1); dK
    (z = 0) or dV (z = 1) [B, H_kv, S_kv, D] = the SPLIT partials of its K/V head added in slot
    order (fixed: deterministic), rounded once to the gradient's dtype."""
    n = ct.bid(0)
    bh = ct.bid(1)
    H_kv = dK.shape[1]
    b = bh // H_kv
    kvh = bh % H_kv
    if ct.bid(2) == 0:
        _split_sum_tile(PK, dK, b, kvh, n, SPLIT, TILE_D, TILE_N)
    else:
        _split_sum_tile(PV, dV, b, kvh, n, SPLIT, TILE_D, TILE_N)


def _split_sum_tile(P, G, b, kvh, n, SPLIT, TILE_D: ConstInt, TILE_N: ConstInt):
    """G's K/V tile ``n`` of head (b, kvh) = P's SPLIT partials of it, added in slot order."""
    acc = ct.full((TILE_N, TILE_D), 0.0, dtype=ct.float32)
    for s in range(0, SPLIT):
        acc = acc + ct.reshape(ct.load(P, index=(b, kvh * SPLIT + s, n, 0),
                                       shape=(1, 1, TILE_N, TILE_D), padding_mode=ZERO),
                               (TILE_N, TILE_D))
    ct.store(G, index=(b, kvh, n, 0), tile=ct.reshape(acc, (1, 1, TILE_N, TILE_D)).astype(G.dtype))


@ct.kernel
def bwd_prep(O, dO, Delta, dQacc, TILE_D: ConstInt, TILE_M: ConstInt):
    """Grid (⌈S_q/TILE_M⌉, B·H): the one-pass backward's first launch. Δ = rowsum(dO ∘ O) of
    each row (fp32 [B, H, S_q]) and zeros for the fp32 dQ sum [B, H, S_q, D] that ``bwd_dkdv``
    with ``DQ`` reduces into."""
    m = ct.bid(0)
    bh = ct.bid(1)
    H = O.shape[1]
    b = bh // H
    h = bh % H
    o = ct.load(O, index=(b, h, m, 0), shape=(1, 1, TILE_M, TILE_D), padding_mode=ZERO)
    do = ct.load(dO, index=(b, h, m, 0), shape=(1, 1, TILE_M, TILE_D), padding_mode=ZERO)
    delta = ct.sum(o.astype(ct.float32) * do.astype(ct.float32), axis=-1)   # [1, 1, TILE_M]
    ct.store(Delta, index=(b, h, m), tile=ct.reshape(delta, (1, 1, TILE_M)))
    ct.store(dQacc, index=(b, h, m, 0),
             tile=ct.full((1, 1, TILE_M, TILE_D), 0.0, dtype=ct.float32))


@ct.kernel
def bwd_dq_cast(dQacc, dQ, sm_scale: float, TILE_D: ConstInt, TILE_M: ConstInt):
    """Grid (⌈S_q/TILE_M⌉, B·H): the one-pass backward's last launch, dQ = scale · the fp32
    sum ``bwd_dkdv`` reduced, rounded once to dQ's dtype."""
    m = ct.bid(0)
    bh = ct.bid(1)
    H = dQ.shape[1]
    acc = ct.load(dQacc, index=(bh // H, bh % H, m, 0), shape=(1, 1, TILE_M, TILE_D),
                  padding_mode=ZERO)
    ct.store(dQ, index=(bh // H, bh % H, m, 0), tile=(acc * sm_scale).astype(dQ.dtype))


# ------------------------------------------------------------------------------------------------
# dQ: one Q tile per work item, the K/V tiles streamed (the forward's scan)
# ------------------------------------------------------------------------------------------------
def _dq_step(K, V, q, do, lse, delta, dq, b, kvh, j, qk_scale, offs_m, k_len,
             TILE_D: ConstInt, TILE_M: ConstInt, TILE_N: ConstInt, MASKED: ConstBool,
             CAUSAL: ConstBool):
    """One K/V tile ``j`` against this CTA's Q tile; returns dq."""
    kt = ct.load(K, index=(b, kvh, 0, j), shape=(1, 1, TILE_D, TILE_N), order=(0, 1, 3, 2),
                 padding_mode=ZERO, latency=2)
    kt = ct.reshape(kt, (TILE_D, TILE_N))                                     # Kᵀ [D, TILE_N]
    s = ct.mma(q, kt, ct.full((TILE_M, TILE_N), 0.0, dtype=ct.float32))       # [TILE_M, TILE_N]
    p = ct.exp2(s * qk_scale - lse, flush_to_zero=True)                       # [TILE_M, TILE_N]
    if MASKED:
        offs_n = j * TILE_N + ct.arange(TILE_N, dtype=ct.int32)               # [TILE_N]
        keep = offs_n[None, :] < k_len                                        # [1, TILE_N]
        if CAUSAL:
            keep = keep & (offs_m[:, None] >= offs_n[None, :])                # [TILE_M, TILE_N]
        p = ct.where(keep, p, 0.0)
    vt = ct.load(V, index=(b, kvh, 0, j), shape=(1, 1, TILE_D, TILE_N), order=(0, 1, 3, 2),
                 padding_mode=ZERO, latency=4)
    vt = ct.reshape(vt, (TILE_D, TILE_N))                                     # Vᵀ [D, TILE_N]
    dp = ct.mma(do, vt, ct.full((TILE_M, TILE_N), 0.0, dtype=ct.float32))     # [TILE_M, TILE_N]
    ds = p * (dp - delta)                                                     # [TILE_M, TILE_N]
    return ct.mma(ds.astype(q.dtype), ct.transpose(kt), dq)                   # [TILE_M, D]


def dq_tile(Q, K, V, O, dO, LSE, Delta, dQ, Trace, qk_scale, sm_scale, b, h, kvh, q_tile, r,
            cta, step0, cfg):
    """dQ of Q tile ``q_tile`` of head (b, h), K/V scanned forward (r=0) or backward (r=1);
    first Δ = rowsum(dO ∘ O) of its rows, used here and stored for the dK/dV pass that follows.
    ``TRACE`` (``bwd_dq_trace``): step ``i`` stores (b, h, ``q_tile``, K/V tile) at
    ``Trace[cta, step0 + i]``, as the forward's ``_scan``. Returns the item's steps.
    ``cfg`` = (TILE_D, TILE_M, TILE_N, CAUSAL, EVEN_K, TRACE), the build's constants."""
    TILE_D, TILE_M, TILE_N, CAUSAL, EVEN_K, TRACE = cfg
    q_len = Q.shape[2]
    k_len = K.shape[2]
    n_kv = ct.cdiv(k_len, TILE_N)
    q = ct.reshape(ct.load(Q, index=(b, h, q_tile, 0), shape=(1, 1, TILE_M, TILE_D),
                           padding_mode=ZERO), (TILE_M, TILE_D))               # [TILE_M, D]
    do = ct.reshape(ct.load(dO, index=(b, h, q_tile, 0), shape=(1, 1, TILE_M, TILE_D),
                            padding_mode=ZERO), (TILE_M, TILE_D))              # [TILE_M, D]
    lse = ct.reshape(ct.load(LSE, index=(b, h, q_tile), shape=(1, 1, TILE_M), padding_mode=ZERO),
                     (TILE_M, 1))                                             # [TILE_M, 1]
    o = ct.reshape(ct.load(O, index=(b, h, q_tile, 0), shape=(1, 1, TILE_M, TILE_D),
                           padding_mode=ZERO), (TILE_M, TILE_D))               # [TILE_M, D]
    delta = ct.sum(o.astype(ct.float32) * do.astype(ct.float32), axis=-1)    # [TILE_M]
    ct.store(Delta, index=(b, h, q_tile), tile=ct.reshape(delta, (1, 1, TILE_M)))
    delta = ct.reshape(delta, (TILE_M, 1))                                    # [TILE_M, 1]
    offs_m = q_tile * TILE_M + ct.arange(TILE_M, dtype=ct.int32)              # [TILE_M]
    dq = ct.full((TILE_M, TILE_D), 0.0, dtype=ct.float32)
    Tc, mask_start = kv_range(q_tile, q_len, n_kv, TILE_M, TILE_N, CAUSAL, EVEN_K)
    if CAUSAL or not EVEN_K:
        n_masked = Tc - mask_start
        for i in range(0, r * n_masked):
            if TRACE:
                _record(Trace, cta, step0 + i, b, h, q_tile, Tc - 1 - i)
            dq = _dq_step(K, V, q, do, lse, delta, dq, b, kvh, Tc - 1 - i, qk_scale, offs_m,
                          k_len, TILE_D, TILE_M, TILE_N, True, CAUSAL)
        for i in range(0, mask_start):
            if TRACE:
                _record(Trace, cta, step0 + r * n_masked + i, b, h, q_tile,
                        i + r * (mask_start - 1 - 2 * i))
            dq = _dq_step(K, V, q, do, lse, delta, dq, b, kvh, i + r * (mask_start - 1 - 2 * i),
                          qk_scale, offs_m, k_len, TILE_D, TILE_M, TILE_N, False, CAUSAL)
        for i in range(0, (1 - r) * n_masked):
            if TRACE:
                _record(Trace, cta, step0 + mask_start + i, b, h, q_tile, mask_start + i)
            dq = _dq_step(K, V, q, do, lse, delta, dq, b, kvh, mask_start + i, qk_scale, offs_m,
                          k_len, TILE_D, TILE_M, TILE_N, True, CAUSAL)
    else:
        for i in range(0, Tc):
            if TRACE:
                _record(Trace, cta, step0 + i, b, h, q_tile, i + r * (Tc - 1 - 2 * i))
            dq = _dq_step(K, V, q, do, lse, delta, dq, b, kvh, i + r * (Tc - 1 - 2 * i),
                          qk_scale, offs_m, k_len, TILE_D, TILE_M, TILE_N, False, CAUSAL)
    dq = dq * sm_scale
    ct.store(dQ, index=(b, h, q_tile, 0),
             tile=ct.reshape(dq, (1, 1, TILE_M, TILE_D)).astype(dQ.dtype))
    return Tc


def bwd_dq_impl(Q, K, V, O, dO, LSE, Delta, dQ, Trace, qk_scale, sm_scale, H, GROUP_SIZE,
                sched, cfg):
    """The body of ``bwd_dq`` (and, with ``TRACE``, of ``bwd_dq_trace``): the forward's work
    items through its work iterator, one ``dq_tile`` each. ``sched`` = (ORDER, GROUP, SCHED,
    WORK); ``cfg`` as ``dq_tile``'s."""
    ORDER, GROUP, SCHED, WORK = sched
    TILE_D, TILE_M, TILE_N, CAUSAL, EVEN_K, TRACE = cfg
    cta = ct.bid(0)
    n_q = ct.cdiv(Q.shape[2], TILE_M)
    n_bh = Q.shape[0] * H
    ws = work_start(cta, n_q, n_bh, SCHED, 1, 1)
    if one_item(SCHED):
        bh = work_bh(ws, 0, cta, n_q, n_bh, SCHED, WORK)
        head = bh % H
        dq_tile(Q, K, V, O, dO, LSE, Delta, dQ, Trace, qk_scale, sm_scale, bh // H, head,
                head // GROUP_SIZE, work_tile(ws, 0, cta, n_q, n_bh, SCHED, WORK),
                reversed_for(ORDER, GROUP, 0, cta), cta, 0, cfg)
    else:
        bound = work_bound(ws, n_q, SCHED, 1)
        it = 0
        step = 0
        while work_valid(ws, it, bound, SCHED):   # a while, not a for (fmha's docstring)
            bh = work_bh(ws, it, cta, n_q, n_bh, SCHED, WORK)
            q_tile = work_tile(ws, it, cta, n_q, n_bh, SCHED, WORK)
            if work_live(ws, it, cta, SCHED):
                head = bh % H
                tc = dq_tile(Q, K, V, O, dO, LSE, Delta, dQ, Trace, qk_scale, sm_scale, bh // H,
                             head, head // GROUP_SIZE, q_tile,
                             reversed_for(ORDER, GROUP, it, cta), cta, step, cfg)
                step = step + tc
            it = it + 1


@ct.kernel
def bwd_dq(Q, K, V, O, dO, LSE, Delta, dQ, qk_scale: float, sm_scale: float, H: int,
           GROUP_SIZE: int, TILE_D: ConstInt, TILE_M: ConstInt, TILE_N: ConstInt,
           CAUSAL: ConstBool, EVEN_K: ConstBool, ORDER: ConstInt, GROUP: ConstInt,
           SCHED: ConstInt, WORK: ConstInt):
    """Q, O, dO, dQ [B, H, S_q, D]; K, V [B, H_kv, S_kv, D]; LSE fp32 [B, H, S_q] (read), Delta
    fp32 [B, H, S_q] (written). Work items (b, h, Q tile), mapped as the forward's GRID /
    PERSISTENT schedules."""
    bwd_dq_impl(Q, K, V, O, dO, LSE, Delta, dQ, dQ, qk_scale, sm_scale, H, GROUP_SIZE,
                (ORDER, GROUP, SCHED, WORK), (TILE_D, TILE_M, TILE_N, CAUSAL, EVEN_K, False))


@ct.kernel
def bwd_dq_trace(Q, K, V, O, dO, LSE, Delta, dQ, Trace, qk_scale: float, sm_scale: float,
                 H: int,
                 GROUP_SIZE: int, TILE_D: ConstInt, TILE_M: ConstInt, TILE_N: ConstInt,
                 CAUSAL: ConstBool, EVEN_K: ConstBool, ORDER: ConstInt, GROUP: ConstInt,
                 SCHED: ConstInt, WORK: ConstInt):
    """The trace build of ``bwd_dq`` (same arguments and constants, plus ``Trace``, int32
    [n_ctas, steps, 4]): it also stores per CTA and step the (b, h, Q tile, K/V tile) read,
    the layout of ``spec.backward_trace.backward_visits(...).table()``."""
    bwd_dq_impl(Q, K, V, O, dO, LSE, Delta, dQ, Trace, qk_scale, sm_scale, H, GROUP_SIZE,
                (ORDER, GROUP, SCHED, WORK), (TILE_D, TILE_M, TILE_N, CAUSAL, EVEN_K, True))


# ------------------------------------------------------------------------------------------------
# hints per kernel object, created once
# ------------------------------------------------------------------------------------------------
KERNELS = {"dq": bwd_dq, "dkdv": bwd_dkdv, "split_sum": bwd_split_sum, "prep": bwd_prep,
           "dq_cast": bwd_dq_cast, "dkdv_trace": bwd_dkdv_trace, "dq_trace": bwd_dq_trace}


@lru_cache(maxsize=None)
def get_kernel(name: str, occupancy: int | None = None, worker_warps: int | None = None):
    """The backward kernel ``name`` ("dq", "dkdv", "split_sum", "prep", "dq_cast"; "dq_trace",
    "dkdv_trace" the passes' trace builds) with these hints."""
    hints = {}
    if occupancy is not None:
        hints["occupancy"] = occupancy
    if worker_warps is not None:
        hints["num_worker_warps"] = worker_warps
    kern = KERNELS[name]
    return kern.replace_hints(**hints) if hints else kern

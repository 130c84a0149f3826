"""Split-Q FlashAttention forward in cuTile Python: one kernel body, pluggable K/V order and CTA
schedule.

Each CTA holds one Q tile ``[TILE_M, D]`` at a time and streams the K/V tiles of its head through
an online softmax (fp32 running max ``m``, sum ``l`` and accumulator), then writes ``O`` once. What
the variants change is *which* work items a CTA takes (the CTA schedule, ``kernels.device.work``)
and *in which order* it walks the K/V tiles of each (the scan order); both are ``ct.Constant``
parameters whose integer codes are the spec's enums (``spec.OrderKind``, ``spec.ScheduleKind``,
``spec.WorkOrder``), so every variant is a separate compile with its branches folded away and
nothing is switched at run time inside the K/V loop.

The K/V loop (the "3-loop" form, cutile-notes.md §5.3). For a Q tile the visited K/V tiles are
``0 .. Tc-1``; the ones from ``mask_start`` on need an element mask (causal diagonal, ragged end of
S_kv). With ``r`` = 1 for a backward scan and 0 for a forward one::

    for i in range(r * n_masked):        j = Tc - 1 - i                # backward: masked first
    for i in range(mask_start):          j = i + r*(mask_start-1-2i)   # unmasked bulk, either way
    for i in range((1 - r) * n_masked):  j = mask_start + i            # forward: masked last

No loop has an ``if`` inside, so the front end's loop-split pass is not needed, the masked and
unmasked bodies are separate, and for the linear order (``r`` a compile-time 0) the SASS is that of
the seed kernel. The mask adds a *finite* ``-2**100``: a backward causal scan with TILE_M > TILE_N
starts on tiles that are fully masked for some rows, and ``-inf - (-inf)`` would give NaN. It must
be a power of two: the compiler fuses ``qk * scale - m`` into one FMA, and with ``-1e30`` the
unrounded product minus the rounded row max leaves the product's rounding error (about ±1e22), so
``exp2`` of a positive one gave ``inf`` and then NaN (seen on the H100: D=64, 128×64 tiles). With
``-2**100`` the product is exact and the difference is 0.

Worked example (S = 4 tiles, sawtooth): a CTA's 1st Q tile reads K/V tiles 0 1 2 3, its 2nd reads
3 2 1 0; tiles 3 and 2 were touched last and are still in L2.

The loops over a CTA's work items (persistent and tile-X schedules) are ``while`` loops. With
``for w in range(cta, total, P)`` (the form cutile-notes.md recommends) tileiras pipelines the
*linear* non-causal D=128 build across work items: at 128×128 tiles, occupancy 1, on sm_90 it emits
4× the HGMMA instructions, 230 KB of shared memory and 176 B of stack per thread (38 LDL / 62 STL),
while the sawtooth twin, whose scan direction changes per item, stays at 16 HGMMA and no stack. The
spills go through L2: on the H100 at S=128K the spilling linear build had 46× the L2 misses of its
sawtooth twin and took 1.7× as long, an effect of code generation, not of the K/V order
(profiles/h100/longseq-forloop-spill-20261121). With ``while`` both twins compile to the same
pipeline; tests/cpu/kernels/test_study_builds.py checks every build a locality study compares.

The NVIDIA tuning ladder (``LEVEL``), each step on top of the previous one:
1 basic (exp, scale multiplied, K loaded row-major then transposed, no hints, exact division),
2 exp2 with the scale folded by 1/ln 2, 3 K loaded transposed through ``order=``, 4 latency hints
(K 2, V 4), 5 the occupancy hint (a kernel hint, applied by ``get_kernel``), 6 approximate final
division. Level 6 is what every study variant runs.

Tactics (``TACTIC``, a constant; 0 is every study's build): ``kernels.device.tactics``.

The trace build (``TRACE=True``) additionally stores, for every CTA and step, the
``(b, h, q_tile, kv_tile)`` it visits into an int32 ``[n_ctas, max_steps, 4]`` tensor: the layout
of ``spec.Visits.table()``.
"""
from __future__ import annotations

import math
from functools import lru_cache

import cuda.tile as ct
from cuda.tile import PaddingMode, RoundingMode

from kernels.device.tactics import (
    LATENCY_K,
    LATENCY_K_SHIFT,
    LATENCY_V,
    LATENCY_V_SHIFT,
    TACTIC_MASKED_FIRST,
    TACTIC_NO_BOUNDS,
    TACTIC_PREFETCH_Q,
    has_tactic,
    tactic_latency,
)
from kernels.device.work import (
    ConstBool,
    ConstInt,
    kv_range,
    one_item,
    persistent,
    reversed_for,
    work_bh,
    work_bound,
    work_live,
    work_peek,
    work_start,
    work_tile,
    work_valid,
)

NEG_BIG = -2.0 ** 100    # finite mask value, a power of two: see the module docstring (NaN trap)
INV_LN2 = 1.0 / math.log(2.0)
ZERO = PaddingMode.ZERO    # out-of-bounds rows of partial tiles read as 0 (never NaN garbage)

def qk_scale_for(head_dim: int, level: int, scale: float | None = None) -> float:
    """The scalar the kernel multiplies Q·Kᵀ by: the softmax scale (``scale``, None: 1/sqrt(D)),
    folded by 1/ln 2 from level 2 on (the kernel's exponentials are ``exp2``)."""
    s = 1.0 / math.sqrt(head_dim) if scale is None else scale
    return s * INV_LN2 if level >= 2 else s


# ------------------------------------------------------------------------------------------------
# helpers (inlined by the cuTile front end)
# ------------------------------------------------------------------------------------------------
def _record(Trace, cta, step, b, h, q_tile, j):
    """Trace build: store (b, h, q_tile, kv_tile) at ``Trace[cta, step, :]``."""
    lane = ct.arange(4, dtype=ct.int32)                                       # [4]
    row = ct.where(lane == 0, b, ct.where(lane == 1, h, ct.where(lane == 2, q_tile, j)))
    ct.store(Trace, index=(cta, step, 0), tile=ct.reshape(row, (1, 1, 4)))


def _kv_step(q, K, V, b, kvh, j, m_i, l_i, acc, qk_scale, offs_m, k_len, cfg,
             MASKED: ConstBool):
    """One K/V tile of the online softmax (``MASKED``: with the element mask); returns the new
    (m, l, acc)."""
    TILE_D, TILE_M, TILE_N, CAUSAL, EVEN_K, LEVEL, TRACE, SAVE_LSE, TACTIC = cfg
    lat_k = tactic_latency(TACTIC, LATENCY_K_SHIFT, LATENCY_K)
    lat_v = tactic_latency(TACTIC, LATENCY_V_SHIFT, LATENCY_V)
    # S = Q Kᵀ ---------------------------------------------------------------------------------
    if LEVEL >= 3:
        # K loaded already transposed: the TMA box is read as [D, TILE_N]
        if LEVEL >= 4 and has_tactic(TACTIC, TACTIC_NO_BOUNDS) and not MASKED:
            kt = ct.load(K, index=(b, kvh, 0, j), shape=(1, 1, TILE_D, TILE_N),
                         order=(0, 1, 3, 2), latency=lat_k, check_bounds=False)
        elif LEVEL >= 4:
            kt = ct.load(K, index=(b, kvh, 0, j), shape=(1, 1, TILE_D, TILE_N),
                         order=(0, 1, 3, 2), padding_mode=ZERO, latency=lat_k)
        else:
            kt = ct.load(K, index=(b, kvh, 0, j), shape=(1, 1, TILE_D, TILE_N),
                         order=(0, 1, 3, 2), padding_mode=ZERO)
        kt = ct.reshape(kt, (TILE_D, TILE_N))                                 # [D, TILE_N]
    else:
        k = ct.load(K, index=(b, kvh, j, 0), shape=(1, 1, TILE_N, TILE_D), padding_mode=ZERO)
        kt = ct.transpose(ct.reshape(k, (TILE_N, TILE_D)))                    # [D, TILE_N]
    qk = ct.full((TILE_M, TILE_N), 0.0, dtype=ct.float32)
    qk = ct.mma(q, kt, qk)                                                    # [TILE_M, TILE_N]
    if MASKED:
        offs_n = j * TILE_N + ct.arange(TILE_N, dtype=ct.int32)               # [TILE_N]
        keep = offs_n[None, :] < k_len                                        # [1, TILE_N]
        if CAUSAL:
            keep = keep & (offs_m[:, None] >= offs_n[None, :])                # [TILE_M, TILE_N]
        qk = qk + ct.where(keep, 0.0, NEG_BIG)
    # online softmax ---------------------------------------------------------------------------
    if LEVEL >= 2:
        m_ij = ct.maximum(m_i, ct.max(qk, axis=-1, keepdims=True) * qk_scale)  # [TILE_M, 1]
        p = ct.exp2(qk * qk_scale - m_ij, flush_to_zero=True)                  # [TILE_M, TILE_N]
        alpha = ct.exp2(m_i - m_ij, flush_to_zero=True)                        # [TILE_M, 1]
    else:
        qk = qk * qk_scale
        m_ij = ct.maximum(m_i, ct.max(qk, axis=-1, keepdims=True))
        p = ct.exp(qk - m_ij)
        alpha = ct.exp(m_i - m_ij)
    l_i = l_i * alpha + ct.sum(p, axis=-1, keepdims=True)                     # [TILE_M, 1]
    acc = acc * alpha                                                         # [TILE_M, D]
    # O += P V ---------------------------------------------------------------------------------
    if LEVEL >= 4 and has_tactic(TACTIC, TACTIC_NO_BOUNDS) and not MASKED:
        v = ct.load(V, index=(b, kvh, j, 0), shape=(1, 1, TILE_N, TILE_D),
                    latency=lat_v, check_bounds=False)
    elif LEVEL >= 4:
        v = ct.load(V, index=(b, kvh, j, 0), shape=(1, 1, TILE_N, TILE_D),
                    padding_mode=ZERO, latency=lat_v)
    else:
        v = ct.load(V, index=(b, kvh, j, 0), shape=(1, 1, TILE_N, TILE_D), padding_mode=ZERO)
    v = ct.reshape(v, (TILE_N, TILE_D))                                       # [TILE_N, D]
    acc = ct.mma(p.astype(q.dtype), v, acc)                                   # [TILE_M, D]
    return m_ij, l_i, acc


def attention_tile(Q, K, V, Out, Trace, LSE, qk_scale, b, h, kvh, q_tile, r, cta, step0, cfg):
    """One work item: one Q tile of head (b, h), K/V scanned forward (r=0) or backward (r=1).
    ``cfg`` is the build's constants (``fmha_fwd_impl``).

    With ``SAVE_LSE`` (the training build, ``fmha_fwd_lse``) it also stores each row's
    log-sum-exp in the kernel's log2 units, ``m + log2(l)`` with ``m`` the row maximum of
    ``qk · qk_scale``, into ``LSE[b, h, row]`` (fp32): the backward pass recomputes the
    probabilities as ``exp2(qk · qk_scale − LSE)`` without a second softmax. Without it the
    branch is folded away and the build is the inference one.

    Returns the number of K/V steps taken (``Tc``), which the kernel body adds to the CTA's step
    counter of the trace build."""
    m_i, l_i, acc, Tc = _scan(Q, K, V, Trace, 0, qk_scale, b, h, kvh, q_tile, r, cta, step0,
                              cfg, True)
    _epilogue(Out, LSE, m_i, l_i, acc, b, h, q_tile, cfg)
    return Tc


def _load_q(Q, b, h, q_tile, TILE_M: ConstInt, TILE_D: ConstInt):
    """The Q tile ``[TILE_M, D]`` of head (b, h)."""
    q = ct.load(Q, index=(b, h, q_tile, 0), shape=(1, 1, TILE_M, TILE_D), padding_mode=ZERO)
    return ct.reshape(q, (TILE_M, TILE_D))                                    # [TILE_M, D]


def _scan(Q, K, V, Trace, q_in, qk_scale, b, h, kvh, q_tile, r, cta, step0, cfg,
          LOAD_Q: ConstBool):
    """The K/V scan of one Q tile (``LOAD_Q``: loaded here, else the tile ``q_in``): returns the
    online softmax's (m, l, acc, Tc)."""
    TILE_D, TILE_M, TILE_N, CAUSAL, EVEN_K, LEVEL, TRACE, SAVE_LSE, TACTIC = cfg
    q_len = Q.shape[2]
    k_len = K.shape[2]
    n_kv = ct.cdiv(k_len, TILE_N)
    if LOAD_Q:
        q = _load_q(Q, b, h, q_tile, TILE_M, TILE_D)
    else:
        q = q_in
    offs_m = q_tile * TILE_M + ct.arange(TILE_M, dtype=ct.int32)              # [TILE_M]
    m_i = ct.full((TILE_M, 1), -math.inf, dtype=ct.float32)
    l_i = ct.full((TILE_M, 1), 0.0, dtype=ct.float32)
    acc = ct.full((TILE_M, TILE_D), 0.0, dtype=ct.float32)

    Tc, mask_start = kv_range(q_tile, q_len, n_kv, TILE_M, TILE_N, CAUSAL, EVEN_K)
    if CAUSAL or not EVEN_K:
        n_masked = Tc - mask_start
        # mf = 1: the masked tiles (diagonal / ragged end) first, descending (a backward scan;
        # with TACTIC_MASKED_FIRST a forward one too)
        mf = 1 if has_tactic(TACTIC, TACTIC_MASKED_FIRST) else r
        for i in range(0, mf * n_masked):
            j = Tc - 1 - i
            if TRACE:
                _record(Trace, cta, step0 + i, b, h, q_tile, j)
            m_i, l_i, acc = _kv_step(q, K, V, b, kvh, j, m_i, l_i, acc, qk_scale, offs_m, k_len,
                                     cfg, True)
        # the unmasked bulk, ascending or descending
        for i in range(0, mask_start):
            j = i + r * (mask_start - 1 - 2 * i)
            if TRACE:
                _record(Trace, cta, step0 + mf * n_masked + i, b, h, q_tile, j)
            m_i, l_i, acc = _kv_step(q, K, V, b, kvh, j, m_i, l_i, acc, qk_scale, offs_m, k_len,
                                     cfg, False)
        # forward scan: the masked tiles come last, ascending
        for i in range(0, (1 - mf) * n_masked):
            j = mask_start + i
            if TRACE:
                _record(Trace, cta, step0 + mask_start + i, b, h, q_tile, j)
            m_i, l_i, acc = _kv_step(q, K, V, b, kvh, j, m_i, l_i, acc, qk_scale, offs_m, k_len,
                                     cfg, True)
    else:
        for i in range(0, Tc):
            j = i + r * (Tc - 1 - 2 * i)
            if TRACE:
                _record(Trace, cta, step0 + i, b, h, q_tile, j)
            m_i, l_i, acc = _kv_step(q, K, V, b, kvh, j, m_i, l_i, acc, qk_scale, offs_m, k_len,
                                     cfg, False)

    return m_i, l_i, acc, Tc


def _epilogue(Out, LSE, m_i, l_i, acc, b, h, q_tile, cfg):
    """O = acc / l into ``Out`` (and, ``SAVE_LSE``, the rows' log-sum-exp into ``LSE``)."""
    TILE_D, TILE_M, TILE_N, CAUSAL, EVEN_K, LEVEL, TRACE, SAVE_LSE, TACTIC = cfg
    if LEVEL >= 6:
        acc = ct.truediv(acc, l_i, flush_to_zero=True, rounding_mode=RoundingMode.APPROX)
    else:
        acc = acc / l_i
    out = ct.reshape(acc, (1, 1, TILE_M, TILE_D)).astype(Out.dtype)
    ct.store(Out, index=(b, h, q_tile, 0), tile=out)
    if SAVE_LSE:
        lse = m_i + ct.log2(l_i)                                              # [TILE_M, 1]
        ct.store(LSE, index=(b, h, q_tile), tile=ct.reshape(lse, (1, 1, TILE_M)))


# ------------------------------------------------------------------------------------------------
# the kernel body: this CTA's work items (kernels.device.work), one attention_tile each
# ------------------------------------------------------------------------------------------------
def fmha_fwd_impl(Q, K, V, Out, Trace, LSE, qk_scale, H, QUERY_GROUP_SIZE, sched, cfg):
    """Walks this CTA's work items (spec ``CtaSchedule.work_items``) with the work iterator and
    runs ``attention_tile`` on each. With ``TACTIC_PREFETCH_Q`` on a persistent schedule the
    next item's Q tile is loaded before this item's epilogue and carried over (the scan takes
    the carried tile).

    The constants come in two tuples: ``sched`` = (ORDER, GROUP, SCHED, WORK, TILES_PER_CTA,
    SECTION), which items and in which scan direction, and ``cfg`` = (TILE_D, TILE_M, TILE_N,
    CAUSAL, EVEN_K, LEVEL, TRACE, SAVE_LSE, TACTIC), what one item computes (``attention_tile``
    and the helpers under it take ``cfg`` whole)."""
    ORDER, GROUP, SCHED, WORK, TILES_PER_CTA, SECTION = sched
    TILE_D, TILE_M, TILE_N, CAUSAL, EVEN_K, LEVEL, TRACE, SAVE_LSE, TACTIC = cfg
    cta = ct.bid(0)
    n_q = ct.cdiv(Q.shape[2], TILE_M)
    n_bh = Q.shape[0] * H
    ws = work_start(cta, n_q, n_bh, SCHED, TILES_PER_CTA, SECTION)
    if one_item(SCHED):
        bh = work_bh(ws, 0, cta, n_q, n_bh, SCHED, WORK)
        q_tile = work_tile(ws, 0, cta, n_q, n_bh, SCHED, WORK)
        head = bh % H
        attention_tile(Q, K, V, Out, Trace, LSE, qk_scale, bh // H, head,
                       head // QUERY_GROUP_SIZE, q_tile, reversed_for(ORDER, GROUP, 0, cta), cta,
                       0, cfg)
    else:
        PERSISTENT = persistent(SCHED)
        PREFETCH = PERSISTENT and has_tactic(TACTIC, TACTIC_PREFETCH_Q)
        if PREFETCH:     # the first item's Q (a CTA has one: the grid is at most the items)
            bh, q_tile = work_peek(ws, 0, cta, n_q, n_bh, SCHED, WORK)
            q = _load_q(Q, bh // H, bh % H, q_tile, TILE_M, TILE_D)
        if PERSISTENT:
            group_head = 0
        else:            # a tile-X CTA's items share one head: taken once, before the loop
            group_head = work_bh(ws, 0, cta, n_q, n_bh, SCHED, WORK) % H
        bound = work_bound(ws, n_q, SCHED, TILES_PER_CTA)
        it = 0
        step = 0
        while work_valid(ws, it, bound, SCHED):   # a while, not a for (module docstring)
            bh = work_bh(ws, it, cta, n_q, n_bh, SCHED, WORK)
            if PERSISTENT:
                q_tile = work_tile(ws, it, cta, n_q, n_bh, SCHED, WORK)
                if work_live(ws, it, cta, SCHED):
                    head = bh % H
                    r = reversed_for(ORDER, GROUP, it, cta)
                    if PREFETCH:
                        m_i, l_i, acc, tc = _scan(Q, K, V, Trace, q, qk_scale, bh // H, head,
                                                  head // QUERY_GROUP_SIZE, q_tile, r, cta,
                                                  step, cfg, False)
                        # the next item's Q load, issued before this item's epilogue and
                        # carried (the last item loads a clamped, valid tile it never uses)
                        nbh, nq = work_peek(ws, it + 1, cta, n_q, n_bh, SCHED, WORK)
                        q = _load_q(Q, nbh // H, nbh % H, nq, TILE_M, TILE_D)
                        _epilogue(Out, LSE, m_i, l_i, acc, bh // H, head, q_tile, cfg)
                    else:
                        tc = attention_tile(Q, K, V, Out, Trace, LSE, qk_scale, bh // H, head,
                                            head // QUERY_GROUP_SIZE, q_tile, r, cta, step,
                                            cfg)
                    step = step + tc
            else:
                # tile-X: the tile and the scan direction asked for after the head's indices,
                # in the call (the order of the integer ops decides the trace builds' SASS)
                tc = attention_tile(Q, K, V, Out, Trace, LSE, qk_scale, bh // H, group_head,
                                    group_head // QUERY_GROUP_SIZE,
                                    work_tile(ws, it, cta, n_q, n_bh, SCHED, WORK),
                                    reversed_for(ORDER, GROUP, it, cta), cta, step, cfg)
                step = step + tc
            it = it + 1


@ct.kernel
def fmha_fwd(Q, K, V, Out, Trace, qk_scale: float, H: ConstInt, QUERY_GROUP_SIZE: ConstInt,
             TILE_D: ConstInt, TILE_M: ConstInt, TILE_N: ConstInt,
             CAUSAL: ConstBool, EVEN_K: ConstBool, ORDER: ConstInt, GROUP: ConstInt,
             SCHED: ConstInt, WORK: ConstInt, TILES_PER_CTA: ConstInt, SECTION: ConstInt,
             LEVEL: ConstInt, TACTIC: ConstInt, TRACE: ConstBool):
    """Q [B,H,S_q,D], K/V [B,H_kv,S_kv,D], Out like Q; Trace int32 [n_ctas, max_steps, 4] (read
    only when TRACE)."""
    fmha_fwd_impl(Q, K, V, Out, Trace, Trace, qk_scale, H, QUERY_GROUP_SIZE,
                  (ORDER, GROUP, SCHED, WORK, TILES_PER_CTA, SECTION),
                  (TILE_D, TILE_M, TILE_N, CAUSAL, EVEN_K, LEVEL, TRACE, False, TACTIC))


@ct.kernel
def fmha_fwd_lse(Q, K, V, Out, LSE, qk_scale: float, H: ConstInt, QUERY_GROUP_SIZE: ConstInt,
                 TILE_D: ConstInt, TILE_M: ConstInt, TILE_N: ConstInt,
                 CAUSAL: ConstBool, EVEN_K: ConstBool, ORDER: ConstInt, GROUP: ConstInt,
                 SCHED: ConstInt, WORK: ConstInt, TILES_PER_CTA: ConstInt, SECTION: ConstInt,
                 LEVEL: ConstInt, TACTIC: ConstInt):
    """The training forward: ``fmha_fwd`` (same constants, without the trace flag) that also
    stores the log-sum-exp, LSE fp32 [B, H, S_q] (last dimension contiguous)."""
    fmha_fwd_impl(Q, K, V, Out, LSE, LSE, qk_scale, H, QUERY_GROUP_SIZE,
                  (ORDER, GROUP, SCHED, WORK, TILES_PER_CTA, SECTION),
                  (TILE_D, TILE_M, TILE_N, CAUSAL, EVEN_K, LEVEL, False, True, TACTIC))


# ------------------------------------------------------------------------------------------------
# hints: occupancy / worker warps (tuning-ladder level 5) per kernel object, created once
# ------------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def get_kernel(occupancy: int | None = None, worker_warps: int | None = None,
               save_lse: bool = False):
    """The ``fmha_fwd`` kernel (``fmha_fwd_lse`` with ``save_lse``) with these hints
    (``replace_hints`` makes a new JIT cache: cached).

    ``None`` leaves a hint at the compiler's default."""
    hints = {}
    if occupancy is not None:
        hints["occupancy"] = occupancy
    if worker_warps is not None:
        hints["num_worker_warps"] = worker_warps
    kern = fmha_fwd_lse if save_lse else fmha_fwd
    return kern.replace_hints(**hints) if hints else kern


def constants(*, D: int, tile_m: int, tile_n: int, H: int, group_size: int, causal: bool,
              even_k: bool, order: int, group: int, sched: int, work: int, tiles_per_cta: int,
              section: int, level: int, trace: bool, tactic: int = 0) -> tuple:
    """The constant arguments after (Q, K, V, Out, Trace, qk_scale), in kernel order."""
    return (int(H), int(group_size), int(D), int(tile_m), int(tile_n), bool(causal),
            bool(even_k), int(order), int(group), int(sched), int(work), int(tiles_per_cta),
            int(section), int(level), int(tactic), bool(trace))

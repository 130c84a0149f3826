"""The scheduler of the cuTile kernels, inlined by the cuTile front end: which work items a CTA
takes and in which order (the CTA schedule), which K/V tiles a Q tile visits (and which Q tiles a
K/V tile visits), and in which direction a CTA scans its next item (the scan order).
``spec.schedules`` and ``spec.orders`` are the host-side definitions the trace builds check these
against (tests/cpu/kernels/test_work_iterator.py runs this module as plain Python against them).

The work iterator (FlashAttention-4's tile-scheduler shape). A kernel body asks for its CTA's
work and walks it::

    ws = work_start(cta, n_tiles, n_bh, SCHED, TILES_PER_CTA, SECTION)
    if one_item(SCHED):                       # grid, sectioned LPT: the CTA's one item
        bh = work_bh(ws, 0, ...); tile = work_tile(ws, 0, ...)
        ...
    else:                                     # tile-X, persistent, LPT, snake
        bound = work_bound(ws, n_tiles, SCHED, TILES_PER_CTA)
        it = 0
        while work_valid(ws, it, bound, SCHED):
            bh = work_bh(ws, it, ...); tile = work_tile(ws, it, ...)
            if work_live(ws, it, cta, SCHED):
                ...
            it = it + 1

``it`` is the CTA's item counter (what the sawtooth order alternates on). ``ws`` is what the
schedule fixes once per CTA, two integers whose meaning depends on the schedule: (cta, 0) for
the grid, (bh, tile) for sectioned LPT, (bh, first tile) for tile-X groups, (P, items) for the
persistent ones. An item is asked for field by field (``work_bh``, ``work_tile``, ``work_live``)
so that each kernel body computes them in the order its arithmetic uses them: the compiled code
of a build depends on that order. Every branch on ``SCHED``/``WORK`` is on a constant, so each
build keeps only its own schedule's arithmetic.

Worked example (persistent, P = 3 CTAs, 7 items): CTA 0 takes items 0, 3, 6 grid-stride; under
SNAKE (odd rounds dealt from the other end) it takes 0, ``3 + 3 − 1 − 0 = 5``, 6; CTA 1's third
round is item 7, not live, and its loop ends there.
"""
from __future__ import annotations

import cuda.tile as ct

from spec.orders import OrderKind
from spec.schedules import ScheduleKind, WorkOrder

ConstInt = ct.Constant[int]
ConstBool = ct.Constant[bool]

# The constant codes: the spec's enums, spelled once.
ORDER_LINEAR, ORDER_SAWTOOTH, ORDER_REVERSE, ORDER_BLOCK_PARITY = (
    int(OrderKind.LINEAR), int(OrderKind.SAWTOOTH), int(OrderKind.REVERSE),
    int(OrderKind.BLOCK_PARITY))
SCHED_GRID, SCHED_TILE_X, SCHED_PERSISTENT = (
    int(ScheduleKind.GRID), int(ScheduleKind.TILE_X), int(ScheduleKind.PERSISTENT))
SCHED_LONGEST_FIRST, SCHED_SECTIONED, SCHED_SNAKE = (
    int(ScheduleKind.LONGEST_FIRST), int(ScheduleKind.SECTIONED_LONGEST_FIRST),
    int(ScheduleKind.SNAKE))
WORK_Q_MAJOR, WORK_HEAD_MAJOR = int(WorkOrder.Q_MAJOR), int(WorkOrder.HEAD_MAJOR)


def reversed_for(ORDER: ConstInt, GROUP: ConstInt, it, cta):
    """1 when the scan runs backward, else 0 (spec ``ScanOrder.reversed_for``).

    ``it`` is the CTA's local item counter, ``cta`` its index in the launched grid."""
    if ORDER == ORDER_LINEAR:
        r = 0
    elif ORDER == ORDER_REVERSE:
        r = 1
    elif ORDER == ORDER_SAWTOOTH:
        r = (it // GROUP) % 2
    else:
        r = cta % 2
    return r


# ------------------------------------------------------------------------------------------------
# the work iterator
# ------------------------------------------------------------------------------------------------
def one_item(SCHED: ConstInt):
    """Whether the schedule gives each CTA exactly one item (grid, sectioned LPT)."""
    return SCHED == SCHED_GRID or SCHED == SCHED_SECTIONED


def persistent(SCHED: ConstInt):
    """Whether the schedule deals items round by round to a grid of P CTAs."""
    return not one_item(SCHED) and SCHED != SCHED_TILE_X


def work_start(cta, n_tiles, n_bh, SCHED: ConstInt, TILES_PER_CTA: ConstInt,
               SECTION: ConstInt):
    """What CTA ``cta``'s schedule fixes once (module docstring): ``n_tiles`` items per head of
    ``n_bh`` (b, head) pairs.

    GRID: ``cta = tile + n_tiles·bh`` (split by ``work_bh`` / ``work_tile``). SECTIONED: longest
    first within sections of SECTION heads, heads fastest (the last section may be short).
    TILE_X: X consecutive tiles of one head, ``cta = group + n_groups·bh``. Persistent: P = the
    launched grid, and the item count."""
    if SCHED == SCHED_GRID:
        a = cta
        b = 0
    elif SCHED == SCHED_SECTIONED:
        sec = cta // (SECTION * n_tiles)
        within = cta % (SECTION * n_tiles)
        heads = ct.minimum(SECTION, n_bh - sec * SECTION)
        a = sec * SECTION + within % heads
        b = n_tiles - 1 - within // heads
    elif SCHED == SCHED_TILE_X:
        n_groups = ct.cdiv(n_tiles, TILES_PER_CTA)
        a = cta // n_groups
        b = (cta % n_groups) * TILES_PER_CTA
    else:
        a = ct.num_blocks(0)
        b = n_tiles * n_bh
    return a, b


def work_bound(ws, n_tiles, SCHED: ConstInt, TILES_PER_CTA: ConstInt):
    """The bound ``work_valid`` compares with: the tiles of this CTA's group (TILE_X, the last
    group of a head may be short) or the item count (persistent)."""
    if SCHED == SCHED_TILE_X:
        bound = ct.minimum(n_tiles - ws[1], TILES_PER_CTA)
    else:
        bound = ws[1]
    return bound


def work_valid(ws, it, bound, SCHED: ConstInt):
    """Whether round ``it`` of a multi-item schedule exists (``work_live`` says whether this
    CTA's item in it does)."""
    if SCHED == SCHED_TILE_X:
        ok = it < bound
    else:
        ok = it * ws[0] < bound
    return ok


def deal(it, cta, n_ctas, SCHED: ConstInt):
    """The item CTA ``cta`` takes in round ``it``: grid-stride, or (LPT, SNAKE) the snake deal,
    odd rounds reversed."""
    w = it * n_ctas + cta
    if SCHED == SCHED_LONGEST_FIRST or SCHED == SCHED_SNAKE:
        if it % 2 == 1:
            w = it * n_ctas + n_ctas - 1 - cta
    return w


def item(w, n_tiles, n_bh, SCHED: ConstInt, WORK: ConstInt):
    """Persistent item ``w`` as (bh, tile): LPT sorted longest first, heads fastest; else q- or
    head-major."""
    if SCHED == SCHED_LONGEST_FIRST:
        bh = w % n_bh
        tile = n_tiles - 1 - w // n_bh
    elif WORK == WORK_HEAD_MAJOR:
        bh = w % n_bh
        tile = w // n_bh
    else:
        bh = w // n_tiles
        tile = w % n_tiles
    return bh, tile


def work_bh(ws, it, cta, n_tiles, n_bh, SCHED: ConstInt, WORK: ConstInt):
    """The (b, head) index ``bh`` of this CTA's item in round ``it``. ``work_bh``, ``work_tile``
    and ``work_live`` are three questions about one item, so that a kernel body asks them where
    its arithmetic needs the answer (a persistent item's deal is computed once: the repeated
    expressions are one value to the compiler)."""
    if SCHED == SCHED_GRID:
        bh = ws[0] // n_tiles
    elif SCHED == SCHED_SECTIONED or SCHED == SCHED_TILE_X:
        bh = ws[0]
    else:
        bh, tile = item(deal(it, cta, ws[0], SCHED), n_tiles, n_bh, SCHED, WORK)
    return bh


def work_tile(ws, it, cta, n_tiles, n_bh, SCHED: ConstInt, WORK: ConstInt):
    """The tile (Q tile of the forward and dQ, K/V tile of dK/dV) of this CTA's item in round
    ``it``."""
    if SCHED == SCHED_GRID:
        tile = ws[0] % n_tiles
    elif SCHED == SCHED_SECTIONED:
        tile = ws[1]
    elif SCHED == SCHED_TILE_X:
        tile = ws[1] + it
    else:
        bh, tile = item(deal(it, cta, ws[0], SCHED), n_tiles, n_bh, SCHED, WORK)
    return tile


def work_live(ws, it, cta, SCHED: ConstInt):
    """Whether this CTA has an item in round ``it``: False only in a persistent schedule's last,
    partial round (a constant True elsewhere, so a guard on it folds away)."""
    if persistent(SCHED):
        live = deal(it, cta, ws[0], SCHED) < ws[1]
    else:
        live = True
    return live


def work_peek(ws, it, cta, n_tiles, n_bh, SCHED: ConstInt, WORK: ConstInt):
    """(bh, tile) of a persistent CTA's item in round ``it``, clamped to the last item: a valid
    tile to load ahead (the Q prefetch) even past the CTA's last round."""
    return item(ct.minimum(deal(it, cta, ws[0], SCHED), ws[1] - 1), n_tiles, n_bh, SCHED, WORK)


# ------------------------------------------------------------------------------------------------
# which tiles an item visits
# ------------------------------------------------------------------------------------------------
def kv_range(q_tile, q_len, n_kv, TILE_M: ConstInt, TILE_N: ConstInt, CAUSAL: ConstBool,
             EVEN_K: ConstBool):
    """The K/V tiles Q tile ``q_tile`` visits, ``0 .. Tc − 1`` of the ``n_kv`` of its head, and
    the first that needs an element mask, ``mask_start`` (the causal diagonal's first tile, or
    the ragged last tile of S_kv when TILE_N does not divide it): returns (Tc, mask_start).
    Causal is top-left aligned (SDPA's ``is_causal``): rows [q_tile·TILE_M, m_end) see keys
    0 .. row."""
    if CAUSAL:
        m_end = ct.minimum((q_tile + 1) * TILE_M, q_len)
        Tc = ct.minimum(ct.cdiv(m_end, TILE_N), n_kv)
        mask_start = ct.minimum((q_tile * TILE_M) // TILE_N, Tc)
    else:
        Tc = n_kv
        mask_start = n_kv
    if not EVEN_K:
        mask_start = ct.minimum(mask_start, n_kv - 1)
    return Tc, mask_start


def q_range(n_tile, n_q, TILE_M: ConstInt, TILE_N: ConstInt, CAUSAL: ConstBool):
    """The mirror image of ``kv_range``: the Q tiles K/V tile ``n_tile`` visits. Tiles below
    ``m_start`` see none of its keys (causal), ``m_start .. m_full − 1`` cross the diagonal
    (masked), ``m_full .. n_q − 1`` see all of them: returns (m_start, m_full)."""
    if CAUSAL:
        m_start = ct.minimum((n_tile * TILE_N) // TILE_M, n_q)
        m_full = ct.minimum(ct.cdiv((n_tile + 1) * TILE_N, TILE_M), n_q)
    else:
        m_start = 0
        m_full = 0
    return m_start, m_full

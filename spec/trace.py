"""Visit orders and L2 access traces: what each CTA reads, and in which order the GPU issues it.

Two views of the same definition (``CtaSchedule`` × ``ScanOrder`` on a ``TileGrid``):

``visit_order``
    Per CTA, per step, the (b, h, q_tile, kv_tile) it visits: the ground truth the kernels' trace
    builds are compared with on the GPU.

``build_trace``
    The interleaved stream of tile accesses of ``resident`` CTAs running concurrently, which is
    what the L2 sees. Concurrency model: the resident CTAs advance one K/V step at a time in
    lock-step. A CTA whose work item ends (causal rows end at different steps) starts its next work
    item at the next step, so causal wavefronts drift apart as they do on the GPU. When a CTA ends
    and more CTAs are waiting (grid and tile-X launches), the next CTA in launch order takes the
    freed slot at once, as the hardware's block dispatcher does. Within one step, slots issue in
    slot order, and a slot issues its Q load (first step of a work item), K tile, V tile and O store
    (last step) in that order.

Accesses are whole tiles; every tile is a contiguous run of sectors that is touched together, so
an LRU over tiles weighted by their sectors is an LRU over sectors.
"""
from __future__ import annotations

import enum
import functools
import heapq
from dataclasses import dataclass

import numpy as np

from .orders import ScanOrder
from .problem import TileGrid
from .schedules import CtaSchedule


class Tensor(enum.IntEnum):
    Q = 0
    K = 1
    V = 2
    O = 3


@dataclass(frozen=True)
class Visits:
    """Per-CTA visit order, CTA-major, each CTA's steps in order (all arrays int32, same length)."""

    cta: np.ndarray
    step: np.ndarray    # the CTA's own step counter over all its work items
    b: np.ndarray
    h: np.ndarray       # query head
    q: np.ndarray
    kv: np.ndarray
    n_ctas: int

    def table(self) -> np.ndarray:
        """``[n_ctas, max_steps, 4]`` int32 of (b, h, q, kv), padded with -1: the layout the
        kernels' trace builds write."""
        steps = int(self.step.max()) + 1 if len(self.step) else 0
        out = np.full((self.n_ctas, steps, 4), -1, dtype=np.int32)
        out[self.cta, self.step] = np.stack([self.b, self.h, self.q, self.kv], axis=1)
        return out


@dataclass(frozen=True)
class Trace:
    """A stream of tile accesses in issue order.

    ``key`` holds one dense tile id per access; ``key_sectors[key]`` is that tile's size in
    sectors. ``decode`` turns keys back into (tensor, b, h, tile) columns.
    """

    key: np.ndarray          # int32 [n_accesses]
    key_sectors: np.ndarray  # int32 [n_keys]
    grid: TileGrid
    resident: int
    sector_bytes: int

    @property
    def n_accesses(self) -> int:
        return len(self.key)

    @property
    def n_keys(self) -> int:
        return len(self.key_sectors)

    def sectors(self) -> np.ndarray:
        """Sectors of each access."""
        return self.key_sectors[self.key]

    def total_sectors(self) -> int:
        return int(np.bincount(self.key, minlength=self.n_keys) @ self.key_sectors.astype(np.int64))

    def decode(self, keys: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """(tensor, b, h, tile, bytes) of each access; ``h`` is the K/V head for K and V."""
        return _KeySpace(self.grid, self.sector_bytes).decode(self.key if keys is None else keys)


class _KeySpace:
    """Dense tile ids: Q tiles, then K tiles, then V tiles, then O tiles."""

    def __init__(self, g: TileGrid, sector_bytes: int):
        p = g.problem
        self.g, self.sector_bytes = g, sector_bytes
        self.n_qt = g.n_bh * g.n_q
        self.n_kvt = p.B * p.H_kv * g.n_kv
        self.base = {Tensor.Q: 0, Tensor.K: self.n_qt, Tensor.V: self.n_qt + self.n_kvt,
                     Tensor.O: self.n_qt + 2 * self.n_kvt}
        self.n_keys = 2 * self.n_qt + 2 * self.n_kvt

    def sectors(self) -> np.ndarray:
        g, p = self.g, self.g.problem
        row_bytes = p.D * p.dtype.nbytes
        q_rows = np.minimum(g.tiles.m, p.S_q - np.arange(g.n_q) * g.tiles.m)
        kv_rows = np.minimum(g.tiles.n, p.S_kv - np.arange(g.n_kv) * g.tiles.n)
        q_sec = np.tile(q_rows * row_bytes // self.sector_bytes, g.n_bh)
        kv_sec = np.tile(kv_rows * row_bytes // self.sector_bytes, p.B * p.H_kv)
        return np.concatenate([q_sec, kv_sec, kv_sec, q_sec]).astype(np.int32)

    def decode(self, key: np.ndarray) -> dict[str, np.ndarray]:
        g, p = self.g, self.g.problem
        key = np.asarray(key, dtype=np.int64)
        tensor = np.searchsorted(np.array([self.base[t] for t in Tensor]), key, side="right") - 1
        local = key - np.array([self.base[t] for t in Tensor])[tensor]
        is_kv = (tensor == Tensor.K) | (tensor == Tensor.V)
        per = np.where(is_kv, g.n_kv, g.n_q)
        heads = np.where(is_kv, p.H_kv, p.H)
        bh, tile = local // per, local % per
        rows = np.where(is_kv, np.minimum(g.tiles.n, p.S_kv - tile * g.tiles.n),
                        np.minimum(g.tiles.m, p.S_q - tile * g.tiles.m))
        return {"tensor": tensor.astype(np.int8), "b": bh // heads, "h": bh % heads,
                "tile": tile, "bytes": rows * p.D * p.dtype.nbytes}


@dataclass(frozen=True)
class _Expanded:
    """Work items (in CTA order) and their (item, step) pairs, before interleaving."""

    item_cta: np.ndarray
    item_bh: np.ndarray
    item_q: np.ndarray
    item_len: np.ndarray      # K/V steps of each item (Tc)
    item_local0: np.ndarray   # the CTA's step counter at the item's first step
    pair_item: np.ndarray     # int32 [n_pairs]
    pair_step: np.ndarray     # int32 step within the item
    pair_kv: np.ndarray       # int32 K/V tile index
    n_ctas: int


def _expand(g: TileGrid, schedule: CtaSchedule, order: ScanOrder) -> _Expanded:
    wi = schedule.work_items(g)
    length = np.asarray(g.kv_tiles_for(wi.q.astype(np.int64)), dtype=np.int64)
    start = np.cumsum(length) - length                       # exclusive prefix over all items
    first_of_cta = np.searchsorted(wi.cta, wi.cta, side="left")
    local0 = start - start[first_of_cta]
    reverse = order.reversed_for(wi.iter, wi.cta)
    total = int(length.sum())
    pair_item = np.repeat(np.arange(len(length), dtype=np.int32), length)
    pair_step = (np.arange(total, dtype=np.int64) - np.repeat(start, length)).astype(np.int32)
    pair_kv = order.kv_index(pair_step, length[pair_item], reverse[pair_item]).astype(np.int32)
    return _Expanded(wi.cta, wi.bh, wi.q, length, local0, pair_item, pair_step, pair_kv,
                     wi.n_ctas)


def visit_order(g: TileGrid, schedule: CtaSchedule, order: ScanOrder) -> Visits:
    """Per CTA and step, the (b, h, q_tile, kv_tile) the schedule and order prescribe."""
    e = _expand(g, schedule, order)
    it = e.pair_item
    h = g.problem.H
    bh = e.item_bh[it]
    return Visits(cta=e.item_cta[it], step=(e.item_local0[it] + e.pair_step).astype(np.int32),
                  b=(bh // h).astype(np.int32), h=(bh % h).astype(np.int32),
                  q=e.item_q[it], kv=e.pair_kv, n_ctas=e.n_ctas)


def dispatch(durations: np.ndarray, resident: int) -> tuple[np.ndarray, np.ndarray]:
    """Hardware block dispatch: CTAs start in launch order on the earliest free slot.

    Returns (slot, start step) per CTA. With at most ``resident`` CTAs, each has its own slot.
    """
    n = len(durations)
    if resident < 1:
        raise ValueError(f"resident CTAs must be >= 1, got {resident}")
    if n <= resident:
        return np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    if np.all(durations == durations[0]):            # uniform: round-robin waves, no heap needed
        c = np.arange(n, dtype=np.int64)
        return c % resident, (c // resident) * int(durations[0])
    slot = np.empty(n, dtype=np.int64)
    start = np.empty(n, dtype=np.int64)
    free = [(0, s) for s in range(resident)]         # (time the slot frees, slot)
    for c, d in enumerate(durations.tolist()):
        t, s = heapq.heappop(free)
        slot[c], start[c] = s, t
        heapq.heappush(free, (t + d, s))
    return slot, start


def build_trace(g: TileGrid, schedule: CtaSchedule, order: ScanOrder, resident: int,
                sector_bytes: int = 32) -> Trace:
    """The tile-access stream of ``resident`` concurrent CTAs (see the module docstring).

    Built from the ``work_table`` (per work item, not per access) and the dispatch of the CTAs to
    ``resident`` slots: time step by time step, each busy slot issues its CTA's accesses of that
    step, slots in order. One pass that writes each access once (``_interleave``, compiled with
    numba on first use): memory is the trace itself, not the per-access temporaries a sort over
    (step, slot) would need."""
    return trace_of_table(work_table(g, schedule, order, sector_bytes), g, resident,
                          sector_bytes)


def trace_of_table(wt: "WorkTable", g: TileGrid, resident: int, sector_bytes: int = 32) -> Trace:
    """The access stream of a ``WorkTable`` run on ``resident`` slots (``build_trace``'s body:
    any table of the forward's shape, e.g. a backward pass's, ``spec.backward_trace``)."""
    steps_before = np.concatenate([[0], np.cumsum(wt.length, dtype=np.int64)])
    dur = steps_before[wt.cta_first[1:]] - steps_before[wt.cta_first[:-1]]   # steps per CTA
    slot, start = dispatch(dur, resident)
    r = min(resident, wt.n_ctas)
    by_slot = np.lexsort((start, slot))                 # each slot's CTAs in the order they run
    slot_first = np.searchsorted(slot[by_slot], np.arange(r + 1), side="left").astype(np.int64)
    n_steps = int((start + dur).max()) if wt.n_ctas else 0
    total = int(2 * wt.length.astype(np.int64).sum() + 2 * len(wt.length))
    key = _interleave_kernel()(wt.cta_first, wt.length, wt.reverse, wt.q_key, wt.o_key,
                               wt.kv_row, wt.k_base, wt.v_base, start, dur,
                               by_slot.astype(np.int64), slot_first, r, n_steps, total)
    return Trace(key=key, key_sectors=wt.key_sectors, grid=g, resident=r,
                 sector_bytes=sector_bytes)


def _interleave(cta_first, length, reverse, q_key, o_key, kv_row, k_base, v_base, start, dur,
                slot_ctas, slot_first, r, n_steps, total):
    """The access stream: at each step ``t`` every slot whose CTA is running issues, in slot
    order, the Q load (first step of an item), the K and V tiles and the O store (last step)."""
    key = np.empty(total, dtype=np.int32)
    ptr = slot_first[:r].copy()                # the slot's current CTA (index into slot_ctas)
    item = np.zeros(r, dtype=np.int64)
    step = np.zeros(r, dtype=np.int64)
    for s in range(r):
        if ptr[s] < slot_first[s + 1]:
            item[s] = cta_first[slot_ctas[ptr[s]]]
    n = 0
    for t in range(n_steps):
        for s in range(r):
            while ptr[s] < slot_first[s + 1]:  # skip the CTAs of this slot that have ended
                c = slot_ctas[ptr[s]]
                if t < start[c] + dur[c]:
                    break
                ptr[s] += 1
                if ptr[s] < slot_first[s + 1]:
                    item[s] = cta_first[slot_ctas[ptr[s]]]
                    step[s] = 0
            if ptr[s] >= slot_first[s + 1] or t < start[slot_ctas[ptr[s]]]:
                continue
            i = item[s]
            while length[i] == 0:                # an item without K/V steps issues nothing
                i += 1
            st = step[s]
            if st == 0:
                key[n] = q_key[i]
                n += 1
            kv = length[i] - 1 - st if reverse[i] else st
            key[n] = k_base + kv_row[i] + kv
            key[n + 1] = v_base + kv_row[i] + kv
            n += 2
            if st == length[i] - 1:
                key[n] = o_key[i]
                n += 1
                item[s] = i + 1
                step[s] = 0
            else:
                item[s] = i
                step[s] = st + 1
    return key[:n]


@functools.cache
def _interleave_kernel():
    """``_interleave`` compiled by numba (imported here, on first use: ``spec`` stays light)."""
    import numba
    return numba.njit(cache=True, nogil=True)(_interleave)


@dataclass(frozen=True)
class WorkTable:
    """The work items of a launch in the form a time-stepped simulator walks them (no trace).

    Items are CTA-major (CTA ``c`` owns items ``cta_first[c] .. cta_first[c + 1] - 1``, in the
    order it runs them). Item ``i`` runs ``length[i]`` K/V steps; at step ``s`` it reads K/V tile
    ``length[i] - 1 - s`` if ``reverse[i]`` else ``s``, i.e. keys ``k_base + kv_row[i] + tile``
    and ``v_base + kv_row[i] + tile``; it loads Q tile ``q_key[i]`` (a key of the ``_KeySpace``)
    at its first step and stores O tile ``o_key[i]`` at its last. The keys and ``key_sectors`` are
    exactly those ``build_trace`` emits, so a simulator driven by this table and one fed the trace
    see the same tiles.
    """

    cta_first: np.ndarray    # int64 [n_ctas + 1]
    length: np.ndarray       # int32 [n_items]
    reverse: np.ndarray      # bool  [n_items]
    q_key: np.ndarray        # int32 [n_items]
    o_key: np.ndarray        # int32 [n_items]
    kv_row: np.ndarray       # int32 [n_items]: K/V head * n_kv (offset of the item's K/V tiles)
    k_base: int
    v_base: int
    key_sectors: np.ndarray  # int32 [n_keys]
    n_ctas: int
    n_kv: int                # K/V tiles per head

    @property
    def n_steps(self) -> int:
        return int(self.length.astype(np.int64).sum())

    @property
    def n_accesses(self) -> int:
        """Accesses of the equivalent trace: K and V per step, Q and O per item."""
        return 2 * self.n_steps + 2 * len(self.length)


def work_table(g: TileGrid, schedule: CtaSchedule, order: ScanOrder,
               sector_bytes: int = 32) -> WorkTable:
    """The ``WorkTable`` of ``schedule`` × ``order`` on ``g`` (the items of ``visit_order``)."""
    wi = schedule.work_items(g)
    p = g.problem
    length = np.asarray(g.kv_tiles_for(wi.q.astype(np.int64)), dtype=np.int32)
    reverse = np.asarray(order.reversed_for(wi.iter, wi.cta), dtype=bool)
    ks = _KeySpace(g, sector_bytes)
    bh = wi.bh.astype(np.int64)
    q_local = bh * g.n_q + wi.q
    kv_row = ((bh // p.H) * p.H_kv + (bh % p.H) // p.group_size) * g.n_kv
    cta_first = np.searchsorted(wi.cta, np.arange(wi.n_ctas + 1), side="left").astype(np.int64)
    return WorkTable(cta_first=cta_first, length=length, reverse=reverse,
                     q_key=(ks.base[Tensor.Q] + q_local).astype(np.int32),
                     o_key=(ks.base[Tensor.O] + q_local).astype(np.int32),
                     kv_row=kv_row.astype(np.int32), k_base=int(ks.base[Tensor.K]),
                     v_base=int(ks.base[Tensor.V]), key_sectors=ks.sectors(), n_ctas=wi.n_ctas,
                     n_kv=g.n_kv)

"""What the two main kernels of the FlashAttention backward read, per CTA and step, and the L2
access stream they make: the backward's counterpart of ``spec.trace``.

The locality argument. The forward's CTA owns a Q tile and streams the K/V tiles of its head;
CTAs running together on one head read the same K/V tile at about the same time (the wavefront),
and a CTA owning several Q tiles can alternate its scan (sawtooth) so that the tiles its last
scan touched last, still in L2, are the first of the next. The backward has the same two shapes:

- ``dkdv`` (``kernels.device.fmha_bwd.bwd_dkdv``): a work item is one K/V tile of a K/V head (times
  the group split, ``kernels.host.backward.group_split``); its CTA loads K and V once, then per step
  reads the Q tile ``i``, dO tile ``i`` and the LSE and Δ rows ``i`` of every query head of its
  group (causal, top-left: only the Q tiles from the diagonal on, ``i >= (n·TILE_N) // TILE_M``),
  and stores dK, dV at the end. Per step it reads Q + dO (2·TILE_M·D elements) plus 8 bytes a row of
  statistics: at TILE_M = TILE_N and D = 64 that is 3% more than the forward's K + V (four streamed
  operands, but two of them are rows, not tiles), for twice the tensor-core work (four MMAs per step
  against the forward's two), so a miss weighs about half as much against a step's compute. Under
  the sawtooth order a CTA alternates its Q scan per owned K/V tile (heads reversed too), exactly as
  the forward alternates its K/V scan per Q tile.
- ``dq`` (``kernels.device.fmha_bwd.bwd_dq``): a work item is one Q tile; its CTA loads Q, dO, O
  and LSE once (O for its rows' Δ, which it stores for the dK/dV pass) and scans the K/V tiles
  like the forward (three MMAs per step): its K/V stream *is* the forward's
  (``spec.trace.visit_order`` and ``work_table`` on the same grid, schedule and order). The
  table counts the item's load as Q, dO, LSE and Δ rows: the O tile read and the Δ rows stored
  instead are one tile more per item, beside its stream of 2·n_kv K/V tiles.

Worked example (one head, 4 Q and 4 K/V tiles, 2 persistent CTAs, sawtooth, dK/dV): CTA 0 owns
K/V tiles 0 and 2 and reads Q tiles 0 1 2 3 then 3 2 1 0; CTA 1 owns 1 and 3 and reads the same.
Causal: CTA 0 reads 0 1 2 3 (tile 0 is seen by every query) then 3 2 (tile 2 only by Q tiles
2, 3); CTA 1 reads 1 2 3, then 3.

Both passes are expressed as a ``spec.trace.WorkTable``: an item scans a contiguous run of
"streamed" tiles forward or backward, reading two keys per step. For dK/dV the two keys are
(Q tile + its LSE rows) and (dO tile + its Δ rows): the kernel loads each pair back to back in
the same step, so one key of their summed sectors is the same LRU stream to within the rows of
one tile. The item's first-step key is its K + V tile pair, its last-step key the dK + dV store.
So the trace builder (``spec.trace.trace_of_table``), the lock-step LRU and the timed simulator
(``analysis.cache.timesim``) run a backward pass unchanged. A group of several query heads per
item (GQA) is one contiguous run only when every head scans all its Q tiles (non-causal); a
causal GQA dK/dV table is refused with the reason.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .orders import ScanOrder
from .problem import Problem, TileGrid, Tiles, cdiv
from .schedules import CtaSchedule, ScheduleKind
from .trace import Trace, Visits, WorkTable, trace_of_table, visit_order, work_table
from .variant import BackwardPass

STAT_BYTES = 4
"""Bytes per row of the fp32 LSE and Δ vectors the backward reads."""
BACKWARD_SCHEDULES = (ScheduleKind.GRID, ScheduleKind.PERSISTENT)
"""The CTA schedules the backward kernels implement."""


@dataclass(frozen=True)
class PassGrid:
    """One backward pass of ``problem`` under ``tiles`` (m: Q rows, n: K/V rows) and the
    dK/dV group ``split`` (query heads of a K/V head dealt over ``split`` items)."""

    problem: Problem
    tiles: Tiles
    bwd: BackwardPass
    split: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "bwd", BackwardPass(self.bwd))
        if self.split < 1 or self.problem.group_size % self.split:
            raise ValueError(f"split={self.split} must divide the {self.problem.group_size} "
                             "query heads per K/V head")

    @property
    def grid(self) -> TileGrid:
        """The forward's tile grid of the problem (the dQ pass's own)."""
        return TileGrid(self.problem, self.tiles)

    @property
    def items_grid(self) -> TileGrid:
        """The grid whose work items (``CtaSchedule.work_items``) are this pass's: for dQ the
        forward's (b, query head, Q tile); for dK/dV the transposed problem, whose "Q tiles" are
        the K/V tiles and whose heads are the B·H_kv·split output slots (the kernel's item
        ``(b, slot, n_tile)``, K/V tiles fastest: the forward's q-major deal)."""
        if self.bwd == BackwardPass.DQ:
            return self.grid
        p = self.problem
        slots = p.H_kv * self.split
        return TileGrid(Problem(p.B, slots, p.S_kv, p.D, S_kv=p.S_q, dtype=p.dtype),
                        Tiles(self.tiles.n, self.tiles.m))

    @property
    def heads_per_item(self) -> int:
        return self.problem.H // (self.problem.H_kv * self.split) \
            if self.bwd == BackwardPass.DKDV else 1

    def q_start(self, n_tile):
        """First Q tile that sees K/V tile ``n_tile`` (causal top-left; 0 otherwise): the kernel's
        ``m_start``. Works on ints and integer arrays."""
        g = self.grid
        if not self.problem.causal:
            return np.zeros_like(n_tile) if isinstance(n_tile, np.ndarray) else 0
        return np.minimum((np.asarray(n_tile) * self.tiles.n) // self.tiles.m, g.n_q) \
            if isinstance(n_tile, np.ndarray) else min(n_tile * self.tiles.n // self.tiles.m, g.n_q)


def _check_schedule(schedule: CtaSchedule) -> None:
    if schedule.kind not in BACKWARD_SCHEDULES:
        raise ValueError(f"schedule {schedule.label!r}: the backward kernels take the grid "
                         "launch or P persistent CTAs (static<P>, static<P>h)")


def backward_visits(pg: PassGrid, schedule: CtaSchedule, order: ScanOrder) -> Visits:
    """Per CTA and step, the (b, query head, q tile, kv tile) the pass reads, in the kernel's
    order (``kernels.device.fmha_bwd``). dQ: the forward's ``visit_order``. dK/dV: each item's query
    heads and, per head, its Q tiles from ``q_start`` on, all reversed when the order reverses
    the item."""
    _check_schedule(schedule)
    if pg.bwd == BackwardPass.DQ:
        return visit_order(pg.grid, schedule, order)
    p, g = pg.problem, pg.grid
    wi = schedule.work_items(pg.items_grid)
    slots = p.H_kv * pg.split
    heads = pg.heads_per_item
    rev = order.reversed_for(wi.iter, wi.cta)
    start = pg.q_start(wi.q.astype(np.int64))
    per_head = g.n_q - start
    length = per_head * heads
    total = int(length.sum())
    item = np.repeat(np.arange(len(length)), length)
    s = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(length) - length, length)
    s = np.where(rev[item], length[item] - 1 - s, s)       # a reversed item: heads and tiles
    first = np.searchsorted(wi.cta, wi.cta, side="left")
    local0 = np.cumsum(length) - length
    local0 = local0 - local0[first]
    b, slot = wi.bh[item] // slots, wi.bh[item] % slots
    i32 = lambda a: np.ascontiguousarray(a, dtype=np.int32)   # noqa: E731
    return Visits(cta=i32(wi.cta[item]),
                  step=i32(local0[item] + np.arange(total) - np.repeat(np.cumsum(length)
                                                                        - length, length)),
                  b=i32(b), h=i32(slot * heads + s // per_head[item]),
                  q=i32(start[item] + s % per_head[item]), kv=i32(wi.q[item]), n_ctas=wi.n_ctas)


def _rows(total: int, tile: int, n: int) -> np.ndarray:
    return np.minimum(tile, total - np.arange(n) * tile)


def pass_table(pg: PassGrid, schedule: CtaSchedule, order: ScanOrder,
               sector_bytes: int = 32) -> WorkTable:
    """The pass as a ``WorkTable`` (module docstring): what ``trace_of_table`` and the timed
    simulator walk. Keys of dK/dV: (Q + LSE) tiles of every (b, query head), then (dO + Δ)
    tiles, then the K + V tile pairs, then the dK + dV stores; of dQ: the forward's keys with
    dO, LSE and Δ added to each Q tile's load and the dQ store in place of O's."""
    _check_schedule(schedule)
    p, g = pg.problem, pg.grid
    row = p.D * p.dtype.nbytes
    q_rows = _rows(p.S_q, pg.tiles.m, g.n_q)
    kv_rows = _rows(p.S_kv, pg.tiles.n, g.n_kv)
    stat = -(-q_rows * STAT_BYTES // sector_bytes)       # LSE or Δ rows of a Q tile, in sectors
    tile_q = q_rows * row // sector_bytes
    if pg.bwd == BackwardPass.DQ:
        wt = work_table(g, schedule, order, sector_bytes)
        sec = wt.key_sectors.copy()
        n_qt = g.n_bh * g.n_q
        sec[:n_qt] += np.tile(tile_q + 2 * stat, g.n_bh).astype(np.int32)   # + dO, LSE, Δ
        return replace(wt, key_sectors=sec)
    heads = pg.heads_per_item
    if p.causal and heads > 1:
        raise ValueError("a causal dK/dV item with several query heads scans a run of Q tiles "
                         "per head, not one contiguous run: use split = the group size (one "
                         "head per item), or backward_visits")
    ig = pg.items_grid
    wi = schedule.work_items(ig)
    start = pg.q_start(wi.q.astype(np.int64))
    length = ((g.n_q - start) * heads).astype(np.int32)
    slots = p.H_kv * pg.split
    b, slot = wi.bh // slots, wi.bh % slots
    n_qt = p.B * p.H * g.n_q
    n_kvt = p.B * p.H_kv * g.n_kv
    n_out = p.B * slots * g.n_kv
    kv_key = 2 * n_qt + (b * p.H_kv + slot // pg.split) * g.n_kv + wi.q
    out_key = 2 * n_qt + n_kvt + wi.bh.astype(np.int64) * g.n_kv + wi.q
    sec_kv = np.tile(2 * kv_rows * row // sector_bytes, p.B * p.H_kv)
    sec = np.concatenate([np.tile(tile_q + stat, p.B * p.H), np.tile(tile_q + stat, p.B * p.H),
                          sec_kv, np.tile(2 * kv_rows * row // sector_bytes, p.B * slots)])
    assert len(sec) == 2 * n_qt + n_kvt + n_out
    return WorkTable(
        cta_first=np.searchsorted(wi.cta, np.arange(wi.n_ctas + 1), side="left").astype(np.int64),
        length=length, reverse=np.asarray(order.reversed_for(wi.iter, wi.cta), dtype=bool),
        q_key=kv_key.astype(np.int32), o_key=out_key.astype(np.int32),
        kv_row=((b * p.H + slot * heads) * g.n_q + start).astype(np.int32), k_base=0,
        v_base=n_qt, key_sectors=sec.astype(np.int32), n_ctas=wi.n_ctas, n_kv=g.n_q)


def pass_trace(pg: PassGrid, schedule: CtaSchedule, order: ScanOrder, resident: int,
               sector_bytes: int = 32) -> Trace:
    """The L2 access stream of ``resident`` concurrent CTAs running the pass (the lock-step
    wavefront of ``spec.trace``). Its ``decode`` names the forward's tensors; the keys are
    ``pass_table``'s."""
    return trace_of_table(pass_table(pg, schedule, order, sector_bytes), pg.items_grid,
                          resident, sector_bytes)


def pass_grid(problem: Problem, tiles: Tiles, bwd: BackwardPass | str,
              split: int = 1) -> PassGrid:
    return PassGrid(problem, tiles, BackwardPass(bwd), split)


def n_ctas(pg: PassGrid, schedule: CtaSchedule) -> int:
    """CTAs the pass launches under ``schedule``."""
    n_items = pg.items_grid.n_work
    return n_items if schedule.kind == ScheduleKind.GRID else min(schedule.num_ctas, n_items)


def bytes_per_step(pg: PassGrid) -> int:
    """Bytes a CTA reads per step of its scan (full tiles): dK/dV a Q and a dO tile and two
    rows of fp32 statistics per query row; dQ a K and a V tile (the forward's)."""
    p, t = pg.problem, pg.tiles
    if pg.bwd == BackwardPass.DQ:
        return 2 * t.n * p.D * p.dtype.nbytes
    return 2 * t.m * p.D * p.dtype.nbytes + 2 * t.m * STAT_BYTES


MMAS_PER_STEP = {BackwardPass.DKDV: 4, BackwardPass.DQ: 3}
"""Tensor-core products per step (``kernels.device.fmha_bwd``): dK/dV Sᵀ, dV, dPᵀ, dK; dQ S, dP, dQ.
The forward does two (S, PV)."""


__all__ = ["PassGrid", "pass_grid", "backward_visits", "pass_table", "pass_trace", "n_ctas",
           "bytes_per_step", "MMAS_PER_STEP", "STAT_BYTES", "cdiv"]

"""CTA schedules: which work items (batch·head, Q tile) each CTA of the launched grid processes.

Why the schedule matters for L2. The K/V tiles of a head are shared by all of its Q tiles. CTAs
that run *at the same time* and work on the *same head* walk the same K/V tiles in near lock-step
(a "wavefront"): the first CTA to touch a tile misses and the others hit, so the hit rate grows
like ``1 - 1/N_active``. Between wavefronts the reuse distance is a whole pass over the head's K/V.

- ``GRID``: the seed kernel's launch. One Q tile per CTA, CTA index = q + n_q·bh (q fastest, then
  batch·head), so resident CTAs are consecutive Q tiles of one head. The hardware starts CTAs in
  index order as slots free up.
- ``TILE_X``: each CTA takes X consecutive Q tiles of one head (paper's "Tile-based", X = 2);
  the sawtooth flips direction between them.
- ``PERSISTENT``: exactly P CTAs; CTA c takes work items c, c+P, c+2P, ... (a grid-stride loop),
  work item w → (bh, q) with q fastest (``Q_MAJOR``, the paper's "Static") or heads fastest
  (``HEAD_MAJOR``, spreading concurrent CTAs over heads: fewer CTAs per wavefront).
- ``SNAKE``: persistent, the same rounds of P consecutive work items (q-major or head-major), but
  dealt in *snake* order: round ``r`` hands items ``rP .. rP + P - 1`` to CTAs ``0 .. P-1`` when
  ``r`` is even and to ``P-1 .. 0`` when it is odd. Why: with the grid-stride deal and P a
  multiple of n_q (short sequences: S=512, 64-row tiles, n_q = 8, P = 264) CTA c gets Q tile
  ``c mod n_q`` in *every* round, so under a causal mask one CTA does n_q times the work of
  another (``load_balance`` 1.65 at b32h16s512, 64x128 tiles); the snake pairs Q tile q with
  ``n_q - 1 - q`` in consecutive rounds (1.03 there). What stays: each round is one contiguous
  block of items, consecutive Q tiles of a few heads, so the concurrent CTAs share K/V exactly as
  in ``PERSISTENT`` (the locality the sawtooth study measures); only *which* CTA of the round
  takes which item changes. It balances only when a head's Q tiles repeat within a round (n_q
  well below P): at b1h16s16384 (n_q = 256, P = 264) it is 1.54 against static's 1.57, and
  ``LONGEST_FIRST`` is the balanced persistent schedule there.
- ``LONGEST_FIRST``: persistent, longest work first (FlashAttention-3's LPT order for causal
  problems). The work items are sorted by causal length, descending (Q tile ``n_q - 1`` of every
  head, then ``n_q - 2``, ...; heads fastest within one length), and dealt to the P CTAs in
  *snake* order: round ``r`` hands items ``rP .. rP + P - 1`` to CTAs ``0 .. P-1`` when ``r`` is
  even and to ``P-1 .. 0`` when it is odd, so a CTA that got a longer item in one round gets a
  shorter one in the next. The static grid-stride of ``PERSISTENT`` cannot balance causal work:
  at S=16K, 128-row tiles (n_q = 128) and P = 132, CTA c's Q tiles are ``(c + 4r) mod 128`` and its
  load is up to 1.57x the mean (the CUDA persistent causal build ran at 0.68x its grid build, 214
  against 314 TFLOPS); LPT with the snake deal keeps the busiest CTA within 1.12x of the least
  possible (``load_balance``) on every shape of the shape suite, where static reaches 2.2x. The
  price for locality: concurrent CTAs work on different heads' K/V, so a wavefront shares a tile
  among about ``P / (B·H)`` CTAs.
- ``SECTIONED_LONGEST_FIRST``: the grid launch (one work item per CTA, dispatched by the hardware
  as slots free up) in longest-first order within *L2 sections* of ``G`` heads (FlashAttention's
  ``SingleTileLPTScheduler``): CTA c belongs to section ``c // (G n_q)``; inside a section the
  items go longest first, heads fastest (Q tile ``n_q - 1`` of the section's G heads, then
  ``n_q - 2``, ...). Why: in the plain grid order every head ends with a mix of long and short
  causal items, so the last wave holds long items and SMs idle while they finish (a list schedule
  of b16h16s512 causal, 64x128 tiles, 2 CTAs per SM on 132 SMs, each item costing its K/V steps
  plus one, ends 10% after its mean load); with the longest items of each section first the
  last wave is short ones (3% after, G = 64). Why sections:
  sorting *all* items longest first (as ``LONGEST_FIRST`` does) puts every head's K/V in flight at
  once; a section's heads are chosen so that their K and V fit in half the L2
  (``section_heads``), so the Q tiles of one head that run in different waves still find its K/V
  tiles in L2, as in the grid order.

The integer codes of ``ScheduleKind`` and ``WorkOrder`` are the kernels' constant parameters.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from .problem import Problem, TileGrid, cdiv


class ScheduleKind(enum.IntEnum):
    GRID = 0
    TILE_X = 1
    PERSISTENT = 2
    LONGEST_FIRST = 3
    SECTIONED_LONGEST_FIRST = 4
    SNAKE = 5


class WorkOrder(enum.IntEnum):
    Q_MAJOR = 0
    HEAD_MAJOR = 1


PERSISTENT_KINDS = (ScheduleKind.PERSISTENT, ScheduleKind.SNAKE, ScheduleKind.LONGEST_FIRST)
"""The kinds that launch exactly P CTAs, each looping over its work items."""


@dataclass(frozen=True)
class WorkItems:
    """Work items in CTA order: row k is the ``iter[k]``-th Q tile processed by CTA ``cta[k]``."""

    cta: np.ndarray    # int32
    iter: np.ndarray   # int32, local iteration counter of the CTA
    bh: np.ndarray     # int32, batch * H + head
    q: np.ndarray      # int32, Q tile index
    n_ctas: int


@dataclass(frozen=True)
class CtaSchedule:
    """A CTA schedule. ``tiles_per_cta`` is X for TILE_X; ``num_ctas`` is P for the persistent
    kinds; ``section`` is G, the heads per L2 section of SECTIONED_LONGEST_FIRST."""

    kind: ScheduleKind = ScheduleKind.GRID
    tiles_per_cta: int = 1
    num_ctas: int | None = None
    work_order: WorkOrder = WorkOrder.Q_MAJOR
    section: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ScheduleKind(self.kind))
        object.__setattr__(self, "work_order", WorkOrder(self.work_order))
        persistent = self.kind in PERSISTENT_KINDS
        if persistent and (not isinstance(self.num_ctas, int) or self.num_ctas < 1):
            raise ValueError(f"a persistent schedule needs num_ctas P >= 1, got {self.num_ctas!r}")
        if not persistent and self.num_ctas is not None:
            raise ValueError("num_ctas only applies to persistent schedules")
        if self.kind == ScheduleKind.TILE_X:
            if not isinstance(self.tiles_per_cta, int) or self.tiles_per_cta < 1:
                raise ValueError(f"tile-X needs X >= 1, got {self.tiles_per_cta!r}")
        elif self.tiles_per_cta != 1:
            raise ValueError("tiles_per_cta only applies to the tile-X schedule")
        if self.kind == ScheduleKind.SECTIONED_LONGEST_FIRST:
            if not isinstance(self.section, int) or self.section < 1:
                raise ValueError(f"a sectioned longest-first grid needs G >= 1 heads per section, "
                                 f"got {self.section!r}")
        elif self.section is not None:
            raise ValueError("section only applies to the sectioned longest-first grid")
        if self.kind in (ScheduleKind.LONGEST_FIRST, ScheduleKind.SECTIONED_LONGEST_FIRST) \
                and self.work_order != WorkOrder.Q_MAJOR:
            raise ValueError("longest-first is q-major by construction")

    # constructors -------------------------------------------------------------------------
    @classmethod
    def grid(cls) -> "CtaSchedule":
        return cls(ScheduleKind.GRID)

    @classmethod
    def tile_x(cls, x: int) -> "CtaSchedule":
        return cls(ScheduleKind.TILE_X, tiles_per_cta=x)

    @classmethod
    def persistent(cls, p: int, work_order: WorkOrder = WorkOrder.Q_MAJOR) -> "CtaSchedule":
        return cls(ScheduleKind.PERSISTENT, num_ctas=p, work_order=work_order)

    @classmethod
    def snake(cls, p: int, work_order: WorkOrder = WorkOrder.Q_MAJOR) -> "CtaSchedule":
        return cls(ScheduleKind.SNAKE, num_ctas=p, work_order=work_order)

    @classmethod
    def longest_first(cls, p: int) -> "CtaSchedule":
        return cls(ScheduleKind.LONGEST_FIRST, num_ctas=p)

    @classmethod
    def sectioned_longest_first(cls, g: int) -> "CtaSchedule":
        return cls(ScheduleKind.SECTIONED_LONGEST_FIRST, section=g)

    @property
    def is_persistent(self) -> bool:
        return self.kind in PERSISTENT_KINDS

    @property
    def label(self) -> str:
        """Token used in variant ids: grid, tile2, static132, static132h, snake132, snake132h,
        lpt132, glpt64."""
        if self.kind == ScheduleKind.GRID:
            return "grid"
        if self.kind == ScheduleKind.SECTIONED_LONGEST_FIRST:
            return f"glpt{self.section}"
        if self.kind == ScheduleKind.TILE_X:
            return f"tile{self.tiles_per_cta}"
        if self.kind == ScheduleKind.LONGEST_FIRST:
            return f"lpt{self.num_ctas}"
        stem = "snake" if self.kind == ScheduleKind.SNAKE else "static"
        return f"{stem}{self.num_ctas}" + ("h" if self.work_order == WorkOrder.HEAD_MAJOR else "")

    @classmethod
    def parse(cls, token: str) -> "CtaSchedule":
        t = token.strip().lower()
        try:
            if t == "grid":
                return cls.grid()
            if t.startswith("tile"):
                return cls.tile_x(int(t[4:]))
            if t.startswith("lpt"):
                return cls.longest_first(int(t[3:]))
            if t.startswith("glpt"):
                return cls.sectioned_longest_first(int(t[4:]))
            if t.startswith(("static", "snake")):
                stem = "static" if t.startswith("static") else "snake"
                head = t.endswith("h")
                p = int(t[len(stem):-1] if head else t[len(stem):])
                work = WorkOrder.HEAD_MAJOR if head else WorkOrder.Q_MAJOR
                return cls.persistent(p, work) if stem == "static" else cls.snake(p, work)
        except ValueError:
            pass
        raise ValueError(f"unknown CTA schedule {token!r}; known: grid, tile<X>, static<P>, "
                         "static<P>h (head-major), snake<P>, snake<P>h, lpt<P>, glpt<G>")

    # the mapping --------------------------------------------------------------------------
    def grid_size(self, g: TileGrid) -> int:
        """Number of CTAs launched."""
        if self.kind in (ScheduleKind.GRID, ScheduleKind.SECTIONED_LONGEST_FIRST):
            return g.n_work
        if self.kind == ScheduleKind.TILE_X:
            return cdiv(g.n_q, self.tiles_per_cta) * g.n_bh
        return self.num_ctas

    def work_items(self, g: TileGrid) -> WorkItems:
        """Every work item of the problem, grouped by CTA in launch order, each CTA's in its
        order."""
        n_q, n_bh = g.n_q, g.n_bh
        if self.kind == ScheduleKind.GRID:
            cta = np.arange(g.n_work, dtype=np.int64)
            return _items(cta, np.zeros_like(cta), cta // n_q, cta % n_q, g.n_work)
        if self.kind == ScheduleKind.SECTIONED_LONGEST_FIRST:
            cta = np.arange(g.n_work, dtype=np.int64)
            sec, within = cta // (self.section * n_q), cta % (self.section * n_q)
            heads = np.minimum(self.section, n_bh - sec * self.section)   # the last may be short
            bh, q = sec * self.section + within % heads, n_q - 1 - within // heads
            return _items(cta, np.zeros_like(cta), bh, q, g.n_work)
        if self.kind == ScheduleKind.TILE_X:
            x = self.tiles_per_cta
            n_groups = cdiv(n_q, x)
            bh, grp, k = np.meshgrid(np.arange(n_bh), np.arange(n_groups), np.arange(x),
                                     indexing="ij")
            q = grp * x + k
            keep = q < n_q                           # the last group of a head may be short
            cta = grp + n_groups * bh
            return _items(cta[keep], k[keep], bh[keep], q[keep], n_groups * n_bh)
        p = self.num_ctas
        w = np.arange(g.n_work, dtype=np.int64)
        cta, it = w % p, w // p
        if self.kind in (ScheduleKind.LONGEST_FIRST, ScheduleKind.SNAKE):
            cta = np.where(it % 2 == 0, cta, p - 1 - cta)   # the snake deal
        if self.kind == ScheduleKind.LONGEST_FIRST:
            bh, q = w % n_bh, n_q - 1 - w // n_bh     # longest first, heads fastest
        elif self.work_order == WorkOrder.HEAD_MAJOR:
            bh, q = w % n_bh, w // n_bh
        else:
            bh, q = w // n_q, w % n_q
        order = np.lexsort((it, cta))                # CTA-major, each CTA's items in order
        return _items(cta[order], it[order], bh[order], q[order], p)

    def load_balance(self, g: TileGrid) -> float:
        """The busiest CTA's K/V steps over the least any assignment could give it (the longer of
        the longest work item and the mean load): 1.0 is perfect balance. What a static schedule
        costs in time when the work items differ in length (causal). A grid or tile-X launch is
        balanced by the hardware's dynamic dispatch and reads 1.0."""
        if not self.is_persistent:
            return 1.0
        items = self.work_items(g)
        steps = g.kv_tiles_for(items.q)
        load = np.bincount(items.cta, weights=steps, minlength=items.n_ctas)
        return float(load.max() / max(steps.max(), steps.sum() / items.n_ctas))


def section_heads(problem: Problem, l2_bytes: int) -> int:
    """G for SECTIONED_LONGEST_FIRST on ``problem``: the most heads whose K and V fit in half the
    L2, rounded down to a power of two, at least 1 (the query heads of one K/V head share its K
    and V: with grouped queries a head costs its K/V over the group size). Half: Hopper's L2 is two
    partitions and a line read from the far one is held in both (``Arch.l2_partitions``), and Q
    and O stream through the L2 too. FlashAttention rounds to a power of two as well
    (``SingleTileLPTScheduler``)."""
    per_head = 2 * problem.S_kv * problem.D * problem.dtype.nbytes // (problem.H // problem.H_kv)
    fit = (l2_bytes // 2) // max(1, per_head)
    return 1 << (fit.bit_length() - 1) if fit >= 1 else 1


def _items(cta, it, bh, q, n_ctas) -> WorkItems:
    i32 = lambda a: np.ascontiguousarray(a, dtype=np.int32)   # noqa: E731
    return WorkItems(i32(cta), i32(it), i32(bh), i32(q), int(n_ctas))

"""The backward's configuration vocabulary, shared by its host side (``kernels.host.backward``) and
its rule (``kernels.rules.backward_choice``): the passes, a pass's configuration, the base
configuration and the group split of the dK/dV pass's grouped heads."""
from __future__ import annotations

from dataclasses import dataclass

from spec.orders import ScanOrder
from spec.problem import Tiles
from spec.schedules import CtaSchedule, ScheduleKind

PASSES = ("dkdv", "dq")
BACKWARD_SCHEDULES = (ScheduleKind.GRID, ScheduleKind.PERSISTENT)


@dataclass(frozen=True)
class PassConfig:
    """One backward pass: tiles (m: Q rows, n: K/V rows), compile hints, scan order, schedule.
    ``schedule`` None is the grid launch; a persistent schedule's P comes from its label
    (``static132``) or, with ``ctas_per_sm``, from the build's resident CTAs."""

    tiles: Tiles
    occupancy: int | None = None
    worker_warps: int | None = None
    order: ScanOrder = ScanOrder.linear()
    schedule: CtaSchedule = CtaSchedule.grid()

    def label(self) -> str:
        hints = (f"occ{self.occupancy}" if self.occupancy else "") + \
            (f"ww{self.worker_warps}" if self.worker_warps else "")
        return (f"{self.order.label}.{self.schedule.label}.m{self.tiles.m}n{self.tiles.n}"
                + (f".{hints}" if hints else ""))


@dataclass(frozen=True)
class BackwardConfig:
    """The backward's passes. ``one_pass``: the dK/dV pass also makes dQ (summed across its CTAs
    by TMA bulk reduce, ``kernels.device.fmha_bwd``), ``dq`` is then unused; not bitwise
    repeatable, so a call under ``torch.use_deterministic_algorithms`` takes the two passes."""

    dkdv: PassConfig
    dq: PassConfig
    split: int | None = None       # dK/dV group split; None: ``group_split``'s rule
    one_pass: bool = False

    def label(self) -> str:
        if self.one_pass:
            return f"onepass:{self.dkdv.label()}"
        return f"dkdv:{self.dkdv.label()}+dq:{self.dq.label()}"


BASE = PassConfig(Tiles(64, 128), 1, 8)
"""The base pass configuration (``kernels.host.backward``'s docstring)."""

WIDE = PassConfig(Tiles(128, 128), 1, 8)
"""The one pass's configuration at D=64: 128 x 128 tiles, twice BASE's Q rows per pair. The dQ
reduce a pair sends (TILE_M x D fp32) per MMA work (TILE_M x TILE_N x D) is BASE's, but each
K/V tile is held against 128 query rows per step, and the build is spill-free at D=64 without a
mask (16 bytes of stack causal, as BASE's); at D=128 it spills."""

ONE_PASS_D64_MIN_ROWS = 2048
"""From how many query rows (``S_q``) the default takes the one pass at D=64 without a mask."""


def group_split(n_items: int, group: int, target: int, fill: int) -> int:
    """Over how many work items the dK/dV pass deals each K/V head's query heads. None (1) when
    the items already give every SM one (``n_items >= fill``, the SM count); otherwise the
    smallest divisor s of the group size with ``n_items · s >= target`` (two waves of resident
    CTAs), the whole group when none reaches it. MQA with one batch (B·H_kv = 1) at
    S_kv = 4097, 64-row K/V tiles: 65 items < 132 SMs, target 528 -> s = 16 of 32 query heads,
    2 heads per item.

    Measured on an H100 (profiles/h100/cutile-backward-20261127b, split.csv, the backward's
    kernels and the reduction): that MQA problem 3.16 -> 1.01 ms, B=4 H=16 MQA at S=1000 0.43 ->
    0.22 ms; on grouped problems that already fill the SMs (8 K/V heads, 200-752 items) the
    split changed the kernels' time by -6..+0% but the forward+backward call of one of them
    (H=32/8, S=1537) took 0.58 ms against 0.31 ms without it in the run before, unexplained, so
    the rule leaves those unsplit as they were measured."""
    if n_items >= fill:
        return 1
    for s in range(2, group + 1):
        if group % s == 0 and n_items * s >= target:
            return s
    return group

"""A variant: one compile-time specialisation of a kernel family, named by one id grammar.

``{backend}.{order}.{schedule}.m{TILE_M}n{TILE_N}d{D}[.occ{N}][.L{level}]``, e.g.
``cutile.sawtooth.static132.m64n64d64``. The id is the NVTX range under ncu, the ``variant`` column
of every CSV and the key of the figure style table.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from .orders import ScanOrder
from .problem import Problem, Tiles
from .schedules import CtaSchedule


class Backend(enum.Enum):
    """The name of the kernel family a variant belongs to: the first field of its id and the
    ``backend`` column of every CSV (the values are committed data). The family itself, the code
    that builds and launches the variant, is a ``spec.family.KernelFamily``
    (``experiments.families.family(backend)``)."""

    CUTILE = "cutile"
    CUDA = "cuda"


@dataclass(frozen=True)
class Variant:
    backend: Backend
    order: ScanOrder
    schedule: CtaSchedule
    tiles: Tiles
    occupancy: int | None = None   # None: the family's default for the arch
    level: int | None = None       # cuTile tuning-ladder level 1..6; None: the full kernel (6)

    def id(self, problem: Problem) -> str:
        occ = "" if self.occupancy is None else f".occ{self.occupancy}"
        lvl = "" if self.level is None else f".L{self.level}"
        return (f"{self.backend.value}.{self.order.label}.{self.schedule.label}."
                f"{self.tiles.label}d{problem.D}{occ}{lvl}")

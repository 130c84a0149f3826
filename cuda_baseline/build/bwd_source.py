"""The backward kernels' instantiations (flash_bwd.cu), their compile options and an nvcc check
of their resources; nothing here imports torch or CuPy.

``BwdInstance`` names one ``flash_bwd_dkdv`` build: the scan order of the Q loop (spec
``OrderKind``: linear, sawtooth, reverse, block parity, read through ``reversed_for`` exactly as
the forward's K/V scan), the CTA schedule (``GRID``: one K/V tile per CTA; ``PERSISTENT``: P
CTAs, grid-stride over K/V tiles, where the sawtooth alternates), the tiles (TILE_M query rows
per step, TILE_N keys per CTA), D, the causal mask, the element type and opt-in build options
(``BwdOption``; none in the default build), and whether it is the trace build
(``flash_bwd_dkdv_trace``, which also records per CTA and step the (b, query head, Q tile, K/V
tile) it reads; ``cuda_baseline.host.training.trace_dkdv``). The preprocess
(``flash_bwd_delta``) and the dQ conversion (``flash_bwd_dq``) depend on D and the type only:
they read no scan, so the family's only scan order is the dK/dV kernel's (dQ is reduced inside
it).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from enum import IntFlag

from cuda_baseline.build.source import (
    BASE_OPTIONS,
    HEADER,
    SCHEDULE_HEADER,
    SOURCE_DIR,
    Resources,
    compile_named,
    parse_resources,
)
from spec.orders import OrderKind
from spec.problem import DType, Tiles
from spec.schedules import ScheduleKind

BWD_HEADER = SOURCE_DIR / "flash_bwd.cuh"
BWD_ENTRY = SOURCE_DIR / "flash_bwd.cu"

BWD_TILES = Tiles(64, 128)
"""(TILE_M query rows per step, TILE_N keys per CTA) of the backward at D = 128: 8 warps, each
owning 16 keys; the dK and dV accumulators alone take 128 registers per thread."""
BWD_SCHEDULES = (ScheduleKind.GRID, ScheduleKind.PERSISTENT)


class BwdOption(IntFlag):
    """Opt-in build options of ``flash_bwd_dkdv`` (its last template argument; the bit values of
    ``BWD_ONE_PART`` / ``BWD_DQ_V4`` / ``BWD_DQ_SQUARE`` in flash_bwd.cuh).

    ONE_PART: at D = 128 the Q tile is processed in one part, not two of 32 queries, so each
    warp reads its K and V A fragments from shared memory once per step, not twice (the scores
    and dP of 64 queries then live beside the dK, dV accumulators). No effect at D = 64.
    DQ_V4: dQ reduced into fp32 by 16-byte ``red.global.add.v4.f32`` after a lane-pair swap,
    half as many reduction instructions as the default 8-byte ones (the same additions).
    DQ_SQUARE: at D = 64, in dQ = dS K each warp takes twice the query slices and half the D
    columns, so one K fragment read from shared memory serves two slices (32 ldmatrix per warp
    and step instead of 40; the same products, summed in the same order). No effect at D = 128
    (the second slice's fragments beside dK, dV spill)."""

    ONE_PART = 1
    DQ_V4 = 2
    DQ_SQUARE = 4


BWD_OPTION_NAMES = {"onepart": BwdOption.ONE_PART, "dqv4": BwdOption.DQ_V4,
                    "dqsq": BwdOption.DQ_SQUARE}


def parse_bwd_options(text: str | None) -> BwdOption:
    """``"onepart+dqv4"`` (names of ``BWD_OPTION_NAMES`` joined by +; None or "" for none)."""
    out = BwdOption(0)
    for word in filter(None, (text or "").split("+")):
        if word not in BWD_OPTION_NAMES:
            raise ValueError(f"backward option {word!r}: one of "
                             f"{', '.join(BWD_OPTION_NAMES)}, joined by +")
        out |= BWD_OPTION_NAMES[word]
    return out


@dataclass(frozen=True)
class BwdInstance:
    """One template instantiation of ``flash_bwd_dkdv``."""

    order: OrderKind
    schedule: ScheduleKind
    tiles: Tiles
    D: int
    causal: bool
    dtype: DType
    options: BwdOption = BwdOption(0)
    trace: bool = False

    def __post_init__(self):
        if self.schedule not in BWD_SCHEDULES:
            raise ValueError(f"backward schedule {self.schedule.name}: the backward is built "
                             "for the grid launch and the persistent (static<P>) schedule")
        if self.tiles.m % 64 or self.tiles.n % 16 or self.D not in (64, 128):
            raise ValueError(f"backward tiles {self.tiles.m}x{self.tiles.n} at D={self.D}: "
                             "TILE_M a multiple of 64, TILE_N of 16, D 64 or 128")

    @property
    def name(self) -> str:
        c = "true" if self.causal else "false"
        opt = f", {int(self.options)}" if self.options else ""
        fn = "flash_bwd_dkdv_trace" if self.trace else "flash_bwd_dkdv"
        return (f"{fn}<OrderKind::{self.order.name}, ScheduleKind::"
                f"{self.schedule.name}, {self.tiles.m}, {self.tiles.n}, {self.D}, {c}, "
                f"DType::{self.dtype.name}{opt}>")

    @property
    def threads(self) -> int:
        return 2 * self.tiles.n        # one warp per 16 keys

    @property
    def smem_bytes(self) -> int:
        return bwd_smem_bytes(self.tiles, self.D)


def bwd_smem_bytes(tiles: Tiles, D: int) -> int:
    """K and V tiles, two stages of Q, dO, LSE and Δ, and dSᵀ (BwdShape::SMEM_BYTES)."""
    return 2 * tiles.n * D * 2 + 2 * (2 * tiles.m * D * 2 + 2 * tiles.m * 4) + tiles.n * tiles.m * 2


def delta_name(D: int, dtype: DType) -> str:
    return f"flash_bwd_delta<{D}, DType::{dtype.name}>"


def dq_name(D: int, dtype: DType) -> str:
    return f"flash_bwd_dq<{D}, DType::{dtype.name}>"


def bwd_source_text() -> str:
    return BWD_ENTRY.read_text()


def bwd_compile_options() -> tuple[str, ...]:
    """As the forward's: the headers' hash is an option, so CuPy's cache (keyed on the .cu text)
    is invalidated when only a header changes."""
    h = hashlib.sha256(b"".join(f.read_bytes()
                                for f in (SCHEDULE_HEADER, HEADER, BWD_HEADER, BWD_ENTRY)))
    return BASE_OPTIONS + (f"-I{SOURCE_DIR}", f"-DFLASH_BWD_SOURCE={h.hexdigest()[:16]}")


BWD_TILES_D64 = Tiles(128, 128)
"""The backward's default tiles at D = 64 (``cuda_baseline.host.backend.default_variant`` with
``training=True``): 128 query rows per step, 242-255 registers, no spills."""


def ci_bwd_instances() -> list[BwdInstance]:
    """Every order x schedule x D x mask x dtype at ``BWD_TILES`` and, at D = 64, at
    ``BWD_TILES_D64`` (96 builds)."""
    return [BwdInstance(o, s, t, d, c, dt) for o in OrderKind for s in BWD_SCHEDULES
            for d in (64, 128) for t in ((BWD_TILES, BWD_TILES_D64) if d == 64 else (BWD_TILES,))
            for c in (False, True) for dt in DType]


_DKDV = re.compile(r"_Z(14flash_bwd_dkdv|20flash_bwd_dkdv_trace)IL9OrderKind(\d)EL12ScheduleKind"
                   r"(\d)ELi(\d+)ELi(\d+)ELi(\d+)ELb(\d)EL5DType(\d)ELi(\d+)EE")
_SMALL = re.compile(r"_Z(15flash_bwd_delta|12flash_bwd_dq)ILi(\d+)EL5DType(\d)EE")


def _demangle(sym: str) -> str | None:
    dtypes = list(DType)
    if d := _DKDV.search(sym):
        return BwdInstance(OrderKind(int(d[2])), ScheduleKind(int(d[3])),
                           Tiles(int(d[4]), int(d[5])), int(d[6]), d[7] == "1",
                           dtypes[int(d[8])], BwdOption(int(d[9])), d[1].endswith("trace")).name
    if d := _SMALL.search(sym):
        fn = delta_name if d[1].endswith("delta") else dq_name
        return fn(int(d[2]), dtypes[int(d[3])])
    return None


def parse_bwd_ptxas(log: str) -> dict[str, Resources]:
    """Resources per backward instantiation name from ``-Xptxas -v`` output."""
    return parse_resources(log, _demangle)


def compile_bwd_nvcc(names: list[str], arch: str = "sm_90") -> dict[str, Resources]:
    """Compile the named backward kernels to one cubin with nvcc; their resources by name."""
    return compile_named("flash_bwd.cu", names, bwd_compile_options(), _demangle, arch)


def bwd_names(insts: list[BwdInstance]) -> list[str]:
    """The dK/dV kernels and the preprocess / conversion kernels they need."""
    small = {f(i.D, i.dtype) for i in insts for f in (delta_name, dq_name)}
    return [i.name for i in insts] + sorted(small)


__all__ = ["BWD_OPTION_NAMES", "BWD_TILES", "BWD_TILES_D64", "BwdInstance", "BwdOption",
           "bwd_compile_options", "bwd_names", "bwd_smem_bytes", "bwd_source_text",
           "parse_bwd_options", "ci_bwd_instances", "compile_bwd_nvcc", "delta_name", "dq_name",
           "parse_bwd_ptxas"]

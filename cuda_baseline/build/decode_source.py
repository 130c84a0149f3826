"""The split-K/V decode kernels' instantiations (decode.cu), their compile options and an nvcc
check of their resources; nothing here imports torch or CuPy.

``DecodeInstance`` names one ``decode_split`` build: the head dimension, the K/V tile (keys per
pipeline stage), the group packing (HG query heads × SQP padded rows: ``spec.decode.packing``),
the element type, the mask (none, SDPA's top-left causal, or bottom-right causal with
per-sequence lengths) and whether it writes fp32 partials for ``decode_combine`` (more than one
split) or the output itself. ``combine_name`` names the merge kernel, which depends on D and the
type only. Both go into one CuPy module per launch (``names``), so a lazy load and the GPU
tests' warm-up ask CuPy's cache for the same key.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from cuda_baseline.build.source import (
    BASE_OPTIONS,
    HEADER,
    SCHEDULE_HEADER,
    SOURCE_DIR,
    Resources,
    compile_named,
    parse_resources,
)
from spec.decode import DECODE_MAX_M, DECODE_MIN_M
from spec.problem import DType

DECODE_HEADER = SOURCE_DIR / "decode.cuh"
DECODE_ENTRY = SOURCE_DIR / "decode.cu"

STAGES = 3
"""K/V pipeline depth (DECODE_STAGES in decode.cuh): two tiles in flight while one is used."""
WARPS = 8
"""Warps of a split CTA (DECODE_WARPS in decode.cuh)."""


@dataclass(frozen=True)
class DecodeInstance:
    """One ``decode_split`` instantiation."""

    D: int
    tile_n: int
    hg: int
    sqp: int
    dtype: DType
    causal: bool
    bottom_right: bool
    split: bool

    def __post_init__(self):
        m = self.hg * self.sqp
        if self.D not in (64, 128) or m not in (16, 32, 64) or not DECODE_MIN_M <= m \
                <= DECODE_MAX_M or self.tile_n % (16 * WARPS // (m // 16)):
            raise ValueError(f"decode build D={self.D}, M={self.hg}x{self.sqp}, "
                             f"TILE_N={self.tile_n}: D 64 or 128, M 16, 32 or 64, each warp's "
                             "key slice whole 16-key steps")
        if self.bottom_right and not self.causal:
            raise ValueError("bottom-right alignment is a causal mask")

    @property
    def name(self) -> str:
        b = lambda x: "true" if x else "false"   # noqa: E731
        return (f"decode_split<{self.D}, {self.tile_n}, {self.hg}, {self.sqp}, "
                f"DType::{self.dtype.name}, {b(self.causal)}, {b(self.bottom_right)}, "
                f"{b(self.split)}>")

    @property
    def combine(self) -> str:
        return combine_name(self.D, self.dtype)

    @property
    def names(self) -> list[str]:
        """The kernels of one launch's CuPy module (the merge too, also for one split)."""
        return [self.name, self.combine]

    @property
    def threads(self) -> int:
        return 32 * WARPS

    @property
    def smem_bytes(self) -> int:
        return decode_smem_bytes(self.D, self.tile_n, self.hg * self.sqp)


COMBINE_THREADS = 128


def combine_name(D: int, dtype: DType) -> str:
    return f"decode_combine<{D}, DType::{dtype.name}>"


def decode_smem_bytes(D: int, tile_n: int, M: int) -> int:
    """The packed Q tile and STAGES K and V buffers (DecodeShape::SMEM_BYTES)."""
    return (M + 2 * STAGES * tile_n) * D * 2


def decode_source_text() -> str:
    return DECODE_ENTRY.read_text()


def decode_compile_options() -> tuple[str, ...]:
    """As the forward's: the headers' hash is an option, so CuPy's cache (keyed on the .cu text)
    is invalidated when only a header changes."""
    h = hashlib.sha256(b"".join(f.read_bytes() for f in (SCHEDULE_HEADER, HEADER,
                                                          DECODE_HEADER, DECODE_ENTRY)))
    return BASE_OPTIONS + (f"-I{SOURCE_DIR}", f"-DDECODE_SOURCE={h.hexdigest()[:16]}")


def _demangle(sym: str) -> str | None:
    dtypes = list(DType)
    if d := re.search(r"_Z12decode_splitILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)EL5DType(\d)ELb(\d)"
                      r"ELb(\d)ELb(\d)EE", sym):
        return DecodeInstance(int(d[1]), int(d[2]), int(d[3]), int(d[4]), dtypes[int(d[5])],
                              d[6] == "1", d[7] == "1", d[8] == "1").name
    if d := re.search(r"_Z14decode_combineILi(\d+)EL5DType(\d)EE", sym):
        return combine_name(int(d[1]), dtypes[int(d[2])])
    return None


def parse_decode_ptxas(log: str) -> dict[str, Resources]:
    """Resources per decode kernel name from ``-Xptxas -v`` output."""
    return parse_resources(log, _demangle)


def compile_decode_nvcc(names: list[str], arch: str = "sm_90") -> dict[str, Resources]:
    """Compile the named decode kernels to one cubin with nvcc; their resources by name."""
    return compile_named("decode.cu", names, decode_compile_options(), _demangle, arch)


__all__ = ["COMBINE_THREADS", "DecodeInstance", "STAGES", "WARPS", "combine_name",
           "compile_decode_nvcc", "decode_compile_options", "decode_smem_bytes",
           "decode_source_text", "parse_decode_ptxas"]

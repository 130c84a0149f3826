"""The attention problem and its tiling: shapes, element sizes and the tile grid.

Everything here is pure arithmetic on frozen dataclasses; the kernels, the trace generator and the
models all read tile counts and causal ranges from this one place.

Causal masking follows PyTorch SDPA's ``is_causal`` (top-left aligned): query row ``r`` attends to
key columns ``0..r``. A Q tile ``i`` covers rows ``[i*TILE_M, min((i+1)*TILE_M, S_q))`` and
therefore needs K/V tiles ``0 .. kv_tiles_for(i) - 1``; the tiles from ``first_masked_kv_tile(i)``
on straddle the diagonal and need the element mask, the ones before it are fully visible.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

SUPPORTED_HEAD_DIMS = (64, 128)
"""Head dims the kernel families are built for (the paper uses 64; 128 is the common LLM case)."""


class InvalidProblem(ValueError):
    """A problem or tiling the framework cannot run; the message names the field and the fix."""


class DType(enum.Enum):
    """Input element type. Accumulation is always fp32."""

    FP16 = "fp16"
    BF16 = "bf16"

    @property
    def nbytes(self) -> int:
        return 2

    @classmethod
    def parse(cls, value: "str | DType") -> "DType":
        if isinstance(value, DType):
            return value
        aliases = {"fp16": cls.FP16, "float16": cls.FP16, "half": cls.FP16,
                   "bf16": cls.BF16, "bfloat16": cls.BF16}
        try:
            return aliases[str(value).lower()]
        except KeyError:
            raise InvalidProblem(
                f"dtype {value!r} is not supported; use one of fp16, bf16") from None


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Tiles:
    """CTA tile shape: TILE_M query rows per Q tile, TILE_N key rows per K/V tile."""

    m: int
    n: int

    def __post_init__(self) -> None:
        for name, v in (("TILE_M", self.m), ("TILE_N", self.n)):
            if not isinstance(v, int) or v <= 0:
                raise InvalidProblem(f"{name}={v!r} must be a positive integer (e.g. 64)")
            if v % 16:
                raise InvalidProblem(
                    f"{name}={v} must be a multiple of 16 (tensor-core fragment size); "
                    "try 64 or 80")

    @property
    def label(self) -> str:
        return f"m{self.m}n{self.n}"

    @classmethod
    def square(cls, t: int) -> "Tiles":
        return cls(t, t)


@dataclass(frozen=True)
class Problem:
    """One attention forward call: ``softmax(Q Kᵀ / sqrt(D)) V`` on [B, H, S, D] tensors.

    ``H_kv`` is the number of K/V heads (grouped-query attention when it is smaller than ``H``;
    query head ``h`` reads K/V head ``h // (H // H_kv)``). ``S_kv`` defaults to ``S_q``.
    """

    B: int
    H: int
    S_q: int
    D: int
    S_kv: int | None = None
    H_kv: int | None = None
    dtype: DType = DType.FP16
    causal: bool = False

    def __post_init__(self) -> None:
        if self.S_kv is None:
            object.__setattr__(self, "S_kv", self.S_q)
        if self.H_kv is None:
            object.__setattr__(self, "H_kv", self.H)
        object.__setattr__(self, "dtype", DType.parse(self.dtype))
        for name in ("B", "H", "S_q", "S_kv", "H_kv", "D"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise InvalidProblem(f"{name}={v!r} must be a positive integer")
        if self.D not in SUPPORTED_HEAD_DIMS:
            raise InvalidProblem(
                f"head dim D={self.D} is not supported; the kernels are built for D in "
                f"{SUPPORTED_HEAD_DIMS}")
        if self.H % self.H_kv:
            raise InvalidProblem(
                f"H={self.H} query heads must be a multiple of H_kv={self.H_kv} K/V heads")

    @property
    def group_size(self) -> int:
        """Query heads sharing one K/V head."""
        return self.H // self.H_kv

    @property
    def flops(self) -> float:
        """Forward FLOPs, 4·B·H·S_q·S_kv·D, halved for causal (the convention of the paper and
        FA)."""
        f = 4.0 * self.B * self.H * self.S_q * self.S_kv * self.D
        return f / 2 if self.causal else f

    @property
    def label(self) -> str:
        c = "causal" if self.causal else "full"
        kv = "" if self.S_kv == self.S_q else f"kv{self.S_kv}"
        g = "" if self.H_kv == self.H else f"g{self.H_kv}"
        return f"b{self.B}h{self.H}{g}s{self.S_q}{kv}d{self.D}.{self.dtype.value}.{c}"


@dataclass(frozen=True)
class TileGrid:
    """The tile grid of a problem under a tiling: tile counts, tile sizes and causal ranges."""

    problem: Problem
    tiles: Tiles

    @property
    def n_q(self) -> int:
        return cdiv(self.problem.S_q, self.tiles.m)

    @property
    def n_kv(self) -> int:
        return cdiv(self.problem.S_kv, self.tiles.n)

    @property
    def n_bh(self) -> int:
        return self.problem.B * self.problem.H

    @property
    def n_work(self) -> int:
        """Work items: one per (batch, head, Q tile)."""
        return self.n_bh * self.n_q

    @property
    def kv_step_bytes(self) -> int:
        """Bytes of one K tile plus one V tile: what one step of a CTA's scan reads from L2."""
        return 2 * self.tiles.n * self.problem.D * self.problem.dtype.nbytes

    def q_rows(self, i: int) -> int:
        return min(self.tiles.m, self.problem.S_q - i * self.tiles.m)

    def kv_rows(self, j: int) -> int:
        return min(self.tiles.n, self.problem.S_kv - j * self.tiles.n)

    def kv_tiles_for(self, i):
        """K/V tiles Q tile ``i`` reads (``0 .. Tc-1``): all of them, or causal: up to the tile
        holding its last row's diagonal. Works on ints and on integer arrays."""
        if not self.problem.causal:
            return np.full_like(i, self.n_kv) if isinstance(i, np.ndarray) else self.n_kv
        last_row = np.minimum((np.asarray(i) + 1) * self.tiles.m, self.problem.S_q)  # exclusive
        tc = np.minimum(-(-last_row // self.tiles.n), self.n_kv)
        return tc if isinstance(i, np.ndarray) else int(tc)

    def q_tiles_for(self, j):
        """Q tiles the backward's dK/dV scan of K/V tile ``j`` runs: all ``n_q``, or causal
        (top-left): from the Q tile holding row ``j*TILE_N`` to the last one, none when that row
        lies past the last Q tile (a chunk's query block against a longer K/V cache). The
        transpose of ``kv_tiles_for`` (the same (Q tile, K/V tile) pairs), but for one case the
        kernel computes and this counts: a K/V tile starting past ``S_q`` inside the ragged last
        Q tile still runs that tile, every score masked. Works on ints and on integer arrays."""
        if not self.problem.causal:
            return np.full_like(j, self.n_q) if isinstance(j, np.ndarray) else self.n_q
        first = np.minimum(np.asarray(j) * self.tiles.n // self.tiles.m, self.n_q)
        n = self.n_q - first
        return n if isinstance(j, np.ndarray) else int(n)

    def kv_item_steps(self) -> np.ndarray:
        """Q steps of each K/V tile of one (batch, head) in the dK/dV pass, per query head it
        scans (``kernels.rules.backward_choice`` multiplies by the heads of a grouped item)."""
        return np.asarray(self.q_tiles_for(np.arange(self.n_kv)), dtype=np.int64)

    def first_masked_kv_tile(self, i: int) -> int:
        """First K/V tile that needs an element mask for Q tile ``i`` (causal diagonal or ragged
        end)."""
        tc = self.kv_tiles_for(i)
        first = tc
        if self.problem.causal:
            first = min(first, (i * self.tiles.m) // self.tiles.n)
        if self.problem.S_kv % self.tiles.n:
            first = min(first, self.n_kv - 1)
        return first

    def item_steps(self) -> np.ndarray:
        """K/V steps of each Q tile of one (batch, head): ``n_kv`` each, or the causal ranges.
        With the per-step and per-item costs, what one work item costs
        (``kernels.rules.choice``)."""
        return np.asarray(self.kv_tiles_for(np.arange(self.n_q)), dtype=np.int64)

    def masked_fraction(self) -> float:
        """Share of the score elements the kernel computes that the mask throws away: the ragged
        last Q and K/V tiles (a tile is computed whole) and, causal, the upper triangle of the
        diagonal tiles. 0 for a problem whose lengths are multiples of the tiles, non-causal."""
        p, t = self.problem, self.tiles
        computed = int(self.item_steps().sum()) * t.m * t.n
        rows = np.arange(p.S_q, dtype=np.int64)
        valid = int(np.minimum(rows + 1, p.S_kv).sum()) if p.causal else p.S_q * p.S_kv
        return 1.0 - valid / computed

"""Exact models of the kernel's L2 traffic: sector accesses and cold misses.

Two exact layers (all counts in sectors of ``C`` bytes); the third, fitted one is
``analysis.models.wave``:

1. **Sector accesses** (``sector_accesses``, exact). A split-Q FlashAttention forward loads each Q
   tile once, streams K and V tiles ``0 .. Tc(i)-1`` for Q tile ``i`` and stores O once. Summing
   tile sizes over that visit set gives the L2 sector traffic exactly; it equals
   ``spec.build_trace(...).total_sectors()`` for any schedule and order (they only permute it).
   Closed form (``sector_accesses_closed_form``), per (b, h), with ``T`` dividing ``S``:

       non-causal   M = (2·D·E/C) · S_q · (1 + S_kv/T_m)
       causal       M = (2·D·E/C) · S · (S/(2T) + 3/2)            (T_m = T_n = T, S_q = S_kv = S)

   For fp16, D = 64, C = 32 (2·D·E/C = 8) the non-causal line is the paper's ``8S(1 + S/T)``.
   The paper's causal line ``8S(S/(2T) + 1/2)`` is exactly the K/V term alone: it leaves out the
   ``8S`` of Q and O (relative size ``2T/S``: 6% at S = 2K, T = 64; 0.1% at S = 128K).
   ``paper_sector_accesses`` evaluates the paper's formulas literally.

2. **Cold misses** (``cold_misses``, exact): every byte of Q, K, V and O that is touched, once:
   ``B·(H·2·S_q + H_kv·2·S_kv)·D·E/C`` (``4·S·D·E/C = 16S`` per head for fp16, D = 64, no GQA; with
   grouped-query attention K/V count once per K/V head). A causal problem with ``S_kv > S_q``
   never touches the K/V rows past ``S_q``; the exact count knows it. Non-compulsory misses are
   ``measured − cold`` (``noncompulsory``).

The wave model of the misses beyond these and the C_eff fit: ``analysis.models.wave``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from spec.problem import cdiv

__all__ = ["Shape", "Traffic", "sector_accesses", "sector_accesses_closed_form",
           "paper_sector_accesses", "cold_misses", "cold_misses_closed_form", "noncompulsory",
           "kv_sectors", "mape", "ModelError", "model_error", "MiB", "as_shape"]

MiB = 1 << 20


# --------------------------------------------------------------------------------------------
# shapes
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shape:
    """Everything the models need, in plain numbers (no restriction on D or E).

    ``S_kv`` defaults to ``S_q``, ``H_kv`` to ``H``; ``E`` is the element size in bytes and ``C``
    the sector size in bytes. Build one from the spec with ``Shape.of(problem, tiles)``.
    """

    S_q: int
    D: int
    S_kv: int | None = None
    T_m: int = 64
    T_n: int = 64
    E: int = 2
    C: int = 32
    causal: bool = False
    B: int = 1
    H: int = 1
    H_kv: int | None = None

    def __post_init__(self) -> None:
        if self.S_kv is None:
            object.__setattr__(self, "S_kv", self.S_q)
        if self.H_kv is None:
            object.__setattr__(self, "H_kv", self.H)
        for f in ("S_q", "S_kv", "D", "T_m", "T_n", "E", "C", "B", "H", "H_kv"):
            v = getattr(self, f)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"{f}={v!r} must be a positive integer")
        if self.H % self.H_kv:
            raise ValueError(f"H={self.H} must be a multiple of H_kv={self.H_kv}")

    @classmethod
    def of(cls, problem, tiles, sector_bytes: int = 32) -> "Shape":
        """From a ``spec.Problem`` and ``spec.Tiles``."""
        p = problem
        return cls(S_q=p.S_q, S_kv=p.S_kv, D=p.D, T_m=tiles.m, T_n=tiles.n, E=p.dtype.nbytes,
                   C=sector_bytes, causal=p.causal, B=p.B, H=p.H, H_kv=p.H_kv)

    def with_S(self, S_q: int, S_kv: int | None = None) -> "Shape":
        """The same shape at another sequence length (``S_kv`` follows ``S_q`` unless given)."""
        return replace(self, S_q=int(S_q), S_kv=int(S_q if S_kv is None else S_kv))

    @property
    def n_q(self) -> int:
        return cdiv(self.S_q, self.T_m)

    @property
    def n_kv(self) -> int:
        return cdiv(self.S_kv, self.T_n)

    @property
    def group(self) -> int:
        return self.H // self.H_kv

    @property
    def row_sectors(self) -> float:
        """Sectors of one row of D elements (``D·E/C``; 4 for fp16, D = 64, C = 32)."""
        return self.D * self.E / self.C

    def q_tile_sectors(self) -> np.ndarray:
        """Sectors of each Q (and O) tile: ``ceil(rows·D·E / C)``, the last tile partial."""
        rows = np.minimum(self.T_m, self.S_q - np.arange(self.n_q, dtype=np.int64) * self.T_m)
        return cdiv(rows * self.D * self.E, self.C)

    def kv_tile_sectors(self) -> np.ndarray:
        """Sectors of each K (and each V) tile."""
        rows = np.minimum(self.T_n, self.S_kv - np.arange(self.n_kv, dtype=np.int64) * self.T_n)
        return cdiv(rows * self.D * self.E, self.C)

    def kv_tiles_for(self, i) -> np.ndarray:
        """``Tc(i)``: K/V tiles ``0..Tc-1`` Q tile ``i`` reads (causal: top-left diagonal, as
        ``spec.TileGrid.kv_tiles_for``)."""
        i = np.asarray(i, dtype=np.int64)
        if not self.causal:
            return np.full(i.shape, self.n_kv, dtype=np.int64)
        last_row = np.minimum((i + 1) * self.T_m, self.S_q)
        return np.minimum(cdiv(last_row, self.T_n), self.n_kv)

    def kv_prefix(self) -> np.ndarray:
        """``kv_prefix[t]`` = sectors of K tiles ``0..t-1`` (the same for V)."""
        return np.concatenate([[0], np.cumsum(self.kv_tile_sectors())]).astype(np.int64)


def as_shape(x, tiles=None, sector_bytes: int = 32) -> Shape:
    """``x`` as a ``Shape``: itself, or a spec Problem with its Tiles (the models take either)."""
    if isinstance(x, Shape):
        return x
    if tiles is None:
        raise TypeError("give a Shape, or a spec Problem together with its Tiles")
    return Shape.of(x, tiles, sector_bytes)


# --------------------------------------------------------------------------------------------
# sector accesses
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Traffic:
    """L2 sector accesses per tensor (all batches and heads)."""

    q: int
    k: int
    v: int
    o: int

    @property
    def total(self) -> int:
        return self.q + self.k + self.v + self.o

    @property
    def kv(self) -> int:
        return self.k + self.v


def sector_accesses(shape, tiles=None, sector_bytes: int = 32) -> Traffic:
    """Exact L2 sector accesses: Q and O once per Q tile, K and V once per visited (q, kv) pair.

    Accepts a ``Shape`` or ``(spec.Problem, spec.Tiles[, sector_bytes])``. Equals
    ``build_trace(...).total_sectors()`` for every schedule and scan order whenever ``C`` divides
    a row's bytes ``D·E`` (always, for the supported head dims; otherwise the trace floors the
    partial sector of a tile and this counts it).

    >>> sector_accesses(Shape(S_q=256, D=64, T_m=64, T_n=64)).total     # 8S(1 + S/T) = 10240
    10240
    """
    s = as_shape(shape, tiles, sector_bytes)
    qs = s.q_tile_sectors()
    tc = s.kv_tiles_for(np.arange(s.n_q))
    kv_per_head = int(s.kv_prefix()[tc].sum())
    bh = s.B * s.H
    q = bh * int(qs.sum())
    return Traffic(q=q, k=bh * kv_per_head, v=bh * kv_per_head, o=q)


def sector_accesses_closed_form(shape, tiles=None, sector_bytes: int = 32) -> float:
    """The closed form of ``sector_accesses`` (continuous tile counts; exact when tiles divide S).

    Non-causal: ``B·H·(2·D·E/C)·S_q·(1 + S_kv/T_m)``. Causal (top-left diagonal, ``S_kv >= S_q``
    reads K/V rows up to ``S_q`` only; ``g = gcd(T_m, T_n)``; the last term is the average
    round-up of the diagonal to whole K/V tiles):
    ``B·H·(2·D·E/C)·S_q·(S_q/(2·T_m) + 3/2 + (T_n − g)/(2·T_m))``; with ``S_kv < S_q`` the rows
    past ``S_kv`` read all ``S_kv`` keys.

    >>> sector_accesses_closed_form(Shape(S_q=4096, D=64, causal=True))   # 8S(S/2T + 3/2)
    1097728.0
    """
    s = as_shape(shape, tiles, sector_bytes)
    r2 = 2.0 * s.row_sectors
    Sq, Skv, Tm, Tn = float(s.S_q), float(s.S_kv), float(s.T_m), float(s.T_n)
    if not s.causal:
        per_head = r2 * Sq * (1.0 + Skv / Tm)
    else:
        g = math.gcd(s.T_m, s.T_n)
        tri = min(Sq, Skv)                              # Q rows on the triangle
        kv_rows = tri * tri / (2 * Tm) + tri / 2 + tri * (Tn - g) / (2 * Tm)
        kv_rows += (Sq - tri) * Skv / Tm                 # rows past S_kv read every key
        per_head = r2 * (Sq + kv_rows)
    return s.B * s.H * per_head


def paper_sector_accesses(S, T, causal: bool = False):
    """The paper's formulas verbatim (fp16, D = 64, C = 32, per batch and head):
    ``8S(1 + S/T)`` non-causal, ``8S(S/(2T) + 1/2)`` causal (K/V only; see the module doc)."""
    S = np.asarray(S, dtype=np.float64)
    out = 8 * S * (S / (2 * T) + 0.5) if causal else 8 * S * (1 + S / T)
    return float(out) if out.ndim == 0 else out


# --------------------------------------------------------------------------------------------
# cold misses
# --------------------------------------------------------------------------------------------
def cold_misses(shape, tiles=None, sector_bytes: int = 32) -> int:
    """Exact compulsory misses: the sectors of every Q, O tile and every K, V tile touched.

    Q/O per query head, K/V per K/V head (GQA); for a causal problem with ``S_kv > S_q`` only the
    K/V tiles up to ``Tc(n_q − 1)`` are touched.

    >>> cold_misses(Shape(S_q=1024, D=64))                  # 4·S·D·E/C = 16S
    16384
    """
    s = as_shape(shape, tiles, sector_bytes)
    qo = 2 * s.B * s.H * int(s.q_tile_sectors().sum())
    touched = int(s.kv_tiles_for(s.n_q - 1))
    kv = 2 * s.B * s.H_kv * int(s.kv_prefix()[touched])
    return qo + kv


def cold_misses_closed_form(shape, tiles=None, sector_bytes: int = 32) -> float:
    """``B·(H·2·S_q + H_kv·2·S_kv')·D·E/C`` with ``S_kv' = min(S_kv, S_q)`` when causal."""
    s = as_shape(shape, tiles, sector_bytes)
    skv = min(s.S_kv, s.S_q) if s.causal else s.S_kv
    return s.B * (s.H * 2.0 * s.S_q + s.H_kv * 2.0 * skv) * s.row_sectors


def noncompulsory(measured, cold):
    """Non-compulsory misses: measured − cold (arrays or scalars)."""
    return np.asarray(measured) - np.asarray(cold)


def kv_sectors(shape, tiles=None, sector_bytes: int = 32) -> int:
    """K+V sectors of one K/V head (``KV = 2·S_kv·D·E/C`` for whole tiles)."""
    s = as_shape(shape, tiles, sector_bytes)
    return 2 * int(s.kv_prefix()[-1])


# --------------------------------------------------------------------------------------------
# C_eff fit and error measures
# --------------------------------------------------------------------------------------------
def mape(predicted, measured) -> float:
    """Mean absolute percentage error of a model against measurements, in percent."""
    p = np.asarray(predicted, dtype=np.float64)
    m = np.asarray(measured, dtype=np.float64)
    if p.shape != m.shape:
        raise ValueError(f"shapes differ: {p.shape} vs {m.shape}")
    if np.any(m == 0):
        raise ValueError("MAPE is undefined for a measured value of 0")
    return float(100.0 * np.mean(np.abs(p - m) / np.abs(m)))


@dataclass(frozen=True)
class ModelError:
    """How far a model is from measurements: MAPE and the largest |error| (percent of the measured
    value), the range of measured/model and the number of points."""

    mape_pct: float
    max_abs_pct: float
    ratio_min: float
    ratio_max: float
    points: int


def model_error(predicted, measured) -> ModelError:
    """``ModelError`` of ``predicted`` against ``measured`` (1-D, same length, no zero measured)."""
    p = np.asarray(predicted, dtype=np.float64)
    m = np.asarray(measured, dtype=np.float64)
    rel = 100.0 * (p - m) / m
    return ModelError(mape_pct=mape(p, m), max_abs_pct=float(np.max(np.abs(rel))),
                      ratio_min=float(np.min(m / p)), ratio_max=float(np.max(m / p)),
                      points=len(m))

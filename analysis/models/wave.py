"""The wave model of non-compulsory misses and the least-squares fit of the effective capacity.

On top of the exact sector and cold-miss counts of ``analysis.models.traffic``:

3. **The wave model** (``wave_misses``). ``P`` persistent CTAs take work items ``(bh, q)`` in
   q-major grid-stride order, so at any time they work on ``P`` consecutive Q tiles, a
   *wavefront*, and walk the same K/V tiles in near lock-step: within a wave each tile misses
   once and hits for the other ``P − 1`` CTAs. Between two waves of the same head every K/V tile
   is reused, and the reuse distance decides the misses. With ``KV = 2·S_kv·D·E/C`` sectors of K+V
   per head and ``W = n_q / P`` waves per head (the paper's form, ``wave_misses_paper``):

       linear     misses ≈ B·H·(cold + (W − 1)·KV)              once KV > C_eff, else cold
       sawtooth   misses ≈ B·H·(cold + (W − 1)·max(0, KV − C_eff))

   Linear: a cyclic scan over more than the cache is LRU's worst case; every tile is reused at
   distance KV and misses; below the capacity the whole head stays resident and only cold
   misses remain (a step at KV = C_eff). Sawtooth: the next wave starts on the tiles the previous
   wave touched last; tile ``j`` is reused at distance ``j`` (or ``N − 1 − j``), so the ``C_eff``
   most recent sectors hit and ``KV − C_eff`` miss: continuous at the capacity, zero below it.

   Worked example (GB10, S = 128K, D = 64, fp16, 64×64 tiles, P = 48): n_q = 2048, W = 42.7,
   KV = 32 MiB = 1 048 576 sectors, cold = 16S = 2 097 152 sectors per head. With C_eff = 24 MiB,
   linear ≈ cold + 41.7·1 048 576 ≈ 45.8 M sectors per head; sawtooth ≈ cold + 41.7·262 144
   ≈ 13.0 M: 75% fewer non-compulsory misses.

   ``wave_misses`` is the same argument counted wave by wave instead of with the average ``W``.
   Assumptions, all stated so they can be checked against the simulator:

   - Waves are aligned: wave ``g`` holds work items ``g·P .. g·P + P − 1`` and all its CTAs scan
     in the direction ``order.reversed_for(g)`` (true for the persistent schedules; for
     block-parity concurrent CTAs disagree and the model refuses).
   - Several heads: the work of a K/V head (its ``H/H_kv`` query heads, adjacent in q-major order)
     is a contiguous run of items; every wave that touches the run streams the head's K/V once,
     so a head gets whole passes, not the fractional ``W`` (``ceil``-ish, one more when a wave
     straddles two heads). Consecutive waves of the same K/V head are reuse transitions; under
     GQA the hand-over from one query head to the next in the group is one too (same K/V).
   - A wave that straddles ``n`` K/V heads streams them side by side at the same position, so
     between two waves of a head the other heads' tiles sit in the LRU stack too. For a tile at
     relative position ``x`` of the scan (``0 <= x < 1``), with ``n_prev``, ``n_cur`` heads in the
     earlier and later wave and ``n_union`` in both together, the reuse distance is
     forward→forward ``KV·(n_prev·(1 − x) + n_cur·x)``; backward→backward
     ``KV·(n_cur·(1 − x) + n_prev·x)``; a direction change ``KV·n_union·(1 − x)`` (or ``·x``).
     A transition misses the part of the scan where the distance exceeds ``C_eff``. With one
     head on each side that is ``KV·[KV > C_eff]`` without a direction change and
     ``max(0, KV − C_eff)`` with one; a straddled sawtooth transition misses
     ``max(0, KV − C_eff/n_union)``. With ``P > n_q`` a wave holds several whole heads and only
     the heads cut by a wave boundary are re-read (at a large distance).
   - Non-causal only. A causal CTA's rows have different lengths, so the persistent CTAs drift
     apart (CTA ``c`` of ``P`` runs ``c`` steps longer per item than CTA 0) and there are no
     wavefronts to speak of after a few items; ``spec.build_trace`` models that drift, and on it
     an aligned-wave count underestimates the non-compulsory misses 8–12× (B = H = 1, S = 8K,
     P = 8). ``wave_misses`` therefore refuses causal shapes: use the simulator.
   - Q, O and anything else sharing the cache is folded into ``C_eff``; that, set associativity
     and the hash of addresses to slices is why ``C_eff`` comes out below the nominal L2. On the
     simulator itself (an ideal LRU of capacity ``C``) the O stores of one wave and the Q loads
     of the next (``2·P`` Q-tile sizes) sit between the two scans, and the model reproduces the
     simulated misses exactly with ``C_eff = C − 2·P·T_m·D·E`` for aligned waves (``P`` dividing
     ``n_q``), and to a few percent when waves straddle heads (see the tests).

``fit_c_eff`` fits ``C_eff`` by least squares to measured (or simulated) misses over a sweep of
``S`` and reports the residuals. For the linear order the paper's form (and the wave-by-wave one
when no wave straddles two heads) is a step in ``C_eff``: any value between two consecutive KV
sizes fits equally, and the fit says so with ``interval_bytes``.

How well the wave model matches the simulator (``spec.build_trace`` + ``simulate``, non-causal,
``C_eff = C − 2·P·T_m·D·E``): linear exactly, in every case tried; sawtooth exactly for aligned
waves and within 1% of the total misses once every head gets at least 4 waves (6% at 2–4, 13%
below 2). At the GB10 configuration (B = 8, S = 64K..128K, P = 48) both orders agree to 0.01%,
and the paper's fractional-W form is 9–11% off because it misses the straddling waves.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
from scipy import optimize

from analysis.models.traffic import MiB, Shape, as_shape, cold_misses, kv_sectors, mape
from spec.orders import OrderKind, ScanOrder
from spec.problem import cdiv
from spec.records import Metric

__all__ = ["wave_misses", "wave_misses_paper", "CEffFit", "fit_c_eff", "fit_c_eff_rows"]

# --------------------------------------------------------------------------------------------
# the wave model
# --------------------------------------------------------------------------------------------
_FF, _BB, _FB, _BF = 0, 1, 2, 3


def _order(order) -> ScanOrder:
    o = ScanOrder.parse(order) if isinstance(order, str) else order
    if not isinstance(o, ScanOrder):
        raise TypeError(f"order must be a ScanOrder or its label, got {order!r}")
    if o.kind == OrderKind.BLOCK_PARITY:
        raise ValueError("the wave model needs every CTA of a wave to scan in one direction; "
                         "block-parity makes neighbours disagree (use the simulator)")
    return o


@dataclass(frozen=True)
class _WaveTerms:
    """Cold misses plus the reuse transitions of a shape: misses(C) = cold + Σ cost(C).

    One entry per transition between consecutive waves ``g − 1 → g`` of one K/V head: the
    number of K/V heads the earlier wave streams (``n_prev``), the later one (``n_cur``), both
    together (``n_union``), and the pair of scan directions (``kind``). Every head is ``kv``
    sectors of K+V, and the heads of one wave are scanned side by side, at the same position.
    """

    cold: int
    kv: float
    n_prev: np.ndarray
    n_cur: np.ndarray
    n_union: np.ndarray
    kind: np.ndarray    # _FF, _BB, _FB or _BF

    def extra(self, c) -> np.ndarray:
        """Non-compulsory misses at capacities ``c`` (array, sectors)."""
        c = np.atleast_1d(np.asarray(c, dtype=np.float64))
        step = max(1, (1 << 22) // max(1, len(self.kind)))          # bound the temporaries
        if len(c) > step:
            return np.concatenate([self.extra(c[i:i + step]) for i in range(0, len(c), step)])
        c = c[:, None] / self.kv                                     # in units of a head's KV
        ff = self.kind == _FF
        # same direction: the tile at relative position x is reused at distance
        # KV·(alpha + (beta − alpha)·x); FF: alpha = n_prev, beta = n_cur; BB: the reverse
        alpha = np.where(ff, self.n_prev, self.n_cur).astype(np.float64)[None, :]
        beta = np.where(ff, self.n_cur, self.n_prev).astype(np.float64)[None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            xs = (c - alpha) / (beta - alpha)
        same_dir = np.where(alpha == beta, (alpha > c).astype(np.float64),
                            np.where(beta > alpha, np.clip(1 - xs, 0, 1), np.clip(xs, 0, 1)))
        # direction change: distance KV·n_union·(1 − x) (or ·x): the last C/n_union of each
        # head's K/V hit
        flip = np.maximum(0.0, 1.0 - c / self.n_union[None, :])
        k = self.kind[None, :]
        frac = np.where((k == _FF) | (k == _BB), same_dir, flip)
        return self.kv * frac.sum(axis=1)

    def misses(self, c) -> np.ndarray:
        return self.cold + self.extra(c)

    def breakpoints(self) -> np.ndarray:
        """Capacities where some transition's cost jumps or changes slope."""
        n = np.concatenate([self.n_prev, self.n_cur, self.n_union])
        return self.kv * np.unique(n).astype(np.float64)


def _check_wave_args(s: Shape, P: int) -> None:
    """Both wave models assume aligned wavefronts of ``P`` CTAs over a non-causal problem."""
    if s.causal:
        raise ValueError("the wave models assume aligned wavefronts, which causal problems do not "
                         "keep (CTAs drift apart); simulate causal cases with analysis.cache.l2sim")
    if not isinstance(P, (int, np.integer)) or P < 1:
        raise ValueError(f"P={P!r} concurrent CTAs must be a positive integer")


def _wave_terms(s: Shape, P: int, order) -> _WaveTerms:
    _check_wave_args(s, P)
    o = _order(order)
    L = s.group * s.n_q                                  # items of one K/V head (a "unit")
    U = s.B * s.H_kv
    n_items = U * L
    # the K/V heads each wave streams: units w_first..w_last
    wg = np.arange(cdiv(n_items, P), dtype=np.int64)
    w_first = (wg * P) // L
    w_last = (np.minimum(wg * P + P, n_items) - 1) // L
    # the waves each unit appears in
    u = np.arange(U, dtype=np.int64)
    g0, g1 = (u * L) // P, (u * L + L - 1) // P
    count = g1 - g0 + 1
    unit = np.repeat(u, count)
    g = np.repeat(g0, count) + (np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count))
    rev = np.asarray(o.reversed_for(g, 0), dtype=bool)
    same = unit[1:] == unit[:-1]                         # transitions inside a unit
    gp, gc = g[:-1][same], g[1:][same]
    prev_rev, cur_rev = rev[:-1][same], rev[1:][same]
    kind = np.where(~prev_rev & ~cur_rev, _FF, np.where(prev_rev & cur_rev, _BB,
                    np.where(~prev_rev & cur_rev, _FB, _BF)))
    n_prev = w_last[gp] - w_first[gp] + 1
    n_cur = w_last[gc] - w_first[gc] + 1
    n_union = np.maximum(w_last[gp], w_last[gc]) - np.minimum(w_first[gp], w_first[gc]) + 1
    return _WaveTerms(cold_misses(s), float(kv_sectors(s)), n_prev, n_cur, n_union,
                      kind.astype(np.int8))


def wave_misses(shape, P: int, c_eff: float, order="linear", tiles=None,
                sector_bytes: int = 32) -> float:
    """Predicted L2 misses (sectors) of ``P`` persistent q-major CTAs, wave by wave.

    ``c_eff`` is the effective LRU capacity in sectors. See the module docstring for the
    assumptions; when ``P`` divides ``group·n_q`` (no wave straddles two K/V heads) it equals
    ``wave_misses_paper`` for the linear, reverse and sawtooth (X = 1) orders.

    >>> s = Shape(S_q=4096, D=64)                       # n_q = 64, KV = 32768 sectors
    >>> wave_misses(s, P=16, c_eff=24576, order="linear") - cold_misses(s)      # 3 waves · KV
    98304.0
    >>> wave_misses(s, P=16, c_eff=24576, order="sawtooth") - cold_misses(s)    # 3 · (KV − C)
    24576.0
    """
    s = as_shape(shape, tiles, sector_bytes)
    return float(_wave_terms(s, P, order).misses(c_eff)[0])


@dataclass(frozen=True)
class _PaperTerms:
    cold: float
    kv: float
    n_trans: float      # B·H_kv·max(0, group·W − 1)
    flip: float         # fraction of transitions that reverse direction

    def misses(self, c) -> np.ndarray:
        c = np.atleast_1d(np.asarray(c, dtype=np.float64))
        lin = self.kv * (self.kv > c)
        f = self.flip * np.maximum(0.0, self.kv - c) + (1 - self.flip) * lin
        return self.cold + self.n_trans * f

    def breakpoints(self) -> np.ndarray:
        return np.array([self.kv])


def _paper_terms(s: Shape, P: int, order) -> _PaperTerms:
    _check_wave_args(s, P)
    o = _order(order)
    flip = 1.0 / o.group if o.kind == OrderKind.SAWTOOTH else 0.0
    W = s.n_q / P
    return _PaperTerms(float(cold_misses(s)), float(kv_sectors(s)),
                       s.B * s.H_kv * max(0.0, s.group * W - 1), flip)


def wave_misses_paper(shape, P: int, c_eff: float, order="linear", tiles=None,
                      sector_bytes: int = 32) -> float:
    """The paper's wave formula with fractional ``W = n_q / P`` (non-causal only).

    ``cold + B·H_kv·max(0, group·W − 1)·f`` with ``f = KV·[KV > C_eff]`` for linear or reverse
    and ``max(0, KV − C_eff)`` for sawtooth (group factor ``X``: a fraction ``1/X`` of the
    transitions flip direction, the rest cost like linear). ``cold`` is the exact cold count
    (``B·H·4·S·D·E/C`` for whole tiles and no GQA).
    """
    s = as_shape(shape, tiles, sector_bytes)
    return float(_paper_terms(s, P, order).misses(c_eff)[0])


# --------------------------------------------------------------------------------------------
# the C_eff fit
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CEffFit:
    """A least-squares fit of the effective capacity.

    ``c_eff_bytes`` is the best value; ``interval_bytes`` the range ``[lo, hi)`` of capacities
    that fit as well (within 1e-9 relative SSE): a point for the sawtooth order, a whole step for
    the linear order (whose best value is then reported as the step's middle).
    ``residuals = measured − predicted``.
    """

    c_eff_bytes: float
    interval_bytes: tuple[float, float]
    S: np.ndarray
    measured: np.ndarray
    predicted: np.ndarray
    residuals: np.ndarray
    mape: float
    rmse: float
    model: str
    sector_bytes: int

    @property
    def c_eff_sectors(self) -> float:
        return self.c_eff_bytes / self.sector_bytes

    @property
    def c_eff_mib(self) -> float:
        return self.c_eff_bytes / MiB

    @property
    def rel_residuals(self) -> np.ndarray:
        return self.residuals / self.measured


def fit_c_eff(S_values: Sequence[int], measured_misses: Sequence[float], *, shape, P: int,
              order="linear", model: str = "waves", bounds_bytes: tuple[float, float] | None = None,
              grid: int = 4097, tiles=None, sector_bytes: int = 32) -> CEffFit:
    """Least-squares ``C_eff`` of the wave model against misses measured at several ``S``.

    ``shape`` is a template (``Shape``, or a spec Problem with ``tiles``) whose ``S_q``/``S_kv``
    are replaced by each value of ``S_values``. ``model="waves"`` uses ``wave_misses``,
    ``"paper"`` the fractional-W formula. The SSE is piecewise quadratic (sawtooth) or piecewise
    constant (linear) in ``C_eff``; it is evaluated on a grid over ``bounds_bytes`` (default:
    0 .. 1.25 × the largest K+V of a head) together with every breakpoint of the model, and
    refined with ``scipy.optimize.minimize_scalar`` around the best point. Only S values whose
    K+V exceed C_eff carry information; with none of them the optimum is flat and
    ``interval_bytes`` shows it.

    >>> s = Shape(S_q=1024, D=64)
    >>> S = [16384, 24576, 32768, 40960]
    >>> y = [wave_misses(s.with_S(x), 32, 150000.0, "sawtooth") for x in S]
    >>> round(fit_c_eff(S, y, shape=s, P=32, order="sawtooth").c_eff_sectors)
    150000
    """
    base = as_shape(shape, tiles, sector_bytes)
    S = np.asarray(S_values, dtype=np.int64)
    y = np.asarray(measured_misses, dtype=np.float64)
    if S.shape != y.shape or S.ndim != 1 or len(S) == 0:
        raise ValueError("S_values and measured_misses must be 1-D and of the same length")
    shapes = [base.with_S(int(x)) for x in S]
    C = base.C
    if model == "waves":
        terms = [_wave_terms(sh, P, order) for sh in shapes]
    elif model == "paper":
        terms = [_paper_terms(sh, P, order) for sh in shapes]
    else:
        raise ValueError(f"model must be 'waves' or 'paper', got {model!r}")

    def predict(c_sectors) -> np.ndarray:                     # [n_c, n_S]
        return np.stack([t.misses(c_sectors) for t in terms], axis=1)

    if bounds_bytes is None:
        lo, hi = 0.0, 1.25 * max(kv_sectors(sh) for sh in shapes)
    else:
        lo, hi = bounds_bytes[0] / C, bounds_bytes[1] / C
    # a regular grid plus every breakpoint of the model, so that steps are located exactly
    bps = np.concatenate([t.breakpoints() for t in terms])
    cs = np.unique(np.concatenate([np.linspace(lo, hi, grid), bps[(bps >= lo) & (bps <= hi)]]))
    sse = ((predict(cs) - y[None, :]) ** 2).sum(axis=1)
    best = int(np.argmin(sse))
    n = len(cs)
    a, b = cs[max(best - 1, 0)], cs[min(best + 1, n - 1)]
    res = optimize.minimize_scalar(lambda c: float(((predict(c)[0] - y) ** 2).sum()),
                                   bounds=(a, b), method="bounded",
                                   options={"xatol": 1e-9 * max(hi, 1.0)})
    c_best = float(res.x) if res.fun <= sse[best] else float(cs[best])
    sse_best = min(float(res.fun), float(sse[best]))
    tol = 1e-9 * max(sse_best, 1e-12 * float((y ** 2).sum()))
    ok = sse <= sse_best + tol
    i0 = i1 = best
    while i0 > 0 and ok[i0 - 1]:
        i0 -= 1
    while i1 < n - 1 and ok[i1 + 1]:
        i1 += 1
    if i0 == i1:                     # a point optimum (sawtooth)
        interval = (c_best * C, c_best * C)
    else:                            # a flat optimum (linear step): [first, first worse) point
        end = cs[i1 + 1] if i1 + 1 < n else cs[i1]
        interval = (cs[i0] * C, end * C)
        c_best = 0.5 * (cs[i0] + end)
    pred = predict(c_best)[0]
    resid = y - pred
    return CEffFit(c_eff_bytes=c_best * C, interval_bytes=interval, S=S, measured=y,
                   predicted=pred, residuals=resid,
                   mape=mape(pred, y) if np.all(y != 0) else float("nan"),
                   rmse=float(np.sqrt(np.mean(resid ** 2))), model=model, sector_bytes=C)


def fit_c_eff_rows(rows: Iterable, *, P: int, order=None, sector_bytes: int = 32,
                   metric: str = Metric.L2_TEX_MISSES,
                   model: str = "waves", **kw) -> CEffFit:
    """``fit_c_eff`` on tidy rows (``spec.records.Row`` or dicts from ``read_csv``) of one variant.

    Takes the rows of ``metric`` (default: L2 misses), averages repeated samples per ``S_q`` and
    reads the shape (D, tiles, B, H, H_kv, causal) from them; all must agree. ``order`` defaults
    to the rows' ``order`` label.
    """
    def get(r, k):
        return r[k] if isinstance(r, dict) else getattr(r, k)

    sel = [r for r in rows if get(r, "metric") == metric]
    if not sel:
        raise ValueError(f"no rows of metric {metric!r}")
    keys = ("D", "tile_m", "tile_n", "B", "H", "H_kv", "causal", "variant")
    first = {k: get(sel[0], k) for k in keys}
    for r in sel:
        if any(get(r, k) != first[k] for k in keys):
            raise ValueError("rows mix cases: fit one variant and shape at a time "
                             f"(saw {first} and { {k: get(r, k) for k in keys} })")
        if get(r, "S_kv") != get(r, "S_q"):
            raise ValueError("fit_c_eff_rows sweeps S with S_kv = S_q")
    by_s: dict[int, list[float]] = {}
    for r in sel:
        by_s.setdefault(int(get(r, "S_q")), []).append(float(get(r, "value")))
    S = sorted(by_s)
    y = [float(np.mean(by_s[x])) for x in S]
    shape = Shape(S_q=S[0], D=int(first["D"]), T_m=int(first["tile_m"]), T_n=int(first["tile_n"]),
                  C=sector_bytes, causal=bool(first["causal"]), B=int(first["B"]),
                  H=int(first["H"]), H_kv=int(first["H_kv"]))
    if order is None:
        order = get(sel[0], "order")
    return fit_c_eff(S, y, shape=shape, P=P, order=order, model=model, **kw)

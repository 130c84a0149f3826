"""The L2 simulator: a fully associative, sector-granular LRU cache fed with a spec access trace.

What it models. ``spec.build_trace`` gives the stream of tile accesses that ``resident`` CTAs
running in lock-step issue (Q load, K tile, V tile, O store). Every access goes to L2 (the paper
measures L1 as a pass-through for this kernel; on Hopper TMA bypasses L1 altogether), so the
simulated ``srcunit_tex`` sectors are the trace's sectors, and the hit/miss split is the one of an
LRU cache of ``capacity_bytes``. An access hits iff its sector-weighted stack distance plus its own
sectors fits the capacity (see ``analysis.cache.reuse``); the first access of a tile is a compulsory
(cold) miss, every other miss is non-compulsory (capacity) miss. O stores are counted like loads:
the first (and only) write of an O tile is a cold miss, which is what the paper's cold line
``4·S·D·E/C`` assumes.

What it does not model: set associativity and the hash of addresses to L2 slices, Hopper's two L2
partitions (a line can live in both), prefetch and write-back traffic, other kernels' data, and the
small timing skew between CTAs. All of these make the real L2 behave like a smaller LRU: that is
what the *effective capacity* ``C_eff`` (fitted by ``analysis.models.wave.fit_c_eff``) stands for,
and why the capacity is a parameter here rather than always ``arch.l2_bytes``.

Worked example (GB10, B=8, H=1, S=128K, D=64, fp16, 64×64 tiles, 48 persistent CTAs): the K+V of a
head is 2·131072·64·2 B = 32 MiB > 24 MiB of L2. A linear scan re-reads the whole head per wave of
48 Q tiles and misses on every K/V access after the first wave; the sawtooth scan starts each wave
on the tiles the previous wave left in the cache and misses only about ``32 − 24 = 8`` MiB of them.
Simulated at 24 MiB: 355.5 M non-compulsory sectors linear, 101.0 M sawtooth (−72%), on 16.8 M
cold ones. ``analysis.models.wave.wave_misses`` gives the linear count exactly (339 head passes of
1 048 576 sectors) and the sawtooth one to 0.01% with ``C_eff = 24 MiB − 2·48`` Q/O tiles (the O
stores of one wave and the Q loads of the next sit between two scans of the K/V).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numba
import numpy as np

from analysis.cache.reuse import key_and_weights, stack_distances
from spec.arch import Arch, MiB
from spec.records import Metric, Row, case_fields, simulated_rows

__all__ = ["L2Counts", "simulate", "simulate_capacities", "counts_to_rows", "hits_at"]


@numba.njit(cache=True)
def _hits_kernel(dist, key, w, caps):  # pragma: no cover - compiled
    """Total weight, cold weight and hit weight at each capacity in ``caps``."""
    hits = np.zeros(caps.size, dtype=np.int64)
    total = 0
    cold = 0
    for t in range(dist.size):
        wk = w[key[t]]
        total += wk
        d = dist[t]
        if d < 0:
            cold += wk
            continue
        need = d + wk
        for c in range(caps.size):
            if need <= caps[c]:
                hits[c] += wk
    return total, cold, hits


def hits_at(distances: np.ndarray, key: np.ndarray, weights: np.ndarray | None,
            capacities) -> tuple[int, int, np.ndarray]:
    """(total weight, cold weight, hit weight at each capacity) in one pass, no temporaries.

    Cheaper than a full ``miss_ratio_curve`` when only a few capacities are wanted.
    """
    key, w = key_and_weights(key, weights)
    caps = np.atleast_1d(np.asarray(capacities, dtype=np.int64))
    distances = np.ascontiguousarray(distances, dtype=np.int64)
    if len(key) != len(distances):
        raise ValueError("key and distances differ in length")
    if not len(key):
        return 0, 0, np.zeros(caps.size, dtype=np.int64)
    total, cold, hits = _hits_kernel(distances, key, w, caps)
    return int(total), int(cold), hits


@dataclass(frozen=True)
class L2Counts:
    """Simulated L2 counters, in sectors (``hits + misses == sectors``,
    ``cold_misses + noncompulsory_misses == misses``)."""

    sectors: int
    hits: int
    misses: int
    cold_misses: int
    noncompulsory_misses: int
    capacity_bytes: int

    @property
    def hit_rate_pct(self) -> float:
        return 100.0 * self.hits / self.sectors if self.sectors else float("nan")

    @property
    def capacity_mib(self) -> float:
        return self.capacity_bytes / MiB


def _capacity(capacity_bytes: int | None, arch: Arch | None) -> int:
    if capacity_bytes is None:
        if arch is None:
            raise ValueError("give capacity_bytes or an arch (its nominal l2_bytes is used)")
        capacity_bytes = arch.l2_bytes
    capacity_bytes = int(capacity_bytes)
    if capacity_bytes < 0:
        raise ValueError(f"capacity must be >= 0 bytes, got {capacity_bytes}")
    return capacity_bytes


def simulate_capacities(trace, capacities_bytes: Sequence[int], *,
                        distances: np.ndarray | None = None) -> tuple[L2Counts, ...]:
    """Counters at several capacities from one stack-distance pass (e.g. C_eff and nominal L2).

    ``distances`` may be passed when already computed (``trace_stack_distances(trace)``); they
    must be the sector-weighted ones.
    """
    caps = [_capacity(c, None) for c in capacities_bytes]
    if distances is None:
        distances = stack_distances(trace.key, trace.key_sectors)
    cap_sectors = np.array([c // trace.sector_bytes for c in caps], dtype=np.int64)
    total, cold, hits = hits_at(distances, trace.key, trace.key_sectors, cap_sectors)
    out = []
    for c, h in zip(caps, hits.tolist()):
        m = total - h
        out.append(L2Counts(sectors=total, hits=h, misses=m, cold_misses=cold,
                            noncompulsory_misses=m - cold, capacity_bytes=c))
    return tuple(out)


def simulate(trace, capacity_bytes: int | None = None, *, arch: Arch | None = None,
             distances: np.ndarray | None = None) -> L2Counts:
    """Simulate a fully associative LRU L2 of ``capacity_bytes`` (default: ``arch.l2_bytes``).

    Pass a smaller ``capacity_bytes`` to simulate an *effective* capacity. The capacity is rounded
    down to whole sectors of ``trace.sector_bytes``.
    """
    return simulate_capacities(trace, [_capacity(capacity_bytes, arch)], distances=distances)[0]


def capacity_note(capacity_bytes: int, nominal_l2_bytes: int | None = None) -> str:
    """e.g. ``"LRU capacity=20.00MiB (effective; nominal L2 24.00MiB)"``."""
    s = f"LRU capacity={capacity_bytes / MiB:.2f}MiB"
    if nominal_l2_bytes is not None:
        if capacity_bytes == nominal_l2_bytes:
            s += " (nominal L2)"
        else:
            s += f" (effective; nominal L2 {nominal_l2_bytes / MiB:.2f}MiB)"
    return s


def counts_to_rows(counts: L2Counts, problem, *, run: str, study: str, arch: str | Arch,
                   variant=None, tiles=None, order=None, schedule=None, backend: str = "sim",
                   occupancy: int | None = None, nominal_l2_bytes: int | None = None,
                   note: str = "") -> list[Row]:
    """Tidy ``spec.records.Row``s (``source="simulated"``) for one simulated case.

    Give the ``variant`` the simulation stands for (its id then matches the measured rows); without
    one, give ``tiles`` and optionally ``order``/``schedule`` (``ScanOrder``/``CtaSchedule`` or
    labels) and the variant id becomes ``{backend}.{order}.{schedule}.m{M}n{N}d{D}``. ``arch`` may
    be an ``Arch``, in which case its ``l2_bytes`` is the nominal size named in the note. The note
    names the capacity simulated.
    """
    arch_name = arch.name if isinstance(arch, Arch) else str(arch)
    if nominal_l2_bytes is None and isinstance(arch, Arch):
        nominal_l2_bytes = arch.l2_bytes
    case = case_fields(problem, variant, tiles)
    if variant is None:
        if tiles is None:
            raise ValueError("give a variant, or the tiles of the simulated case")
        o = getattr(order, "label", order) or ""
        s = getattr(schedule, "label", schedule) or ""
        case.update(variant=f"{backend}.{o}.{s}.{tiles.label}d{problem.D}", backend=backend,
                    order=o, schedule=s, occupancy=occupancy)
    full_note = capacity_note(counts.capacity_bytes, nominal_l2_bytes)
    if note:
        full_note += "; " + note
    values = {
        Metric.L2_SECTORS: counts.sectors,
        Metric.L2_TEX_SECTORS: counts.sectors,
        Metric.L2_TEX_HITS: counts.hits,
        Metric.L2_TEX_MISSES: counts.misses,
        Metric.L2_HIT_RATE: counts.hit_rate_pct,
        Metric.COLD_MISSES: counts.cold_misses,
        Metric.NONCOMPULSORY_MISSES: counts.noncompulsory_misses,
    }
    return simulated_rows(values, case, run=run, study=study, arch=arch_name, note=full_note)

"""Simulate mode: run a study's cases through the spec traces and the L2 simulator.

Every row it writes says ``source=simulated`` and names the cache capacity it assumed; nothing here
touches a GPU. The numbers are predictions of a fully associative LRU over whole tiles fed by the
lock-step wavefront model of ``spec.trace``, not measurements.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from analysis import l2sim, reuse
from spec import Arch, TileGrid, build_trace, get_arch, known_archs
from spec.records import UNITS, Metric, Row, Source, case_fields

from spec.case import Case


@dataclass(frozen=True)
class SimResult:
    case: Case
    counts: "l2sim.L2Counts"
    seconds: float
    accesses: int


def simulate_case(case: Case, arch: Arch, capacity_bytes: int) -> SimResult:
    t0 = time.perf_counter()
    v = case.variant
    trace = build_trace(TileGrid(case.problem, v.tiles), v.schedule, v.order, case.resident,
                        sector_bytes=arch.sector_bytes)
    counts = l2sim.simulate(trace, capacity_bytes)
    return SimResult(case, counts, time.perf_counter() - t0, trace.n_accesses)


def rows_for(result: SimResult, run: str, study: str, arch: Arch) -> list[Row]:
    c = result.case
    return l2sim.counts_to_rows(result.counts, c.problem, run=run, study=study, arch=arch,
                                variant=c.variant)


def reuse_rows(case: Case, arch: Arch, capacity_bytes: int, *, run: str, study: str) -> list[Row]:
    """The reuse study's rows for one case: the L2 counters at ``capacity_bytes``, the LRU
    miss-ratio curve (``lru_misses``, x = capacity in bytes, on a log grid plus every registered
    arch's L2 size) and the sector-weighted log2 histogram of reuse distances
    (``reuse_distance_sectors``, x = the bin's lower edge in bytes), all from one stack-distance
    pass over the trace."""
    v = case.variant
    trace = build_trace(TileGrid(case.problem, v.tiles), v.schedule, v.order, case.resident,
                        sector_bytes=arch.sector_bytes)
    dist = reuse.stack_distances(trace.key, trace.key_sectors)
    counts = l2sim.simulate(trace, capacity_bytes, distances=dist)
    rows = l2sim.counts_to_rows(counts, case.problem, run=run, study=study, arch=arch,
                                variant=v)
    sb = arch.sector_bytes
    footprint = int(trace.key_sectors.astype(np.int64).sum()) * sb
    grid = np.unique(np.concatenate([
        np.geomspace(256 << 10, 2 * footprint, 64).astype(np.int64),
        [get_arch(a).l2_bytes for a in known_archs()]]))
    mrc = reuse.miss_ratio_curve(dist, trace.key, trace.key_sectors)
    hist = reuse.distance_histogram(dist, trace.key, trace.key_sectors)
    fields = case_fields(case.problem, v)
    common = dict(run=run, study=study, arch=arch.name, source=Source.SIMULATED.value, **fields)
    rows += [Row(metric=Metric.LRU_MISSES, value=float(m), unit=UNITS[Metric.LRU_MISSES], x=float(c),
                 note="fully associative LRU over tiles", **common)
             for c, m in zip(grid, np.atleast_1d(mrc.misses(grid // sb)))]
    rows += [Row(metric=Metric.REUSE_DISTANCE_SECTORS, value=float(n),
                 unit=UNITS[Metric.REUSE_DISTANCE_SECTORS], x=float(lo * sb),
                 note=f"log2 bin [{lo * sb}, {hi * sb}) bytes; cold sectors {hist.cold}", **common)
             for lo, hi, n in zip(hist.lo, hist.hi, hist.count)]
    return rows

"""Simulate mode: run a study's cases through the spec traces and the L2 simulator.

Every row it writes says ``source=simulated`` and names the cache capacity it assumed; nothing here
touches a GPU. The numbers are predictions of a fully associative LRU over whole tiles fed by the
lock-step wavefront model of ``spec.trace``, not measurements.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from analysis import l2sim
from spec import Arch, TileGrid, build_trace
from spec.records import Row

from .studies import Case


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

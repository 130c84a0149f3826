"""Simulate mode of the backward study: each backward kernel's L2 access stream
(``spec.backward_trace``) through the lock-step LRU (``analysis.cache.l2sim``).

Why the lock-step LRU and not the timed model: the timed model's pipeline parameters
(``analysis.models.steptime``) describe the forward's step (two MMAs, a K and a V tile). A
backward step does more work for about the same bytes: dK/dV four MMAs on a Q and a dO tile plus
two rows of fp32 statistics, dQ three MMAs on a K and a V tile. The miss counts do not depend on
that (the order of accesses does not change), so the prediction is the miss count of the
lock-step wavefront at the capacity the command names (the arch's L2 unless ``--capacity-mib``),
and the time prediction is a bound on what those misses can cost (``dram_seconds``): their bytes
at the arch's DRAM bandwidth, which a compute-bound kernel hides.
"""
from __future__ import annotations

import time

from analysis.cache import l2sim
from spec import Arch
from spec.backward_trace import PassGrid, bytes_per_step, pass_trace
from spec.case import Case
from spec.records import Metric, Row, case_fields


def pass_of(case: Case) -> PassGrid:
    v = case.variant
    if v.bwd is None:
        raise ValueError(f"{case.id}: not a backward pass (the variant names no dkdv or dq)")
    return PassGrid(case.problem, v.tiles, v.bwd)


def dram_seconds(sectors: float, arch: Arch, sector_bytes: int | None = None) -> float:
    """Seconds DRAM needs to deliver ``sectors`` at the arch's published bandwidth
    (``Arch.dram_bytes_per_s``): the most a kernel can lose to those misses if nothing hides
    them, and what it saves when they go. NaN for an arch without the figure."""
    sb = arch.sector_bytes if sector_bytes is None else sector_bytes
    bw = arch.dram_bytes_per_s
    return sectors * sb / bw if bw else float("nan")


def backward_rows(case: Case, arch: Arch, capacity_bytes: int, *, run: str,
                  study: str) -> list[Row]:
    """The simulated rows of one backward case: the lock-step LRU's counters (``l2sim``) on the
    pass's trace at ``capacity_bytes``; the note names the pass, the bytes per step and the
    simulator."""
    t0 = time.perf_counter()
    pg = pass_of(case)
    v = case.variant
    trace = pass_trace(pg, v.schedule, v.order, case.resident, sector_bytes=arch.sector_bytes)
    counts = l2sim.simulate(trace, capacity_bytes)
    del trace
    note = (f"{pg.bwd.value} pass, {bytes_per_step(pg)} B per step per CTA, {case.resident} "
            f"CTAs in lock-step ({time.perf_counter() - t0:.0f} s)")
    out = l2sim.counts_to_rows(counts, case.problem, run=run, study=study, arch=arch,
                               variant=v, note=note)
    out.append(Row(run=run, study=study, arch=arch.name, metric=Metric.DRAM_SECONDS_OF_MISSES,
                   value=dram_seconds(counts.misses, arch), unit="s", source="simulated",
                   note=f"misses x {arch.sector_bytes} B / "
                        f"{arch.dram_bytes_per_s or float('nan'):.3g} B/s "
                        f"(the time the misses cost if nothing hides them); {note}",
                   **case_fields(case.problem, v)))
    return out


METRICS = (Metric.L2_TEX_MISSES, Metric.DRAM_SECONDS_OF_MISSES)
"""The rows the study's findings and figure read from a simulated run."""

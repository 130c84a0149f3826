"""Simulate mode: run a study's cases through the spec traces and an L2 simulator.

Every row it writes says ``source=simulated`` and names what it assumed; nothing here touches a
GPU. Two models (``--model`` of the main command):

- ``timed`` (the default): ``analysis.cache.timesim``, each resident CTA on its own clock, the
  arch's L2 partitions, with the arch's committed parameters (``analysis/params/<arch>.json``,
  fitted on one measured study) or, for an arch without measurements (gb10, b200, b300), the
  defaults derived from the measured ones (``analysis.calibration.params.default_params``). Exact;
  with ``--sample`` large cases are SHARDS-sampled (size rule) at ``SPREAD_SEEDS`` seeds, and their
  rows state that spread and the sampled-against-exact range measured under the model that runs
  (``SHARDS_RUN``).
- ``lockstep``: ``analysis.cache.l2sim``, a fully associative LRU over whole tiles fed by the
  lock-step wavefront of ``spec.trace`` (the timed model's limit with miss time = hit time and no
  jitter).

Resident CTAs of a cuTile grid launch are what its build gets: the cubin exported for the arch,
its resources under the arch's published limits (``kernels.host.backend.compiled_ctas_per_sm``), not
the study's occupancy request; without the compile toolchain the request stands and the rows
say so.
"""
from __future__ import annotations

import functools
import subprocess
import time
from dataclasses import dataclass, replace

import numpy as np

from analysis import calibration
from analysis.cache import l2sim, reuse, timesim
from analysis.cache.sampling import SPREAD_SEEDS
from analysis.data import read_manifest
from analysis.models import steptime
from spec import Arch, Backend, TileGrid, build_trace, get_arch, known_archs
from spec.case import Case
from spec.records import UNITS, Metric, Row, Source, case_fields

SHARDS_RUN = "profiles/cpu/shards-gb10-20261128b"
"""The run that measured the sampled simulator against the exact one under the model that runs
(``timesim.MODEL_VERSION``): the 16 GB10 cases of the main command at seeds 0-4, exact and sampled
(``python -m experiments.simulation.shards``); a sampled row states its range."""


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
    rows += [Row(metric=Metric.LRU_MISSES, value=float(m), unit=UNITS[Metric.LRU_MISSES],
                 x=float(c), note="fully associative LRU over tiles", **common)
             for c, m in zip(grid, np.atleast_1d(mrc.misses(grid // sb)))]
    rows += [Row(metric=Metric.REUSE_DISTANCE_SECTORS, value=float(n),
                 unit=UNITS[Metric.REUSE_DISTANCE_SECTORS], x=float(lo * sb),
                 note=f"log2 bin [{lo * sb}, {hi * sb}) bytes; cold sectors {hist.cold}", **common)
             for lo, hi, n in zip(hist.lo, hist.hi, hist.count)]
    return rows


def model_params(arch: Arch) -> calibration.ArchParams:
    """The timed model's parameters for ``arch``: its committed file, else the defaults derived
    from the measured arches (``calibration.default_params``)."""
    try:
        return calibration.read_params(arch.name)
    except FileNotFoundError:
        return calibration.default_params(arch)[0]


def resident_of_build(case: Case, arch: Arch) -> tuple[Case, str]:
    """``case`` with the resident CTAs its build gets on ``arch``, and a note saying where they
    came from. A persistent launch is its P; a cuTile grid launch SMs x the CTAs per SM of its
    cubin; anything else (CUDA grid launches, no compile toolchain here) keeps the study's
    occupancy request, and the note says so."""
    v = case.variant
    if v.schedule.is_persistent:
        return case, ""
    if v.backend != Backend.CUTILE:
        return case, f"resident CTAs {case.resident}: the occupancy request (not compiled here)"
    from kernels.host import backend
    try:
        per_sm, note = backend.compiled_ctas_per_sm(v, case.problem, arch)
    except ImportError as e:
        return case, (f"resident CTAs {case.resident}: the occupancy request (no cuTile compiler "
                      f"here: {e}; pip install -e '.[compile]')")
    except (RuntimeError, OSError, subprocess.CalledProcessError) as e:   # ToolchainError too
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        return case, (f"resident CTAs {case.resident}: the occupancy request (the {arch.sm} cubin "
                      f"could not be built or read here: {first})")
    return replace(case, resident=arch.resident_ctas(per_sm)), note


@functools.cache
def shards_check() -> dict:
    """The manifest of ``SHARDS_RUN``: its model version, seeds and the range of the sampled
    miss counts' error against the exact ones (``err_pct_min``, ``err_pct_max``)."""
    return read_manifest(SHARDS_RUN)


def pipeline_params(tp: timesim.TimeParams, case: Case, arch: Arch,
                    point: str = "mid", dram_fraction: float = 0.0,
                    fill_sigma: float = 0.0) -> timesim.TimeParams:
    """``tp`` with the pipeline model of ``case``'s build on ``arch``
    (``analysis.models.steptime``): its step, latencies and prefetch depth at ``point`` of the
    arch's assumed ranges, and the in-loop spills of the build the study names
    (``experiments.registry.plans.build_costs``): their time per step and the L2 their stacks hold;
    with ``dram_fraction`` > 0, the DRAM queue at that share of the arch's bandwidth; with
    ``fill_sigma`` > 0, the fills' latency tail."""
    from ..registry.plans import build_costs
    timing = steptime.step_timing(case, arch, point, spills=build_costs(case, arch))
    queue: dict = dict(fill_sigma=fill_sigma)
    if dram_fraction > 0:   # fills served at this share of the DRAM bandwidth, per step of compute
        queue.update(dram_step_sectors=dram_fraction * arch.dram_bytes_per_s * timing.step_s
                     / arch.sector_bytes)
    return replace(tp, capacity_bytes=max(0, tp.capacity_bytes - timing.stack_l2_bytes),
                   **timing.units(), **queue)


def timed_counts(case: Case, arch: Arch, params: calibration.ArchParams,
                 capacity_bytes: int | None = None, *, seed: int = 0, point: str | None = "mid",
                 sample: bool = False) -> timesim.TimeCounts:
    """The timed simulator's counts of ``case`` as it stands (its resident CTAs already the
    build's, ``resident_of_build``): the arch's parameters at ``seed``, the build's pipeline
    timing at ``point`` of the arch's ranges (None: the step model, every step one unit), at
    ``capacity_bytes`` when given instead of the parameters' effective capacity; exact, or
    SHARDS-sampled at the size rule with ``sample``."""
    tp = params.time_params(arch, seed=seed)
    if point is not None:
        tp = pipeline_params(tp, case, arch, point, params.dram_fraction, params.fill_sigma)
    if capacity_bytes is not None:
        tp = replace(tp, capacity_bytes=int(capacity_bytes))
    return timesim.simulate_case(case, tp, arch.sector_bytes, auto_sample=sample)


def _spread_note(counts: timesim.TimeCounts, others: list[timesim.TimeCounts],
                 seed: int) -> str:
    """What a sampled row says about its uncertainty: the spread of its miss count over the
    seeds it ran at, and the sampled-against-exact range measured under the model (``SHARDS_RUN``),
    or that the measurement was under another model version."""
    misses = [counts.tex_misses] + [c.tex_misses for c in others]
    lo, hi, v = min(misses), max(misses), max(counts.tex_misses, 1)
    s = (f"sampled, not exact: tex misses over seeds {seed}-{seed + len(misses) - 1} span "
         f"{lo:.4g}..{hi:.4g} ({100 * (lo / v - 1):+.1f}..{100 * (hi / v - 1):+.1f}% of seed "
         f"{seed}'s)")
    check = shards_check()
    name = SHARDS_RUN.rsplit("/", 1)[-1]
    if check.get("model_version") == timesim.MODEL_VERSION:
        s += (f"; against the exact simulator, the GB10 study's sampled misses at seeds "
              f"{check['seeds'][0]}-{check['seeds'][-1]} were {check['err_pct_min']:+.1f}.."
              f"{check['err_pct_max']:+.1f}% ({name})")
    else:
        s += (f"; no sampled-against-exact check under {timesim.MODEL_VERSION} ({name} measured "
              f"{check.get('model_version')})")
    return s


def timed_rows(case: Case, arch: Arch, params: calibration.ArchParams,
               capacity_bytes: int | None = None, *, run: str, study: str,
               seed: int = 0, point: str | None = "mid", sample: bool = False) -> list[Row]:
    """The timed simulator's rows for one case (its build's resident CTAs, ``timed_counts``):
    exact, or with ``sample`` SHARDS-sampled at the size rule, then at ``SPREAD_SEEDS`` seeds
    (``seed`` and the next ones), whose spread the note states with the sampled-against-exact
    check of ``SHARDS_RUN``; the counts are ``seed``'s. Each row's note names the parameters,
    where they came from and the residency."""
    case, where = resident_of_build(case, arch)
    kw = dict(capacity_bytes=capacity_bytes, point=point, sample=sample)
    counts = timed_counts(case, arch, params, seed=seed, **kw)
    notes = [params.note()]
    if counts.params.sample_rate < 1:
        others = [timed_counts(case, arch, params, seed=seed + k, **kw)
                  for k in range(1, SPREAD_SEEDS)]
        notes.append(_spread_note(counts, others, seed))
    if where:
        notes.append(where)
    return timesim.counts_to_rows(counts, case, run=run, study=study, arch=arch,
                                  sector_bytes=arch.sector_bytes, note="; ".join(notes))

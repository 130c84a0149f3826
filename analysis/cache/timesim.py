"""The timed L2 simulator: CTAs on their own clocks, tiles in flight, two L2 partitions, merged
requests, and SHARDS sampling for the large arches.

Why time matters for locality. The wavefront argument (paper §Wavefront) says that concurrent CTAs
scanning the same K/V tiles turn one CTA's miss into the others' hits. ``spec.build_trace`` assumes
they do so in exact lock-step. Measured CTAs drift 10-16 steps per work item (REPORT.md §6), and the
drift is not a free parameter: a CTA that misses waits for DRAM while its neighbours, hitting, run
ahead; the next one to reach a new tile becomes the leader and pays the miss; a CTA that needs a
tile already requested by another waits for that fill instead of missing again (a *merged* miss).
Here each resident CTA slot has its own clock and the order in which the L2 sees the accesses
comes out of those clocks.

The model, one step of one slot at its time ``t`` (times in units of a hit step):

- it issues its accesses (Q load at an item's first step, K tile, V tile, O store at the last
  step), in that order, at ``t``;
- an access that hits is ready at ``t + 1``; one that misses marks the tile in flight until
  ``t + miss_ratio`` (the fill) and is ready then; one to a tile in flight (present, fill not done)
  is a hit that waits for the fill (``merged``: not a second miss). ``miss_ratio`` is the step
  time of a miss over that of a hit, not the load latencies' ratio: with a K/V double buffer the
  fill hides behind a step of compute, and the measured step and latencies give 1
  (``analysis.calibration.fixed.miss_ratio_from_timing``). A CTA that misses then runs no slower
  than one that hits, and the clocks carry no force that pulls CTAs back together;
- **the pipeline model** (``compute = 1``, the default of ``experiments.simulation.simulate``; the
  build's timing from ``analysis.models.steptime``): the time unit is one step of the build's
  compute; a hit is ready ``hit_latency`` after it is issued, a fill ``miss_ratio`` after; the loads
  of step ``n`` are issued when step ``n - prefetch`` begins (an item's first ``prefetch + 1`` steps
  at its start), and a step begins when its loads are ready and the previous step is done, and lasts
  one unit. A fill longer than ``prefetch`` steps stalls the CTA that missed: the force that keeps a
  convoy together. The step model below is its limit (``compute = 0``, ``hit_latency = 1``,
  ``prefetch = 0``);
- the step lasts until its loads are ready (at least 1; the O store does not stall), times the
  slot's constant speed factor and a per-step log-normal factor ``exp(jitter·z − jitter²/2)``.
  The constant factor is ``1 + pair_slowdown`` for the slower slot of a busy SM pair (the odd SM
  of a pair whose even SM also runs a slot, ``analysis.cache.smmap.slot_paired_odd``; measured: CTAs
  alone on their pair never drift apart, the odd SM of a busy pair falls steadily behind,
  ``analysis.calibration.fixed.pair_slowdown_from_lags``), 1 otherwise, times an optional random
  ``exp(rate_jitter·z_s − rate_jitter²/2)`` drawn once per slot; draws from one seeded
  generator. Constant factors because measured drift grows linearly with the steps run, which
  a per-step random walk (slope 0.5) cannot give. Or, with ``speeds``, each slot's factor as
  measured on a launch of the same kernel (``analysis.launch.drift.Completions``: the finish
  times of its work items, seen by ``explorations/drift_spy.py``), which replaces the pair term: the
  spread those measurements show (0.01-0.75% between CTAs, cuTile and CUDA alike) is 2-10x what
  the pair term gives (``profiles/h100/drift-spy-20261125``);
- when a CTA's last step ends, its slot takes the next CTA in launch order (grid and tile-X
  launches), so the dispatch of later CTAs comes out of the clocks too. Events are processed in
  (time, slot) order.

With ``miss_ratio = 1``, ``jitter = 0``, one partition and no merge window every step lasts exactly
1 and the event order is ``build_trace``'s lock-step order: the counts equal
``analysis.cache.l2sim.simulate(build_trace(...))`` bit for bit
(``tests/cpu/analysis/cache/test_timesim.py``).

The cache is an exact LRU over whole tiles weighted by their sectors (the same cache as
``analysis.cache.l2sim``: a tile is resident iff the sectors used since its last use, plus its
own, fit).

**Replacement** (``replacement``): ``"lru"`` (the default, and ``analysis.cache.l2sim``'s) or
``"srrip"`` (2-bit re-reference prediction, Jaleel et al., ISCA 2010: a miss inserted at RRPV 2,
a hit set to 0, the oldest RRPV-3 entry evicted), which keeps the tiles followers re-read where
LRU keeps a leader's fresh ones. **Sets** (``ways``): 0, fully associative (the default), or
each partition's half-tiles hashed into sets of about W (``set_index``), which turns the cliff
at the capacity into a slope. Neither alternative predicts the H100 better out of sample
(REPORT.md section 7; ``python -m analysis.calibration validate --replacement srrip``,
``scan --set ways=...``).

**Two partitions** (``partitions=2``, Hopper and Blackwell; ``../shared/l2-ncu-notes.md`` §1). Every
tile is split into two halves, each homed in one partition: the tile-granular form of a fine address
interleave that sends half of every tile's sectors to each side. Which partition slot ``s`` sits on
is ``placement``: ``"alternate"`` (``s % 2``, the first model), an arch name, whose committed
measured map is used (``analysis.cache.smmap``: on the H100 a launch's first 8 CTAs share one
partition, a full launch runs CTAs 0-15 and 64-113 on one side), or one chip's
``experiments.instruments.smmap`` run directory (the map differs between chips of one arch:
REPORT.md section 7d). A request first looks up the SM's local partition (the ``srcunit_tex`` lookup
ncu counts). A local miss on a half homed on the other side looks that half up in its home partition
over the fabric (``srcunit_ltcfabric``; a fabric hit costs a hit) and fills both: the local copy
duplicates the line, so data read from both sides occupies twice its size and the *effective*
capacity depends on the traffic. DRAM fills are the local-home tex misses plus the fabric misses.
Each partition holds ``capacity_bytes / 2``.

**Stores** (``stores_miss``). ``stores_miss=True`` counts an O store to an absent tile as a miss,
as ``analysis.cache.l2sim`` and the paper's cold line do. The H100 does not: in every launch of
``profiles/h100/placement-20261123`` (18 launches, one ncu pass each) the tex lookup misses equal
the *read* lookup misses to the sector, so a store (whole sectors, no fill needed) is a lookup
that never misses. With ``stores_miss=False`` a store counts as a hit, allocates the tile at the
MRU end locally (and its far half at home, a fabric hit) and reads nothing from DRAM.

**Merged requests** (``merge_window > 0``; the L2 Request Coalescer, ``lrc``). A request for a
half-tile that the same partition already received less than ``merge_window`` ago is coalesced
before the L2: it is not a lookup at all (no sector, hit or miss is counted) and is ready when
the request it joined is. This is the mechanism behind "L2 sectors ≈ 0.35..0.58 of the loads"
(REPORT.md §1). ``merged_sectors`` counts what it removed.

**SHARDS sampling** (``sample_rate R < 1``; Waldspurger et al., FAST 2015). Only a spatial sample of
the tiles enters the cache model; the cache holds ``R · capacity`` and every count is scaled by
``1/R``. The sample is systematic, every ``1/R``-th tile id (``sampled_subkeys``), not SHARDS' hash:
a head's K (or V) tiles have consecutive ids in scan order, so every window of a scan holds the same
share of samples. With a hashed sample the share fluctuates from window to window (binomial), and
where the misses change steeply as a scan's working set crosses the capacity those fluctuations do
not average out: with the clocks held equal (no jitter) the hashed sample gave +8% misses on the
GB10 cuTile Static causal case at R = 0.1, the systematic one −0.5% (``explorations/simbench.py``
section F). Unsampled accesses cost the slot's running mean of sampled load times, at least a hit
step (a step lasts at least one, so a mean below one, from waits on fills already under way, would
make the sampled clocks run fast), so the clocks still see misses; a run of steps that touch only
unsampled tiles is skipped at that cost times the slot's speed factor. With ``miss_ratio = 1`` a
step lasts exactly its speed and jitter factors whatever it loads, so the sampled clocks then differ
from the exact ones only in the jitter's realisation (one draw per skipped run instead of one per
step), whose own spread (the exact model's seed-to-seed spread, ``explorations/simbench.py`` section
G) bounds how close any such scheme can come. Every sampled row states ``R`` and the error measured
against the exact simulator.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from analysis.cache.sampling import SHARDS_TARGET, sampled_subkeys, set_index, shards_rate
from analysis.cache.smmap import slot_paired_odd, slot_partitions
from analysis.cache.timeloop import COUNTERS, Cache, Clock, Work, run
from spec.arch import Arch, MiB
from spec.case import Case
from spec.problem import TileGrid
from spec.records import Metric, Row, case_fields, simulated_rows
from spec.trace import WorkTable, work_table

__all__ = ["MODEL_VERSION", "TimeParams", "TimeCounts", "simulate", "simulate_case",
           "counts_to_rows", "shards_rate", "SHARDS_TARGET", "REPLACEMENTS"]

REPLACEMENTS = ("lru", "srrip")

MODEL_VERSION = "pipeline-v2 (2026-11-28)"
"""The frozen version of the timed simulator's model, named in every simulated row's note
(``TimeParams.note``) and in a simulated run's manifest. It covers this module and its event
loop, ``analysis.models.steptime`` (the pipeline timing and its constants), the parameter files
``analysis/params/*.json``, the builds' compiled facts (``experiments.registry.plans``) and the
range point the main command uses. A change to any of them that moves a count is a new version,
logged with the data that justified it (docs/model-changelog.md); each parameter and its source:
docs/model-card.md."""


@dataclass(frozen=True)
class TimeParams:
    """Everything the timed simulator assumes; ``note()`` writes it into every simulated row."""

    capacity_bytes: int            # total (all partitions) effective L2 capacity
    miss_ratio: float = 1.0        # miss (fill) time / hit step time, >= 1
    jitter: float = 0.0            # sd of the log of each step's duration factor
    rate_jitter: float = 0.0       # sd of the log of each slot's constant speed factor
    pair_slowdown: float = 0.0     # the odd SM of a busy SM pair runs 1 + this slower per step
    seed: int = 0
    partitions: int = 1            # 1, or 2 (Hopper/Blackwell)
    merge_window: float = 0.0      # request-coalescer window, in hit-step units (0: off)
    sample_rate: float = 1.0       # SHARDS rate R (1: exact)
    placement: str = "alternate"   # slot -> partition: "alternate", an arch or a chip's smmap dir
    stores_miss: bool = True       # an O store to an absent line counts as a lookup miss
    replacement: str = "lru"       # "lru" or "srrip" (see the module docstring)
    ways: int = 0                  # 0: fully associative; W: hashed sets of W entries (below)
    speeds: tuple[float, ...] | None = None   # measured step-time factor per slot (see below)
    speeds_source: str = ""        # where ``speeds`` were measured (written into every row)
    dram_step_sectors: float = 0.0  # sectors DRAM delivers per time unit (0: no bandwidth limit)
    compute: float = 0.0           # a step's compute (0: the step model; 1: the pipeline model)
    hit_latency: float = 1.0       # an L2 hit's latency in time units (the step model: 1)
    prefetch: int = 0              # steps whose loads are issued ahead (the K/V pipeline depth - 1)
    step_source: str = ""          # where the pipeline model's step and latencies come from
    fill_sigma: float = 0.0        # sd of the log of each DRAM fill's latency factor (median 1)

    def __post_init__(self) -> None:
        if int(self.capacity_bytes) < 0:
            raise ValueError(f"capacity_bytes must be >= 0, got {self.capacity_bytes}")
        if self.compute == 0.0:
            if not self.miss_ratio >= 1.0:
                raise ValueError(f"miss_ratio is miss time / hit time and must be >= 1, "
                                 f"got {self.miss_ratio}")
            if self.hit_latency != 1.0 or self.prefetch != 0:
                raise ValueError("the step model (compute=0) has hit_latency=1 and prefetch=0; "
                                 "set compute=1 for the pipeline model")
        else:
            if not (math.isfinite(self.compute) and self.compute > 0):
                raise ValueError(f"compute must be finite and >= 0, got {self.compute}")
            if not 0.0 < self.hit_latency <= self.miss_ratio:
                raise ValueError(f"the pipeline model needs 0 < hit_latency <= miss_ratio (both "
                                 f"in steps of compute), got {self.hit_latency}, "
                                 f"{self.miss_ratio}")
            if int(self.prefetch) < 0:
                raise ValueError(f"prefetch must be >= 0 steps, got {self.prefetch}")
            if not self.step_source:
                raise ValueError("the pipeline model needs step_source (where the step and "
                                 "latencies come from)")
        if not (self.fill_sigma >= 0.0 and math.isfinite(self.fill_sigma)):
            raise ValueError(f"fill_sigma must be finite and >= 0, got {self.fill_sigma}")
        if self.fill_sigma > 0 and self.compute == 0.0:
            raise ValueError("fill_sigma is a pipeline-model parameter; set compute=1")
        if not self.jitter >= 0.0:
            raise ValueError(f"jitter must be >= 0, got {self.jitter}")
        if not self.rate_jitter >= 0.0:
            raise ValueError(f"rate_jitter must be >= 0, got {self.rate_jitter}")
        if not self.pair_slowdown >= 0.0:
            raise ValueError(f"pair_slowdown must be >= 0, got {self.pair_slowdown}")
        if self.partitions not in (1, 2):
            raise ValueError(f"partitions must be 1 or 2, got {self.partitions}")
        if not self.merge_window >= 0.0:
            raise ValueError(f"merge_window must be >= 0, got {self.merge_window}")
        if not 0.0 < self.sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be in (0, 1], got {self.sample_rate}")
        if self.replacement not in REPLACEMENTS:
            raise ValueError(f"replacement must be one of {REPLACEMENTS}, got "
                             f"{self.replacement!r}")
        if int(self.ways) < 0:
            raise ValueError(f"ways must be >= 0 (0: fully associative), got {self.ways}")
        if self.ways and self.replacement != "lru":
            raise ValueError("set-associative sets are modelled for LRU only; use ways=0 "
                             "with replacement='srrip'")
        if not (self.dram_step_sectors >= 0.0 and math.isfinite(self.dram_step_sectors)):
            raise ValueError(f"dram_step_sectors must be finite and >= 0 (0: no bandwidth "
                             f"limit), got {self.dram_step_sectors}")
        if not self.placement:
            raise ValueError("placement must be 'alternate' or an arch name with a measured map")
        if self.speeds is not None:
            if self.pair_slowdown > 0:
                raise ValueError("measured speeds already hold the SM-pair slowdown; "
                                 "set pair_slowdown=0 with speeds")
            if not self.speeds_source:
                raise ValueError("measured speeds need speeds_source (where they came from)")
            if not all(math.isfinite(x) and x > 0 for x in self.speeds):
                raise ValueError("speeds are step-time factors and must be finite and > 0")

    def note(self) -> str:
        s = (f"timesim model={MODEL_VERSION} capacity={self.capacity_bytes / MiB:.2f}MiB "
             f"partitions={self.partitions} "
             f"miss_ratio={self.miss_ratio:g} jitter={self.jitter:g} seed={self.seed} "
             f"merge_window={self.merge_window:g}")
        if self.compute > 0:
            s += (f" pipeline(prefetch={self.prefetch} hit={self.hit_latency:.4g} "
                  f"miss={self.miss_ratio:.4g} steps; {self.step_source})")
        if self.rate_jitter > 0:
            s += f" rate_jitter={self.rate_jitter:g}"
        if self.pair_slowdown > 0:
            s += f" pair_slowdown={self.pair_slowdown:g}"
        if self.dram_step_sectors > 0:
            s += f" dram_step_sectors={self.dram_step_sectors:.4g}"
        if self.fill_sigma > 0:
            s += f" fill_sigma={self.fill_sigma:g}"
        if self.speeds is not None:
            s += f" speeds=measured({self.speeds_source})"
        if self.partitions > 1:
            s += f" placement={self.placement}"
        if not self.stores_miss:
            s += " stores_miss=no"
        if self.replacement != "lru":
            s += f" replacement={self.replacement}"
        if self.ways:
            s += f" ways={self.ways}"
        if self.sample_rate < 1.0:
            s += f" SHARDS R={self.sample_rate:g}"
        return s


@dataclass(frozen=True)
class TimeCounts:
    """Simulated counters in sectors (scaled by 1/R when sampled).

    ``tex_hits + tex_misses == tex_sectors``; merged (coalesced) requests are in none of them.
    ``fabric_*`` are the home-partition lookups of remote misses (and of stores' far halves);
    ``dram_fills`` the sectors read from DRAM (load misses that reach DRAM; O stores allocate in
    L2 but read nothing); ``cold_misses`` the first missing touch of each half-tile anywhere
    (stores included only with ``stores_miss``).
    """

    tex_sectors: int
    tex_hits: int
    tex_misses: int
    inflight_hits: int
    merged_sectors: int
    fabric_sectors: int
    fabric_hits: int
    fabric_misses: int
    dram_fills: int
    cold_misses: int
    makespan: float
    params: TimeParams

    @property
    def noncompulsory_misses(self) -> int:
        return self.tex_misses - self.cold_misses


# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------
def simulate(table: WorkTable, resident: int, params: TimeParams,
             sector_bytes: int = 32) -> TimeCounts:
    """Run the timed simulator over ``table`` with ``resident`` CTA slots."""
    if resident < 1:
        raise ValueError(f"resident CTAs must be >= 1, got {resident}")
    P = params.partitions
    w = table.key_sectors.astype(np.int64)
    if P == 1:
        wsub = w
    else:
        wsub = np.stack([w - w // 2, w // 2], axis=1).reshape(-1)   # sub = key * 2 + half
    sampled = sampled_subkeys(len(wsub), params.sample_rate, P)
    R = params.sample_rate
    cap_sectors = int(params.capacity_bytes) // sector_bytes
    cap_part = int(cap_sectors // P * R) if R < 1 else cap_sectors // P
    set_of, n_sets = set_index(wsub, sampled, cap_part, params.ways)
    cap = np.full(P * n_sets, cap_part // n_sets, dtype=np.int64)
    n_kv = table.n_kv
    # per K/V head, the sorted K/V positions whose K or V half-tiles are sampled (CSR)
    kv_pos = np.arange(table.v_base - table.k_base, dtype=np.int64)
    hit = np.zeros(len(kv_pos), dtype=bool)
    for base in (table.k_base, table.v_base):
        for h in range(P):
            hit |= sampled[(base + kv_pos) * P + h]
    heads = kv_pos[hit] // n_kv
    samp_kv = (kv_pos[hit] % n_kv).astype(np.int64)
    samp_ptr = np.searchsorted(heads, np.arange(len(kv_pos) // n_kv + 1)).astype(np.int64)
    slots = min(int(resident), len(table.cta_first) - 1)
    part_of = slot_partitions(params.placement, slots, P)
    speed = np.ones(slots, dtype=np.float64)
    if params.speeds is not None:
        if len(params.speeds) != slots:
            raise ValueError(f"{len(params.speeds)} measured slot speeds for {slots} slots; "
                             f"measure the launch with the same resident CTAs")
        speed[:] = params.speeds
    elif params.pair_slowdown > 0:
        speed[slot_paired_odd(params.placement, slots)] += params.pair_slowdown
    work = Work(table.cta_first, table.length, table.reverse, table.q_key, table.o_key,
                table.kv_row, int(table.k_base), int(table.v_base), int(n_kv), samp_ptr, samp_kv)
    cache = Cache(wsub, sampled, bool(sampled.all()), P, part_of, set_of, int(n_sets), cap,
                  float(params.merge_window), bool(params.stores_miss))
    dram_svc = 1.0 / (params.dram_step_sectors * R) if params.dram_step_sectors > 0 else 0.0
    clock = Clock(int(resident), speed, float(params.hit_latency), float(params.miss_ratio),
                  float(params.compute), int(params.prefetch), float(params.jitter),
                  float(params.rate_jitter), float(params.fill_sigma), dram_svc,
                  int(params.seed))
    cnt, makespan = run(work, cache, clock, params.replacement == "srrip")
    c = cnt.astype(np.float64) / R if R < 1 else cnt
    counts = dict(zip(COUNTERS, (int(round(x)) for x in c)))
    return TimeCounts(**counts, makespan=float(makespan), params=params)


def simulate_case(case: Case, params: TimeParams, sector_bytes: int = 32,
                  auto_sample: bool = False) -> TimeCounts:
    """Simulate one study case (its problem, variant and resident CTAs); with ``auto_sample``
    the sample rate is the size rule's (``shards_rate``) instead of ``params.sample_rate``."""
    v = case.variant
    table = work_table(TileGrid(case.problem, v.tiles), v.schedule, v.order, sector_bytes)
    if auto_sample:
        params = replace(params, sample_rate=shards_rate(table, params.partitions))
    return simulate(table, case.resident, params, sector_bytes)


def counts_to_rows(counts: TimeCounts, case: Case, *, run: str, study: str, arch: str | Arch,
                   sector_bytes: int = 32, note: str = "") -> list[Row]:
    """Tidy rows (``source=simulated``) for one case; the note names every parameter used."""
    arch_name = arch.name if isinstance(arch, Arch) else str(arch)
    fields = case_fields(case.problem, case.variant)
    full_note = counts.params.note() + (f"; {note}" if note else "")
    values = {
        Metric.L2_SECTORS: counts.tex_sectors + counts.fabric_sectors,
        Metric.L2_TEX_SECTORS: counts.tex_sectors,
        Metric.L2_TEX_HITS: counts.tex_hits,
        Metric.L2_TEX_MISSES: counts.tex_misses,
        Metric.L2_HIT_RATE: 100.0 * counts.tex_hits / max(counts.tex_sectors, 1),
        Metric.COLD_MISSES: counts.cold_misses,
        Metric.NONCOMPULSORY_MISSES: counts.noncompulsory_misses,
        Metric.DRAM_READ_BYTES: counts.dram_fills * sector_bytes,
        Metric.L2_FABRIC_SECTORS: counts.fabric_sectors,
        Metric.L2_FABRIC_HITS: counts.fabric_hits,
        Metric.L2_FABRIC_MISSES: counts.fabric_misses,
        Metric.MERGED_SECTORS: counts.merged_sectors,
        Metric.INFLIGHT_SECTORS: counts.inflight_hits,
        Metric.MAKESPAN_STEPS: counts.makespan,
    }
    return simulated_rows(values, fields, run=run, study=study, arch=arch_name, note=full_note)

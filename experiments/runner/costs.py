"""What a plan costs, in closed form: its work, and the time and memory of each mode.

Nothing here walks the accesses or builds a trace: every count is an arithmetic expression of the
problem, the tiles and the schedule (``kv_pairs`` sums the causal triangle with ``floor_sum``), so
``--dry-run`` and the limits check answer at once even for ``--seq 1000000000``.

**Work.** A case visits ``kv_pairs`` (Q tile, K/V tile) pairs; its trace (``spec.build_trace``)
has two accesses per pair (K and V) and two per work item (Q load, O store): ``tile_accesses``.

**Simulate time.** Per-unit costs, each fitted on committed timings (``experiments.runner.costfit``
refits them; ``tests/cpu/experiments/runner/test_costs.py`` checks that the constants below are what
the fit gives):

- timed model (``analysis.cache.timesim``): ``TIMED_S_PER_STEP`` per simulated step plus
  ``TIMED_S_PER_ENTRY`` per cache entry (tile ids x partitions^2: the per-partition lists are
  allocated and walked for every partition's copy of every half-tile), least squares over the 92
  per-case seconds of ``profiles/cpu/simbench-20261125-shards``, ``simbench-20261125-gb10`` and
  ``simbench-20261124-exact-b200`` (GB10, H100, B200, B300; exact and SHARDS-sampled; per case
  within -32..+54% of the measured seconds). Exact unless ``--sample``; with SHARDS sampling at
  rate R (``SPREAD_SEEDS`` seeds per case) an item simulates
  its first and last steps and the steps whose K or V tile is in the sample (about 2R - R^2
  of them).
- lock-step model and the reuse study (``analysis.cache.l2sim``, ``analysis.cache.reuse``):
  ``LOCKSTEP_S_PER_ACCESS`` per trace access (the trace build and the stack-distance pass), least
  squares over the per-case seconds of ``profiles/cpu/lockstep-gb10-20261126`` (the GB10 study
  with ``--model lockstep --jobs 1``: 30-67 ns per access, per case within -38..+37%).
- the process: ``SIM_PROCESS_S`` (imports, the simulator's kernels from numba's disk cache) and
  ``FIGURE_S`` per figure drawn (PNG and PDF), measured on the same 2-core machine (``sawtooth
  --arch gb10 --seq 2048``: 3.1 s with ``--no-figures``, 5.3 s with its figures).

Cases run on ``workers`` threads (the simulators release the GIL); the plan's time is the
longest-first schedule of the cases over them.

**Simulate memory.** From the arrays each model allocates (their dtypes; checked against the
measured growth of the peak RSS in ``tests/cpu/experiments/runner/test_costs.py``): the timed model
``TIMED_B_PER_ITEM`` per work item (the work table and its temporaries) and ``12 + 26 P + 25 P^2``
bytes per tile id for ``P`` partitions (sector counts, the sample, the LRU lists of every
partition); the lock-step model ``LOCKSTEP_B_PER_ACCESS`` per access (the int32 trace and the
int64 stack distances: 12.0 B per access measured, 13 counted) plus the same per item and per id.
The peak of a plan is the process's ``SIM_BASE_BYTES`` plus the ``workers`` largest cases at once.

**Measure time.** ``measure_cost``: the phases of ``experiments.measurement.measure`` with per-unit
costs least-squares fitted on the wall time of 25 committed measured runs (``MEASURE_FIT``, H100 and
H200, with and without ncu; ``experiments.runner.costfit``), and each kernel's time from its FLOPs
at the throughput measured for its family and tiles (``RATES``; other arches: the H100's scaled by
SM count). ``profiles/h100/ncu-passes-20261123`` gives the replay passes of each metric group.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from spec import Arch, TileGrid, get_arch
from spec.arch import MiB
from spec.case import Case

# -- work ------------------------------------------------------------------------------------------


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """sum(floor((a*i + b) / m) for i in range(n)) for n >= 0, m >= 1, a, b >= 0, in
    O(log m) steps (the Euclid-like reduction of the AtCoder library)."""
    ans = 0
    while True:
        if a >= m:
            ans += n * (n - 1) // 2 * (a // m)
            a %= m
        if b >= m:
            ans += n * (b // m)
            b %= m
        y_max = a * n + b
        if y_max < m:
            return ans
        n, b = divmod(y_max, m)
        m, a = a, m


def kv_pairs_per_head(g: TileGrid) -> int:
    """(Q tile, K/V tile) pairs of one head: ``sum(g.kv_tiles_for(i) for i in range(g.n_q))``
    without the loop. Causal: Q tile ``i < n_q - 1`` reads ``min(ceil((i + 1) m / n), n_kv)``
    tiles (``m``, ``n``: tile rows), the last one ``min(ceil(S_q / n), n_kv)``."""
    n_q, n_kv = g.n_q, g.n_kv
    if not g.problem.causal:
        return n_q * n_kv
    m, n = g.tiles.m, g.tiles.n
    uncapped = min(n_q - 1, (n_kv * n) // m)          # items i+1 <= n_kv*n/m stay below n_kv
    total = floor_sum(uncapped, n, m, m + n - 1)      # sum of ceil((i + 1) m / n)
    total += (n_q - 1 - uncapped) * n_kv
    return total + min(-(-g.problem.S_q // n), n_kv)


def kv_pairs(case: Case) -> int:
    g = TileGrid(case.problem, case.variant.tiles)
    return kv_pairs_per_head(g) * g.n_bh


def tile_accesses(case: Case) -> int:
    """Accesses of the case's trace: K and V per pair, Q and O per work item."""
    g = TileGrid(case.problem, case.variant.tiles)
    return 2 * kv_pairs_per_head(g) * g.n_bh + 2 * g.n_work


def tile_ids(case: Case) -> int:
    """Distinct tiles (the simulators' keys): Q and O tiles per work item, K and V per K/V head."""
    g, p = TileGrid(case.problem, case.variant.tiles), case.problem
    return 2 * g.n_work + 2 * p.B * p.H_kv * g.n_kv


# -- simulate --------------------------------------------------------------------------------------

TIMED_S_PER_STEP = 1.581e-7
TIMED_S_PER_ENTRY = 7.663e-7
LOCKSTEP_S_PER_ACCESS = 4.113e-8
SIM_PROCESS_S = 3.0
FIGURE_S = 0.5
SHARDS_TARGET = 6554        # analysis.cache.timesim.SHARDS_TARGET (the size rule), read there too
SPREAD_SEEDS = 5            # analysis.cache.sampling.SPREAD_SEEDS: seeds per sampled case

TIMED_B_PER_ITEM = 81       # work_items (4 x int64), the table (17 B) and its int64 temporaries
LOCKSTEP_B_PER_ACCESS = 13  # int32 trace key + int64 stack distance (12.0 B measured), rounded up
SIM_BASE_BYTES = 250 * MiB  # the process before the first case (numpy, numba, rich)


def timed_bytes_per_id(partitions: int) -> int:
    """Bytes per tile id of the timed model with ``partitions`` L2 partitions: key sectors
    (int32) and the sample's float64 temporary (12), per half-tile its sectors, set and
    temporaries (26 per partition), per partition copy of each half-tile the LRU links, the
    presence flag and the fill time (25 per partition squared)."""
    P = partitions
    return 12 + 26 * P + 25 * P * P


@dataclass(frozen=True)
class CaseCost:
    case: Case
    seconds: float
    bytes: int


def sim_case_cost(case: Case, arch: Arch, model: str, partitions: int = 1,
                  sample: bool = False) -> CaseCost:
    """Seconds and bytes one case costs in simulate mode; ``model`` is ``timed``, ``lockstep``
    or ``reuse`` (the reuse study: the lock-step trace and its stack distances); ``sample``: the
    timed model SHARDS-sampled at the size rule, at ``SPREAD_SEEDS`` seeds (``--sample``)."""
    g = TileGrid(case.problem, case.variant.tiles)
    pairs = kv_pairs_per_head(g) * g.n_bh
    ids = tile_ids(case)
    if model == "timed":
        P = partitions
        rate = min(1.0, SHARDS_TARGET / (ids * P)) if sample else 1.0
        steps = pairs if rate >= 1 else min(pairs, 2 * g.n_work + (2 * rate - rate * rate) * pairs)
        runs = SPREAD_SEEDS if rate < 1 else 1
        secs = runs * (TIMED_S_PER_STEP * steps + TIMED_S_PER_ENTRY * ids * P * P)
        mem = TIMED_B_PER_ITEM * g.n_work + timed_bytes_per_id(P) * ids
    else:
        acc = 2 * pairs + 2 * g.n_work
        secs = LOCKSTEP_S_PER_ACCESS * acc
        mem = (LOCKSTEP_B_PER_ACCESS * acc + TIMED_B_PER_ITEM * g.n_work
               + timed_bytes_per_id(1) * ids)
    return CaseCost(case, secs, int(mem))


@dataclass(frozen=True)
class PlanCost:
    """A mode's estimate for a whole plan: seconds, peak bytes, and the parts (name, seconds)."""
    seconds: float
    peak_bytes: int
    parts: tuple[tuple[str, float], ...] = ()
    cases: tuple[CaseCost, ...] = field(default=(), repr=False)


def longest_first(costs: list[float], workers: int) -> float:
    """The makespan of the costs scheduled longest first onto the least loaded of ``workers``."""
    loads = [0.0] * max(1, workers)
    for c in sorted(costs, reverse=True):
        k = loads.index(min(loads))
        loads[k] += c
    return max(loads)


def sim_plan_cost(cases: list[Case], arch: Arch, model: str, workers: int, figures: int = 0,
                  partitions: int = 1, sample: bool = False) -> PlanCost:
    each = [sim_case_cost(c, arch, model, partitions, sample) for c in cases]
    compute = longest_first([c.seconds for c in each], workers)
    peak = SIM_BASE_BYTES + sum(sorted((c.bytes for c in each), reverse=True)[:max(1, workers)])
    parts = [("start", SIM_PROCESS_S), (f"{len(cases)} cases on {workers} thread(s)", compute)]
    if figures:
        parts.append((f"up to {figures} figures", FIGURE_S * figures))
    return PlanCost(sum(s for _, s in parts), int(peak), tuple(parts), tuple(each))


# -- measure ---------------------------------------------------------------------------------------

# Least-squares coefficients of the measured runs' wall time (experiments.runner.costfit.fit_measure
# on the runs of MEASURE_FIT): seconds per unit of each term of ``measure_cost``.
MEASURE_COEF = {
    "start": 13.73,           # the process, the family loads, the first CUDA context
    "per_case": 0,        # compile (in parallel) and prepare one variant
    "timed_gpu": 0.8303,       # x kernel time of every timed launch (the cold-L2 flush included)
    "check_gpu": 7.15,       # x one round of kernels and peers: correctness run, fp32 reference
    "per_session": 5.872,     # one ncu session: python, torch, ncu start, report export
    "per_session_case": 0.3199,  # one case built in an ncu session's target process
    "warmup_gpu": 0.2419,      # x one round of kernels: the target's warm-up launches
    "replay_gpu": 1.218,     # x kernel time of every profiled launch and replay pass
    "eager_call": 0.02486,        # one eager call of an eager-timed study (host, launch, sync)
    "eager_gpu": 0.5516,         # x kernel time of every eager call
}
MEASURE_FIT = ('h100: cuda-tiles-20261123, cuda-tiles-20261125, hints-20261126, '
               'hints-20261126-r2, hints-20261126-r3, ladder-20261121, longseq-20261121, '
               'longseq-20261123, longseq-profile-20261121, misscost-20261123, '
               'misscost-20261123-r2, misscost-20261123-r3, models-20261127, occupancy-20261125, '
               'sawtooth-20261121, sawtooth-20261121-r2, sawtooth-20261121-r3, sawtooth-20261123, '
               'scaling-20261121, shapes-20261127; h200: ladder-20261121, sawtooth-20261121, '
               'sawtooth-20261125, sawtooth-20261125b, scaling-20261121')
"""The runs the measure coefficients were fitted on (every registered ``experiments.run`` measure
run with timed kernels but the backward study's, ``costfit.FORWARD_ONLY``; per run within
-40..+55% of its wall time, every run over 200 s within 5%, the shape suites included since their
eager calls are terms of their own, ``eager_call`` and ``eager_gpu``)."""


def measure_fit_runs() -> int:
    """How many runs ``MEASURE_FIT`` names."""
    return sum(len(part.split(":", 1)[1].split(",")) for part in MEASURE_FIT.split(";"))


PASSES = {"dram": 1, "lrc": 1, "tex": 4, "fabric": 4, "l1": 1}
"""Replay passes per metric group on an H100 (profiles/h100/ncu-passes-20261123/passes.csv.xz and
the profiler__replayer_passes rows of every committed run); a group not listed is counted at 4."""

RATES = {
    # (arch, backend, tile_m, tile_n): TFLOP/s per fully occupied GPU, the median over the
    # committed timing rows of that family and tiles at S >= 32768
    # (experiments.runner.costfit.fit_rates); (arch, backend, None, None): over all its tiles
    ("h100", "cuda", 128, 64): 303, ("h100", "cuda", 64, 64): 302, ("h100", "cuda", 80, 80): 172,
    ("h100", "cuda", None, None): 177, ("h100", "cutile", 128, 128): 494,
    ("h100", "cutile", 64, 128): 484, ("h100", "cutile", 64, 64): 361,
    ("h100", "cutile", None, None): 450, ("h100", "sdpa-cudnn", None, None): 462,
    ("h100", "sdpa-flash", None, None): 306,
    ("h200", "cuda", 128, 64): 304, ("h200", "cuda", 80, 80): 173,
    ("h200", "cuda", None, None): 289,
    ("h200", "cutile", 128, 128): 483, ("h200", "cutile", 64, 64): 353,
    ("h200", "cutile", None, None): 441, ("h200", "sdpa-cudnn", None, None): 462,
    ("h200", "sdpa-flash", None, None): 306,
}
PEERS = ("sdpa-flash", "sdpa-cudnn")


def rate_of(arch: Arch, backend: str, tm: int | None, tn: int | None) -> tuple[float, str]:
    """(TFLOP/s, where it comes from) for a family and tiles on ``arch``."""
    for a, scale in ((arch.name, 1.0), ("h100", arch.num_sms / get_arch("h100").num_sms)):
        for key in ((a, backend, tm, tn), (a, backend, None, None)):
            if key in RATES:
                where = (f"measured on the {a}" if a == arch.name
                         else f"the H100's x {scale:.2f} (SM count), "
                              f"not measured on the {arch.name}")
                return RATES[key] * scale, where
    return RATES[("h100", "cuda", None, None)], "the H100 CUDA family's (no measured throughput)"


def kernel_seconds(case: Case, arch: Arch) -> float:
    """One launch of the case: its FLOPs at the family's measured throughput, slowed by the share
    of the GPU its resident CTAs fill (a persistent launch of P CTAs on a GPU of S SMs x the
    build's CTAs per SM)."""
    v = case.variant
    g = TileGrid(case.problem, v.tiles)
    rate, _ = rate_of(arch, v.backend.value, v.tiles.m, v.tiles.n)
    m = re.match(r"static(\d+)", v.schedule.label)
    slots = arch.num_sms * (v.occupancy or 1)
    active = min(int(m.group(1)) if m else slots, g.n_work, slots)
    return case.problem.flops / (rate * 1e12) / (active / slots)


def peer_seconds(problem, arch: Arch) -> float:
    """The SDPA flash and cuDNN launches of one problem."""
    return sum(problem.flops / (rate_of(arch, b, None, None)[0] * 1e12) for b in PEERS)


def eager_calls(n_cases: int, n_problems: int, reps: int) -> int:
    """Eager calls an eager-timed study makes: per repetition one ``attention()`` call of each
    case's family and one of each SDPA peer per problem."""
    return reps * (n_cases + len(PEERS) * n_problems)


def measure_cost(cases: list[Case], arch: Arch, *, reps: int, timed: bool, profiled: bool,
                 groups: tuple[str, ...], repeats: int, sessions: int,
                 eager: bool = False) -> PlanCost:
    """The phases of a measured run: start and compile, check and time (with ``eager``, the eager
    call of each family and peer too), then one part per ncu session (group x session, in the
    order they run). Seconds from ``MEASURE_COEF``."""
    c = MEASURE_COEF
    kern = sum(kernel_seconds(x, arch) for x in cases)
    problems = {x.problem for x in cases}
    peers = sum(peer_seconds(p, arch) for p in problems) if timed else 0.0
    eager_s = (c["eager_call"] * eager_calls(len(cases), len(problems), reps)
               + c["eager_gpu"] * reps * (kern + peers)) if eager else 0.0
    parts = [("start and compile", c["start"] + c["per_case"] * len(cases)),
             ("check and time", c["check_gpu"] * (kern + peers) + eager_s
              + (c["timed_gpu"] * reps * (kern + peers) if timed else 0.0))]
    if profiled:
        split = [repeats // sessions + (i < repeats % sessions) for i in range(sessions)]
        for i, launches in enumerate(split):
            for gname in groups:
                secs = (c["per_session"] + c["per_session_case"] * len(cases)
                        + c["warmup_gpu"] * kern
                        + c["replay_gpu"] * launches * PASSES.get(gname, 4) * kern)
                parts.append((f"ncu {gname} session {i + 1}/{sessions}", secs))
    return PlanCost(sum(s for _, s in parts), 0, tuple(parts))


def duration(s: float) -> str:
    """'40 s', '7.5 min', '3.2 h', '12 days'."""
    if not math.isfinite(s):
        return "forever"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    if s < 3 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:,.0f} days"


def size(b: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30)):
        if b >= scale:
            return f"{b / scale:,.1f} {unit}"
    return f"{b / MiB:.0f} MiB"

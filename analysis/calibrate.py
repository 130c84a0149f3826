"""Calibration of the timed simulator that cannot overfit: at most two fitted parameters per arch,
fitted on one study and judged on the others.

What is fitted and what is not. ``analysis.timesim`` has six knobs; per arch at most two may be
free (``fit`` refuses more), and since 2026-11-24 only one is:

- ``capacity_fraction`` f: the effective L2 capacity as a fraction of the nominal L2 (the capacity
  lost to set conflicts, the slice hash, other data; the partitions' duplication is modelled, not
  fitted). Fitted.
- ``miss_ratio`` r: the time of a step whose load misses over the time of a hit step. Fittable,
  but now derived from timing data (``miss_ratio_from_timing``): the fit on divergence could not
  tell r = 1, 3, 9 apart (rel. RMS 0.1937 / 0.1942 / 0.1942 at f = 1), so its r = 1 was a
  tie-break, not a measurement.

The others are fixed by measurements or documented facts, never by the miss counts:
``jitter`` and ``rate_jitter`` from the measured CTA drift (``jitter_from_drift``: a per-step
random walk and a constant per-CTA speed spread ``N`` CTAs over
``E[range of N normals]·sqrt(σ_rate² n² + σ_step² n)`` steps after ``n``); ``partitions`` from the
arch registry; ``placement`` (which partition each slot's SM is on) from the arch's measured map
(``analysis.smmap``, ``experiments.smmap``); ``stores_miss=False`` from the H100's counters (a
store never counts as a lookup miss, ``analysis.timesim``); the request-coalescer window is off for
miss counts (it removes lookups that would have been hits or waits on a fill in flight, not
misses).

``fit`` refuses more than two free parameters, searches a fixed grid (no per-case knob, no
continuous optimiser that could chase noise), and the winner is written with the run directories,
cases and grid it came from to ``analysis/params/<arch>.json`` (``write_params``).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from spec.arch import Arch
from spec.case import Case
from spec.orders import ScanOrder
from spec.problem import Problem, Tiles
from spec.records import PROBLEM_COLUMNS, Metric
from spec.schedules import CtaSchedule
from spec.variant import DEFAULT_STAGES, Backend, Variant

from . import timemodel
from .data import DatasetError, csv_rows, read_manifest, registry, stored
from .smmap import sm_pair
from .timesim import TimeParams

__all__ = ["FITTABLE", "MAX_FREE", "MeasuredCase", "load_measured", "case_of_row", "case_key",
           "measured_ctas_per_sm",
           "jitter_from_drift", "miss_ratio_from_timing", "ArchParams", "fit", "rel_rms", "write_params", "read_params",
           "PARAMS_DIR"]

MAX_FREE = 2
FITTABLE = ("capacity_fraction", "miss_ratio")
PARAMS_DIR = Path(__file__).resolve().parent / "params"
MISSES = Metric.L2_TEX_MISSES


@dataclass(frozen=True)
class MeasuredCase:
    """One measured case of one study: its L2 tex misses in every run that measured it."""

    study: str
    case: Case
    runs: tuple[str, ...]
    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return float(np.median(self.values))

    @property
    def lo(self) -> float:
        return float(min(self.values))

    @property
    def hi(self) -> float:
        return float(max(self.values))

    @property
    def spread(self) -> float:
        """Run-to-run range over the median (0 for a single run)."""
        return (self.hi - self.lo) / self.median if self.median else float("nan")

    @property
    def key(self) -> str:
        return self.case.id


def case_of_row(r: dict, arch: Arch, panel: str = "measured",
                ctas_per_sm: int | None = None) -> Case:
    """The case a measured row stands for, from its variant and problem columns.

    Resident CTAs, the number of K/V scans that share the L2 at once, are what the compiled kernel
    really gets: the persistent schedule's P, otherwise SM count × ``ctas_per_sm``, the driver's
    occupancy of the build the run measured (``measured_ctas_per_sm``). The occupancy *hint* of
    the variant is only a request (the longseq CUDA 128x64 D=64 builds get 2 CTAs per SM where
    the family default is 1), so it is used only for runs that did not record the build's
    occupancy at its launch size, and then the family's default stands in for a missing hint."""
    level = re.search(r"\.L(\d+)$", r["variant"])
    variant = Variant(Backend(r["backend"]), ScanOrder.parse(r["order"]),
                      CtaSchedule.parse(r["schedule"]), Tiles(r["tile_m"], r["tile_n"]),
                      r["occupancy"], int(level[1]) if level else None)
    problem = Problem(B=r["B"], H=r["H"], S_q=r["S_q"], D=r["D"], S_kv=r["S_kv"], H_kv=r["H_kv"],
                      dtype=r["dtype"], causal=r["causal"])
    if variant.id(problem) != r["variant"]:
        raise ValueError(f"row variant {r['variant']!r} does not match its columns "
                         f"({variant.id(problem)}); the run's rows are inconsistent")
    if variant.schedule.is_persistent:
        resident = variant.schedule.num_ctas
    else:
        default = (arch.cutile_occupancy if variant.backend == Backend.CUTILE
                   else arch.cuda_occupancy)
        resident = arch.resident_ctas(ctas_per_sm or variant.occupancy or default)
    return Case(problem, variant, resident, panel)


def measured_ctas_per_sm(d: Path) -> dict[tuple, int]:
    """The driver's CTAs per SM of every build run directory ``d`` measured (its ``timing.csv``
    resource rows, ``cuOccupancyMaxActiveBlocksPerMultiprocessor`` of the loaded kernel at its
    launch CTA size), by case key; empty for runs that recorded none.

    A cuTile build's value counts only where the run also recorded its ``threads``: runs before
    2026-11-25 asked the driver at the build's register-limited maximum CTA size (512 threads for
    the sawtooth study's 128-register ``occ2`` builds, answer 1), not the 256 they launch with
    (ncu: 2 CTAs per SM, ``profiles/h100/occupancy-20261125``); their cases fall back to the
    occupancy hint (``case_of_row``). CUDA builds always recorded their launch size."""
    path = stored(d, "timing.csv")
    if path is None:
        return {}
    rows = [r for r in csv_rows(path) if r["source"] == "measured"]
    sized = {case_key(r) for r in rows if r["metric"] == "threads"}
    return {case_key(r): int(r["value"]) for r in rows if r["metric"] == Metric.CTAS_PER_SM
            and (r["backend"] != Backend.CUTILE.value or case_key(r) in sized)}


def run_device(d: Path) -> str | None:
    """The UUID of the GPU run directory ``d`` was measured on: its manifest's
    ``parameters.device.uuid`` (a study run) or ``device.uuid`` (``experiments.smmap``,
    ``experiments.variance``); None for runs that did not record it."""
    try:
        m = read_manifest(d)
    except DatasetError:
        return None
    device = m.get("device") or (m.get("parameters") or {}).get("device") or {}
    return device.get("uuid")


def study_dirs(root: Path, study: str, device: str | None = None) -> list[Path]:
    """The run directories of ``study`` in ``root`` (``<study>[-profile]-YYYYMMDD[x][-rN]``) that
    hold counters, through the data door (``analysis.data.registry.children``)."""
    pat = re.compile(rf"^{re.escape(study)}(-profile)?-\d{{8}}[a-z]?(-r\d+)?$")
    return sorted(d for d in registry.children(root) if pat.match(d.name)
                  and stored(d, "counters.csv") is not None
                  and (device is None or (run_device(d) or "").startswith(device)))


def load_measured(root: Path, arch: Arch, study: str, metric: str = MISSES,
                  device: str | None = None) -> list[MeasuredCase]:
    """Every measured case of ``study`` under ``root`` (e.g. ``profiles/h100``) with its
    ``metric`` (default the tex misses) in each run directory (``<study>-YYYYMMDD[-rN]``; a
    ``longseq-profile-...`` directory counts for longseq); with ``device``, only the runs
    measured on the GPU whose UUID starts with it. Why per GPU: lent H100s differ in where a
    launch's first CTAs sit relative to the two L2 partitions (their floor-swept SMs), so a
    few-CTA case can miss 1.5x more on one chip than on another (REPORT.md section 7d); pooled,
    the runs of several chips give a case's spread across chips. A build's occupancy recorded
    by any of the study's runs stands for all of them: the older runs (2026-11-21) did not
    record it, and their builds are taken to be those of the newer runs of the same variant."""
    per: dict[str, tuple[Case, list[str], list[float]]] = {}
    dirs = study_dirs(Path(root), study, device)
    per_sm = {k: v for d in dirs for k, v in measured_ctas_per_sm(d).items()}   # any run's build
    for d in dirs:
        for run, r in _metric_rows(d, metric):
            c = case_of_row(r, arch, ctas_per_sm=per_sm.get(case_key(r)))
            _, runs, vals = per.setdefault(c.id, (c, [], []))
            runs.append(run)
            vals.append(r["value"])
    return [MeasuredCase(study, c, tuple(runs), tuple(vals)) for c, runs, vals in per.values()]


def _metric_rows(d: Path, metric: str) -> list[tuple[str, dict]]:
    """(run, row) of ``metric`` in run directory ``d``: every launch of ``counters_repeats.csv``
    as a run of its own (``<dir>#<i>``; the file's ``stat=median`` rows are summaries, not
    launches), so that a case's median and spread are those of its launches.

    Only launches whose metric group recorded ``profiler__replayer_passes`` = 1 for that case
    count (``one_pass``). A count collected over several replay passes comes from a different
    execution than its neighbours and was biased: the 4-pass ``hopper`` set of the 2026-11-21
    runs read CUDA B=1 linear at S=256K as 90.3 M misses where five one-pass launches read 79.7 M
    each, and cuTile Static sawtooth 3.2 G where one pass reads 5.9 G (REPORT.md section 0). Runs
    without a repeats file (before the one-pass groups of 2026-11-23) recorded no passes and
    give none."""
    repeats = stored(d, "counters_repeats.csv")
    launches = [r for r in csv_rows(repeats) if not r.get("stat")] if repeats else []
    single = one_pass(launches)
    seen: dict[tuple, int] = {}
    out = []
    for r in launches:
        if (r["metric"] == metric and r["source"] == "measured"
                and (case_key(r), r.get("group")) in single):
            i = seen[case_key(r)] = seen.get(case_key(r), 0) + 1
            out.append((f"{d.name}#{i}", r))
    return out


def one_pass(rows: Sequence[dict]) -> set[tuple]:
    """The (case, metric group) pairs of ``rows`` whose every recorded
    ``profiler__replayer_passes`` is 1: counters collected from one execution of the kernel.
    A run without the record (the metric sets before the one-pass groups of 2026-11-23) has
    none."""
    passes: dict[tuple, set] = {}
    for r in rows:
        if r["metric"] == Metric.REPLAY_PASSES and r.get("group"):
            passes.setdefault((case_key(r), r["group"]), set()).add(float(r["value"]))
    return {k for k, v in passes.items() if v == {1.0}}


def case_key(r: dict) -> tuple:
    """A measured row's case identity: its variant id and problem columns."""
    return (r["variant"], *(r[k] for k in PROBLEM_COLUMNS))


# --------------------------------------------------------------------------------------------
# jitter from the measured drift
# --------------------------------------------------------------------------------------------
def expected_normal_range(n: int) -> float:
    """E[max − min] of ``n`` independent standard normals (numerical integral)."""
    x = np.linspace(-10, 10, 20001)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    pdf = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    e_max = float(np.trapezoid(x * n * pdf * cdf ** (n - 1), x))
    return 2 * e_max


def jitter_from_drift(drift_csv: Path) -> tuple[float, float, str]:
    """(σ_step, σ_rate, note): the two components of the measured CTA drift.

    The spread of ``N`` CTAs' clocks after ``x`` steps, if each step's duration has a random
    log-factor of sd σ_step and each CTA (SM) a constant speed log-factor of sd σ_rate, is about
    ``E[range of N normals] · sqrt(σ_rate² x² + σ_step² x)``: a random walk grows like sqrt(x), a
    speed difference linearly. The measured spreads grow almost linearly over a whole kernel
    (log-log slope 0.83-0.96 over the four non-causal cases of ``drift-20261121b``; a random walk
    alone would give 0.5, and B=4's 100 work items would spread 2x B=1's 25, not the measured
    1.5-6x), so both terms are kept. For every non-causal case ``(spread / range)²`` is fitted by
    non-negative least squares in (σ_rate², σ_step²) over all its sampled steps; each σ is the
    median over the cases. Drift data only: no miss count enters."""
    from scipy.optimize import nnls
    rows = csv_rows(drift_csv)
    by: dict[tuple, dict] = {}
    for r in rows:
        if r["causal"]:
            continue
        k = (r["variant"], r["B"])
        d = by.setdefault(k, {"pts": [], "P": None, "step": None})
        if r["metric"] == Metric.STEP_NS:
            d["step"] = r["value"]
        elif r["metric"] == Metric.CTA_START_SPREAD_NS:
            d["pts"].append((r["x"], r["value"]))
        d["P"] = CtaSchedule.parse(r["schedule"]).num_ctas
    s_rate, s_step = [], []
    for d in by.values():
        x = np.array([p[0] for p in d["pts"]], dtype=float)
        v = np.array([p[1] for p in d["pts"]]) / d["step"] / expected_normal_range(d["P"])
        keep = x > 0
        (a, b), _ = nnls(np.stack([x[keep] ** 2, x[keep]], axis=1), v[keep] ** 2)
        s_rate.append(math.sqrt(a))
        s_step.append(math.sqrt(b))
    if not s_rate:
        raise ValueError(f"{drift_csv}: no non-causal drift cases to derive the jitter from")
    sr, ss = float(np.median(s_rate)), float(np.median(s_step))
    name = Path(drift_csv).parent.name
    return ss, sr, (f"jitter {ss:.4f} per step and rate_jitter {sr:.5f} per CTA = medians over "
                    f"{len(s_rate)} non-causal cases of {name} (fit of the spread's growth)")


def pair_slowdown_from_lags(lags_csv: Path) -> tuple[float, str]:
    """(δ, note): how much slower the odd SM of a busy SM pair runs, per step, from measured
    per-CTA lags (``profiles/h100/drift-sm-20261125b/lags.csv.gz``: each CTA's SM and its lag
    behind the median CTA at the last step all CTAs ran, sparse-stamp trace builds).

    For every launch, every SM pair (2k, 2k+1) that runs a CTA on both SMs gives lag(odd) −
    lag(even); their mean over the launch's pairs, over the step, is that launch's δ; the note's
    δ is the median over the launches that have busy pairs (launches of CTAs alone on their
    pairs give none). Timing data only: no miss count enters."""
    rows = csv_rows(lags_csv, typed=False)
    launches: dict[tuple[str, str], dict] = {}
    for r in rows:
        d = launches.setdefault((r["case"], r["launch"]), {"step": int(r["step"]), "pair": {}})
        sm = int(r["sm"])
        d["pair"].setdefault(sm_pair(sm), {})[sm % 2] = float(r["lag_steps"])
    per = []
    for d in launches.values():
        diffs = [p[1] - p[0] for p in d["pair"].values() if len(p) == 2]
        if diffs and d["step"] > 0:
            per.append(float(np.mean(diffs)) / d["step"])
    if not per:
        raise ValueError(f"{lags_csv}: no launch with a CTA on both SMs of a pair")
    delta = float(np.median(per))
    return delta, (f"pair_slowdown {delta:.2e} per step = median over the {len(per)} launches "
                   f"with busy SM pairs of {Path(lags_csv).parent.name} (odd minus even SM lag)")


def miss_ratio_from_timing(drift_csv: Path, facts: timemodel.MemoryFacts = timemodel.H100,
                           stages: int = DEFAULT_STAGES) -> tuple[float, str]:
    """(r, note): the miss/hit step-time ratio of ``analysis.timesim`` from timing data alone.

    What a simulated step is. ``timesim`` advances a CTA by one K/V tile pair per step and lets the
    step last until its loads are ready: a hit step is the unit, a miss step lasts ``r``. In the
    kernel a step is not its load latency. The CUDA build keeps ``stages`` K/V buffers (default
    2, ``spec.variant.DEFAULT_STAGES``): tile ``s+1`` is issued when step ``s`` starts and must have
    landed when step ``s+1`` starts, so a load has ``(stages − 1)·t_c`` of compute to hide behind.
    ``analysis.timemodel`` states this as ``period = t_c + max(0, L − (stages − 1)·t_c)``, and
    ``r = period(L_dram) / period(L_hit)``. Here ``t_c`` is the shortest measured median step of
    the drift study (``analysis.simcheck.DRIFT_RUN``: 1.29-1.40 µs, the same 80×80 D=64 build
    with 2-132 CTAs; the shortest gives the largest r), ``L_hit`` and ``L_dram`` the pointer-chase
    latencies (``profiles/h100/latency-20261123``: 143 ns, 349 ns). At depth 2 the DRAM fill (0.35
    µs) is 0.28 of the step it hides behind, so **r = 1 exactly**: a CTA whose load misses is not
    slower than one that hits, and nothing in the timing pulls a trailing CTA back behind the
    leader that pays the misses. The misscost study agrees (REPORT.md §10): at depths 2 and 3 the
    time change does not follow the miss change (−74% .. +38% misses, +1.4 .. +4.0% time in all
    32 configurations), while at depth 1 (``r = (t_c + L_dram) / (t_c + L_hit)``, 1.15 here)
    removing misses saves 5-12%. r would exceed 1 only if the loaded DRAM latency exceeded
    ``t_c``, 3.6× the unloaded value. Timing and latency data only: no miss count enters."""
    steps = [r["value"] for r in csv_rows(drift_csv) if r["metric"] == Metric.STEP_NS]
    if not steps:
        raise ValueError(f"{drift_csv}: no {Metric.STEP_NS} rows to take the step time from")
    t_c = min(steps) * 1e-9

    def period(f: float) -> float:
        return timemodel.predict(steps=1, t_c=t_c, stages=stages, f=f, dram_bytes=0.0,
                                 bw_available=1.0, facts=facts).period_s

    r = period(1.0) / period(0.0)
    return r, (f"miss_ratio {r:g} = step period with every load from DRAM / with every load an L2 "
               f"hit (analysis.timemodel, {stages} K/V stages, t_c {t_c * 1e6:.2f} us = shortest "
               f"median step of {Path(drift_csv).parent.name}, L2 hit {facts.l2_hit_s * 1e9:.1f} "
               f"ns, DRAM {facts.dram_s * 1e9:.1f} ns: {facts.name} latencies)")


# --------------------------------------------------------------------------------------------
# the fit
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ArchParams:
    """An arch's simulator parameters and where they came from (one committed JSON per arch)."""

    arch: str
    capacity_fraction: float
    miss_ratio: float
    jitter: float
    partitions: int
    fitted: tuple[str, ...]            # which of FITTABLE were fitted (empty: defaults)
    fit_study: str = ""
    fit_runs: tuple[str, ...] = ()
    fit_cases: tuple[str, ...] = ()
    fit_rel_rms: float | None = None
    grid: dict = field(default_factory=dict)
    grid_rel_rms: tuple = ()            # (f, r, rel_rms) of every grid point
    derivation: str = ""
    rate_jitter: float = 0.0
    pair_slowdown: float = 0.0
    placement: str = "alternate"
    stores_miss: bool = True
    replacement: str = "lru"
    ways: int = 0
    inputs: tuple = ()                  # what the fit read: {"use", "path", "sha256"} each
    command: str = ""                   # the command that regenerates this file byte for byte
    frozen: str = ""                    # why it cannot be regenerated (empty: it can)

    def sim_values(self) -> dict:
        """The simulator's parameters (``SIM_FIELDS``) as the mapping ``time_params`` reads."""
        return {k: getattr(self, k) for k in SIM_FIELDS}

    def time_params(self, arch: Arch, seed: int = 0, sample_rate: float = 1.0) -> TimeParams:
        return time_params(arch, self.sim_values(), seed, sample_rate)

    def note(self) -> str:
        src = (f"fitted {'+'.join(self.fitted)} on {self.fit_study}" if self.fitted
               else "defaults, not fitted")
        return f"params {self.arch}: f={self.capacity_fraction:g} r={self.miss_ratio:g} ({src})"


SIM_FIELDS = ("capacity_fraction", "miss_ratio", "jitter", "partitions", "rate_jitter",
              "pair_slowdown",
              "placement", "stores_miss", "replacement", "ways")
"""The ``ArchParams`` fields the simulator runs with (the rest say where they came from)."""
_SIM_DEFAULTS = {f.name: f.default for f in fields(ArchParams)
                 if f.name in SIM_FIELDS and f.default is not MISSING}


def time_params(arch: Arch, values: dict, seed: int = 0, sample_rate: float = 1.0) -> TimeParams:
    """The ``TimeParams`` of parameter mapping ``values`` (``SIM_FIELDS``; an absent optional
    one takes ``ArchParams``' default): the one place a parameter set becomes a simulator
    configuration, for a committed arch file and for each point of a fit alike."""
    v = _SIM_DEFAULTS | values
    return TimeParams(int(v["capacity_fraction"] * arch.l2_bytes), miss_ratio=v["miss_ratio"],
                      jitter=v["jitter"], seed=seed, partitions=int(v["partitions"]),
                      sample_rate=sample_rate, placement=v["placement"],
                      stores_miss=v["stores_miss"], rate_jitter=v["rate_jitter"],
                      pair_slowdown=v["pair_slowdown"],
                      replacement=v["replacement"], ways=int(v["ways"]))


def rel_rms(pred: Sequence[float], meas: Sequence[float]) -> float:
    """sqrt(mean(((pred − meas) / meas)²))."""
    p, m = np.asarray(pred, float), np.asarray(meas, float)
    return float(np.sqrt(np.mean(((p - m) / m) ** 2))) if len(m) else float("nan")


def fit(cases: Sequence[MeasuredCase], predict: Callable[[Case, dict], float],
        grid: dict[str, Sequence[float]], fixed: dict[str, float]) -> tuple[dict, float, list]:
    """Grid search of at most two free parameters minimising the relative RMS error of
    ``predict(case, params)`` against each case's median.

    ``grid`` maps each free parameter (one of ``FITTABLE``) to its candidate values; ``fixed``
    gives the others. Returns (best params, its rel. RMS, [(params, rel. RMS)] of every point).
    """
    free = list(grid)
    if len(free) > MAX_FREE:
        raise ValueError(f"{len(free)} free parameters {free}: the calibration fits at most "
                         f"{MAX_FREE}; fix the others from measurements or documented facts")
    unknown = [k for k in free if k not in FITTABLE]
    if unknown:
        raise ValueError(f"not fittable: {unknown}; fittable: {FITTABLE}")
    both = set(free) & set(fixed)
    if both:
        raise ValueError(f"{sorted(both)} given as free and fixed")
    if not cases:
        raise ValueError("no measured cases to fit")
    meas = [c.median for c in cases]
    points = []
    for values in np.array(np.meshgrid(*[list(grid[k]) for k in free], indexing="ij")).reshape(
            len(free), -1).T:
        params = {**fixed, **dict(zip(free, (float(v) for v in values)))}
        err = rel_rms([predict(c.case, params) for c in cases], meas)
        points.append((params, err))
    best = min(points, key=lambda p: p[1])
    return best[0], best[1], points


def write_params(p: ArchParams, path: Path | None = None) -> Path:
    path = Path(path or PARAMS_DIR / f"{p.arch}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"schema": 1, **asdict(p)}, indent=1) + "\n")
    tmp.replace(path)
    return path


def read_params(arch: str, path: Path | None = None) -> ArchParams:
    path = Path(path or PARAMS_DIR / f"{arch}.json")
    if not path.exists():
        raise FileNotFoundError(f"{path}: no simulator parameters for {arch}; run "
                                f"`python -m analysis.simcheck fit --arch {arch}`")
    d = json.loads(path.read_text())
    d.pop("schema", None)
    for k in ("fitted", "fit_runs", "fit_cases", "grid_rel_rms"):
        d[k] = tuple(tuple(x) if isinstance(x, list) else x for x in d[k])
    d["inputs"] = tuple(d.get("inputs", ()))
    p = ArchParams(**d)
    check_inputs(p, path)
    return p


def check_inputs(p: ArchParams, path: Path) -> None:
    """Every committed input ``p`` was fitted on still holds what it held then (a
    ``DatasetError`` naming the input and the command that regenerates ``path`` otherwise)."""
    how = (f"regenerate it with `{p.command}`" if p.command and not p.frozen
           else f"it is frozen ({p.frozen.split(';')[0]}); restore the input from git")
    for pin in p.inputs:
        if not pin["path"].startswith("profiles/"):
            continue
        try:
            e = registry.entry(pin["path"])
        except DatasetError as err:
            raise DatasetError(f"{path}: its input {pin['path']} cannot be read ({err}); {how}") \
                from None
        if e.sha256 != pin["sha256"]:
            raise DatasetError(f"{path}: its input {pin['path']} was re-registered with other "
                               f"content (sha256 {e.sha256[:12]} != {pin['sha256'][:12]}); {how}")


# --------------------------------------------------------------------------------------------
# defaults for an arch without measurements
# --------------------------------------------------------------------------------------------
NEAR_BEST = 1.1
"""Grid points whose in-sample rel. RMS is within this factor of the best count as equally good:
their spread is the parameter uncertainty carried into predictions."""


def default_params(arch: Arch, sources: Sequence[str] = ("h100", "h200")) -> tuple[
        ArchParams, list[tuple[float, float]]]:
    """Parameters for an arch that cannot be fitted here (no measurements, e.g. gb10).

    ``capacity_fraction`` and ``miss_ratio``: the means of the values of ``sources`` (the same
    quantities on other chips: the fitted effective fraction of the nominal L2 beyond the modelled
    partitions, and the miss/hit step-time ratio derived from timing). ``partitions`` from the registry
    (GB10: one L2), ``jitter`` the sources' (from the H100 drift). Also returns the uncertainty
    corners: every (f, r) grid point within ``NEAR_BEST`` of the best of any source's fit.
    """
    fits = [read_params(s) for s in sources]
    f = float(np.mean([p.capacity_fraction for p in fits]))
    r = float(np.mean([p.miss_ratio for p in fits]))
    corners = sorted({(gf, gr) for p in fits for gf, gr, e in p.grid_rel_rms
                      if e <= NEAR_BEST * p.fit_rel_rms})
    ap = ArchParams(
        arch=arch.name, capacity_fraction=f, miss_ratio=r, jitter=fits[0].jitter,
        rate_jitter=fits[0].rate_jitter, stores_miss=fits[0].stores_miss,
        partitions=arch.l2_partitions, fitted=(),
        derivation=(f"not fitted (no {arch.name} data): capacity_fraction and miss_ratio are the "
                    f"means of the {'/'.join(sources)} parameters ({', '.join(p.note() for p in fits)}); "
                    f"partitions={arch.l2_partitions} from the registry (placement: alternate, "
                    f"no measured map); jitter and rate_jitter from the H100 drift; stores_miss="
                    f"{fits[0].stores_miss} as measured on the H100; uncertainty = the (f, r) grid points within {NEAR_BEST}x of the best "
                    f"rel. RMS of any source fit: {corners}"))
    return ap, corners

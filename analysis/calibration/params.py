"""Calibration of the timed simulator that cannot overfit: at most two fitted parameters per arch,
fitted on one study and judged on the others.

What is fitted and what is not. ``analysis.cache.timesim`` has six knobs; per arch at most two may
be free (``fit`` refuses more), and one is:

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
(``analysis.cache.smmap``, ``experiments.instruments.smmap``); ``stores_miss=False`` from the H100's
counters (a store never counts as a lookup miss, ``analysis.cache.timesim``); the request-coalescer
window is off for miss counts (it removes lookups that would have been hits or waits on a fill in
flight, not misses).

``fit`` refuses more than two free parameters, searches a fixed grid (no per-case knob, no
continuous optimiser that could chase noise), and the winner is written with the run directories,
cases and grid it came from to ``analysis/params/<arch>.json`` (``write_params``).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from analysis.cache.timesim import TimeParams
from analysis.calibration.measured import MeasuredCase
from analysis.data import DatasetError, registry
from spec.arch import Arch
from spec.case import Case

MAX_FREE = 2
FITTABLE = ("capacity_fraction", "miss_ratio")
PARAMS_DIR = Path(__file__).resolve().parents[1] / "params"


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
    dram_fraction: float = 0.0
    """The pipeline model's DRAM queue: fills are served at this fraction of the arch's DRAM
    bandwidth (``TimeParams.dram_step_sectors``, set per build from its step); 0: no queue."""
    fill_sigma: float = 0.0
    """The pipeline model's fill latency tail: each DRAM fill takes the measured (unloaded)
    latency times exp(fill_sigma * z), z standard normal (``TimeParams.fill_sigma``); 0: none."""
    pipeline_source: str = ""           # the measured runs dram_fraction / fill_sigma came from

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


OPTIONAL_FIELDS = ("dram_fraction", "fill_sigma", "pipeline_source")
"""Pipeline-model fields (pipeline-v2) a parameter file holds only when it sets them."""
_DEFAULTS = {f.name: f.default for f in fields(ArchParams)}


def write_params(p: ArchParams, path: Path | None = None) -> Path:
    path = Path(path or PARAMS_DIR / f"{p.arch}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    d = asdict(p)
    for k in OPTIONAL_FIELDS:             # absent when unused: files written before them stand
        if d[k] == _DEFAULTS[k]:
            del d[k]
    tmp.write_text(json.dumps({"schema": 1, **d}, indent=1) + "\n")
    tmp.replace(path)
    return path


def read_params(arch: str, path: Path | None = None) -> ArchParams:
    path = Path(path or PARAMS_DIR / f"{arch}.json")
    if not path.exists():
        raise FileNotFoundError(f"{path}: no simulator parameters for {arch}; run "
                                f"`python -m analysis.calibration fit --arch {arch}`")
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
        if pin["path"].startswith("analysis/params/"):     # a params file this one derives from
            f = PARAMS_DIR / Path(pin["path"]).name
            got = hashlib.sha256(f.read_bytes()).hexdigest() if f.exists() else "missing"
            if got != pin["sha256"]:
                raise DatasetError(f"{path}: {pin['path']}, which it derives from, changed "
                                   f"(sha256 {got[:12]} != {pin['sha256'][:12]}); {how}")
            continue
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
    partitions, and the miss/hit step-time ratio derived from timing). ``partitions`` from the
    registry (GB10: one L2), ``jitter`` the sources' (from the H100 drift). Also returns the
    uncertainty corners: every (f, r) grid point within ``NEAR_BEST`` of the best of any
    source's fit.
    """
    fits = [read_params(s) for s in sources]
    f = float(np.mean([p.capacity_fraction for p in fits]))
    r = float(np.mean([p.miss_ratio for p in fits]))
    corners = sorted({(gf, gr) for p in fits for gf, gr, e in p.grid_rel_rms
                      if e <= NEAR_BEST * p.fit_rel_rms})
    notes = ", ".join(p.note() for p in fits)
    ap = ArchParams(
        arch=arch.name, capacity_fraction=f, miss_ratio=r, jitter=fits[0].jitter,
        rate_jitter=fits[0].rate_jitter, stores_miss=fits[0].stores_miss,
        partitions=arch.l2_partitions, fitted=(),
        derivation=(f"not fitted (no {arch.name} data): capacity_fraction and miss_ratio are the "
                    f"means of the {'/'.join(sources)} parameters ({notes}); "
                    f"partitions={arch.l2_partitions} from the registry (placement: alternate, "
                    f"no measured map); jitter and rate_jitter from the H100 drift; stores_miss="
                    f"{fits[0].stores_miss} as measured on the H100; uncertainty = the (f, r) grid "
                    f"points within {NEAR_BEST}x of the best rel. RMS of any source fit: "
                    f"{corners}"))
    return ap, corners


def derived_params(arch: Arch, sources: Sequence[str] = ("h100", "h200")) -> ArchParams:
    """``default_params`` as the committed ``analysis/params/<arch>.json`` of an arch without
    measurements: the source files it averages pinned by content hash, the command that writes it,
    and where each value comes from. The paper's published values (GB10) judge it; none of them
    enters it."""
    ap, _ = default_params(arch, sources)
    pins = tuple({"use": f"{s} parameters (averaged)", "path": f"analysis/params/{s}.json",
                  "sha256": hashlib.sha256((PARAMS_DIR / f"{s}.json").read_bytes()).hexdigest()}
                 for s in sources)
    return replace(ap, inputs=pins,
                   command=f"python -m analysis.calibration defaults --arch {arch.name}",
                   derivation=ap.derivation + "; no value is fitted to, or read from, the "
                                              "paper's published counts (profiles/gb10/"
                                              "paper-2601.16032 only judges the predictions)")

"""Simulator vs measured, out of sample: fit one parameter on one study, predict the others.

The fitted parameter is the capacity fraction; the miss/hit step-time ratio is derived from
timing data (``analysis.calibration.fixed.miss_ratio_from_timing``), the rest from other
measurements.

Rows in, rows out. ``validate(measured, arch, params, fit_study)`` takes ``MeasuredCase``s (from
``analysis.calibration.measured.load_measured``) and returns one ``ErrorRow`` per case: measured
median and range over the runs, the timed simulator's prediction (seed 0) and, where the runs
disagree, its range over jitter seeds and the arch's measured SM maps
(``analysis.cache.smmap.measured_maps``), the relative error, and whether the case was in the fit
(in-sample) or not (out-of-sample). ``summarize`` turns them into per-study and overall relative RMS
errors, in and out of sample, over the cases whose run-to-run spread is below ``STABLE_SPREAD``;
``sawtooth_signs`` gives the sign of every linear→sawtooth change, measured (per run) and predicted.

The command line is ``python -m analysis.calibration`` (``analysis/calibration/__main__.py``).

Every number here is simulated against measured; the simulated side names its parameters.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from analysis.cache.timesim import TimeCounts, TimeParams, simulate_case
from analysis.calibration import measured as cm
from analysis.calibration import params as cp
from spec.arch import Arch
from spec.case import Case

__all__ = ["ErrorRow", "SignRow", "ScanRow", "predict", "validate", "summarize",
           "sawtooth_signs", "scan", "parse_set", "sim_params", "STABLE_SPREAD", "STUDIES"]

STABLE_SPREAD = 0.15
"""Cases whose run-to-run range exceeds this fraction of their median are judged by range
overlap, not by relative error (the issue's Bar)."""
STUDIES = ("divergence", "sawtooth", "active-sms", "l1l2", "traffic", "longseq")
FIT_GRID = {"capacity_fraction": (0.25, 0.35, 0.5, 0.7, 1.0)}
"""The fixed grid every arch is fitted on, chosen before looking at any fit (miss_ratio is derived
from timing, not searched: the divergence study cannot tell r = 1, 3, 9 apart)."""
from spec.records import write_dicts


def sim_params(arch: Arch, p: dict, seed: int = 0) -> TimeParams:
    """The timed simulator's parameters for ``arch`` from a parameter dict ``p`` (its simulator
    fields; ``sample_rate`` a number or ``"auto"``, which simulates exact here and lets
    ``predict`` apply the size rule); raises ValueError on a value the model refuses."""
    rate = p.get("sample_rate", 1.0)
    return cp.time_params(arch, {k: v for k, v in p.items() if k in cp.SIM_FIELDS}, seed,
                           1.0 if rate == "auto" else float(rate))


def predict(case: Case, arch: Arch, p: dict, seed: int = 0) -> TimeCounts:
    """The timed simulator's counts for one case under parameter dict ``p`` (``sample_rate``
    a number, or ``"auto"`` for the SHARDS size rule)."""
    return simulate_case(case, sim_params(arch, p, seed), arch.sector_bytes,
                         auto_sample=p.get("sample_rate") == "auto")


@dataclass(frozen=True)
class ErrorRow:
    arch: str
    study: str
    case: str
    sample: str               # "in" (the fit used it) or "out"
    runs: int
    measured_median: float
    measured_lo: float
    measured_hi: float
    spread: float             # (hi - lo) / median over the runs
    predicted: float          # seed 0
    predicted_lo: float       # over the jitter seeds
    predicted_hi: float
    rel_err: float            # (predicted - median) / median
    overlap: bool             # predicted range overlaps the measured range
    source: str = "simulated"
    note: str = ""


@dataclass(frozen=True)
class SignRow:
    arch: str
    case: str
    measured_pct: tuple       # sawtooth vs linear, % of linear, per run
    stable: bool              # same sign in every run
    predicted_pct: float
    sign_right: bool


def validate(measured: Sequence[cm.MeasuredCase], arch: Arch, p: dict, fit_study: str,
             seeds: int = 1, note: str = "", progress=None,
             maps: Sequence[str] = ()) -> list[ErrorRow]:
    """One ``ErrorRow`` per measured case (see the module docstring). The cases whose run-to-run
    spread exceeds ``STABLE_SPREAD`` are simulated with jitter seeds ``0..seeds-1`` and, seed 0,
    with each SM map of ``maps`` as the placement (a launch's map varies between processes and
    chips, ``analysis.cache.smmap.measured_maps``): the predicted range spans both. The others, and
    every point prediction, use seed 0 and ``p``'s placement."""
    out = []
    for m in measured:
        unstable = m.spread > STABLE_SPREAD
        preds = [predict(m.case, arch, p, s).tex_misses for s in range(seeds if unstable else 1)]
        if unstable:
            preds += [predict(m.case, arch, p | {"placement": mp}).tex_misses for mp in maps]
        if progress:
            progress(m)
        lo, hi = min(preds), max(preds)
        out.append(ErrorRow(
            arch=arch.name, study=m.study, case=m.key,
            sample="in" if m.study == fit_study else "out", runs=len(m.values),
            measured_median=m.median, measured_lo=m.lo, measured_hi=m.hi, spread=m.spread,
            predicted=float(preds[0]), predicted_lo=float(lo), predicted_hi=float(hi),
            rel_err=(preds[0] - m.median) / m.median, overlap=bool(lo <= m.hi and hi >= m.lo),
            note=note))
    return out


def summarize(rows: Sequence[ErrorRow]) -> list[dict]:
    """Relative RMS error per (study, sample) and overall in/out, over the stable cases; counts of
    the unstable ones and how many of their predicted ranges overlap the measured range."""
    out = []
    groups: dict[tuple, list[ErrorRow]] = {}
    for r in rows:
        groups.setdefault((r.study, r.sample), []).append(r)
        groups.setdefault(("all", r.sample), []).append(r)
    for (study, sample), rs in sorted(groups.items()):
        stable = [r for r in rs if r.spread <= STABLE_SPREAD]
        unstable = [r for r in rs if r.spread > STABLE_SPREAD]
        err = np.array([r.rel_err for r in stable])
        out.append(dict(arch=rs[0].arch, study=study, sample=sample, cases=len(rs),
                        stable=len(stable),
                        rel_rms=float(np.sqrt(np.mean(err ** 2))) if len(err) else float("nan"),
                        median_rel_err=float(np.median(err)) if len(err) else float("nan"),
                        unstable=len(unstable),
                        unstable_overlap=sum(r.overlap for r in unstable)))
    return out


def sawtooth_signs(measured: Sequence[cm.MeasuredCase], rows: Sequence[ErrorRow]) -> list[SignRow]:
    """Every linear/sawtooth twin pair of the sawtooth study: measured change per run, whether
    its sign is the same in every run, the predicted change, and whether the predicted sign is
    right (judged only where the measured sign is stable)."""
    pred = {r.case: r.predicted for r in rows}
    by_id = {m.key: m for m in measured if m.study == "sawtooth"}
    out = []
    for key, lin in by_id.items():
        if ".linear." not in key:
            continue
        saw = by_id.get(key.replace(".linear.", ".sawtooth.", 1))
        if saw is None or key not in pred:
            continue
        runs = [r for r in lin.runs if r in saw.runs]
        ch = tuple(100 * (saw.values[saw.runs.index(r)] / lin.values[lin.runs.index(r)] - 1)
                   for r in runs)
        stable = all(c < 0 for c in ch) or all(c > 0 for c in ch)
        pc = 100 * (pred[saw.key] / pred[key] - 1)
        out.append(SignRow(arch=rows[0].arch, case=key.replace(".linear.", ".{linear,sawtooth}."),
                           measured_pct=tuple(round(c, 2) for c in ch), stable=stable,
                           predicted_pct=round(pc, 2),
                           sign_right=bool(stable and np.sign(pc) == np.sign(ch[0]))))
    return out


@dataclass(frozen=True)
class SectorRow:
    """L2 tex sectors of one case: measured, the loads model (``models.sector_accesses``) and the
    loads model with the coalescer term (``analysis.cache.merge``)."""

    arch: str
    study: str
    case: str
    measured: float
    loads_model: float
    merged_model: float
    loads_err: float          # (model - measured) / measured
    merged_err: float
    source: str = "model"
    note: str = ""


def sector_rows(measured: Sequence[cm.MeasuredCase], arch: Arch, p: dict,
                window: float | None = None) -> list[SectorRow]:
    """Rows in (measured ``lts__t_sectors_srcunit_tex.sum``), rows out: both sector models."""
    from analysis.cache.merge import merged_sector_accesses
    from analysis.models.traffic import sector_accesses
    out = []
    for m in measured:
        tp = sim_params(arch, p)
        loads = sector_accesses(m.case.problem, m.case.variant.tiles, arch.sector_bytes).total
        merged = merged_sector_accesses(m.case, tp, arch.sector_bytes, window)
        out.append(SectorRow(arch.name, m.study, m.key, m.median, float(loads), float(merged),
                             loads / m.median - 1, merged / m.median - 1,
                             note=f"merge window {window or 'default'}; {tp.note()}"))
    return out


@dataclass(frozen=True)
class ScanRow:
    arch: str
    study: str
    case: str
    measured_median: float
    spread: float
    param: str
    value: float
    predicted: float          # seed 0, the committed parameters but ``param``
    rel_err: float
    source: str = "simulated"
    note: str = ""


SCANNABLE = ("capacity_fraction", "miss_ratio", "jitter", "rate_jitter", "pair_slowdown",
             "ways")
"""Numeric parameters ``scan`` can vary (``analysis.calibration.params.SIM_FIELDS``)."""


def scan(measured: Sequence[cm.MeasuredCase], arch: Arch, p: dict, param: str,
         values: Sequence[float], note: str = "") -> list[ScanRow]:
    """Every case predicted with ``param`` set to each of ``values`` and the rest of ``p``
    unchanged: how much a prediction depends on one parameter, which says whether the
    measurements that fix that parameter could fix the prediction. Exploratory: the rows are
    in-sample for every value (nothing is chosen here)."""
    out = []
    for m in measured:
        for v in values:
            x = predict(m.case, arch, p | {param: v}).tex_misses
            out.append(ScanRow(arch=arch.name, study=m.study, case=m.key,
                               measured_median=m.median, spread=m.spread, param=param,
                               value=float(v), predicted=float(x),
                               rel_err=(x - m.median) / m.median, note=note))
    return out


def parse_set(text: str) -> tuple[str, list[float]]:
    """``"miss_ratio=1,1.003"`` -> ("miss_ratio", [1.0, 1.003]); ValueError naming the fix."""
    key, sep, vals = text.partition("=")
    if not sep or key not in SCANNABLE:
        raise ValueError(f"--set {text!r}: give NAME=V1,V2,... with NAME one of "
                         f"{', '.join(SCANNABLE)}")
    try:
        values = [float(v) for v in vals.split(",")]
    except ValueError:
        raise ValueError(f"--set {text!r}: the values must be numbers, e.g. "
                         f"{key}=1,1.003") from None
    if key == "ways" and any(v != int(v) or v < 0 for v in values):
        raise ValueError(f"--set {text!r}: ways are whole numbers >= 0 (0: fully associative)")
    return key, values


def write_rows(path: Path, rows: Sequence) -> None:
    rows = list(rows)
    if not rows:
        return
    tmp = path.with_suffix(path.suffix + ".tmp")
    write_dicts(tmp, (r if isinstance(r, dict) else asdict(r) for r in rows))
    tmp.replace(path)

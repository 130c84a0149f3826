"""Simulator vs measured, out of sample: fit one parameter on one study, predict the others.

The fitted parameter is the capacity fraction; the miss/hit step-time ratio is derived from
timing data (``analysis.calibrate.miss_ratio_from_timing``), the rest from other measurements.

Rows in, rows out. ``validate(measured, arch, params, fit_study)`` takes ``MeasuredCase``s (from
``analysis.calibrate.load_measured``) and returns one ``ErrorRow`` per case: measured median and
range over the runs, the timed simulator's prediction (seed 0) and, where the runs disagree, its
range over jitter seeds and the arch's measured SM maps (``analysis.smmap.measured_maps``), the
relative error, and whether the case was in the fit (in-sample) or not (out-of-sample).
``summarize`` turns them into per-study and overall relative RMS errors, in and out of sample,
over the cases whose run-to-run spread is below ``STABLE_SPREAD``; ``sawtooth_signs`` gives the
sign of every linear→sawtooth change, measured (per run) and predicted.

CLI::

    python -m analysis.simcheck fit --arch h100          # writes analysis/params/h100.json
    python -m analysis.simcheck validate --arch h100 --out DIR [--seeds 3]
    python -m analysis.simcheck scan --arch h100 --set miss_ratio=1,1.003,1.01 --out DIR

Every number here is simulated against measured; the simulated side names its parameters.
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from spec.arch import Arch, get as get_arch
from spec.case import Case
from . import calibrate as cal
from .data import DatasetError, open_path, registry, stored
from . import smmap
from .smmap import measured_map
from .timemodel import FACTS, H100
from .timesim import REPLACEMENTS, TimeCounts, TimeParams, simulate_case

__all__ = ["ErrorRow", "SignRow", "ScanRow", "predict", "validate", "summarize",
           "sawtooth_signs", "scan", "parse_set", "STABLE_SPREAD", "STUDIES"]

STABLE_SPREAD = 0.15
"""Cases whose run-to-run range exceeds this fraction of their median are judged by range
overlap, not by relative error (the issue's Bar)."""
STUDIES = ("divergence", "sawtooth", "active-sms", "l1l2", "traffic", "longseq")
FIT_GRID = {"capacity_fraction": (0.25, 0.35, 0.5, 0.7, 1.0)}
"""The fixed grid every arch is fitted on (chosen before looking at any fit; until 2026-11-23 it
also searched miss_ratio over 1, 3, 9, which divergence could not tell apart)."""


def _params(arch: Arch, p: dict, seed: int = 0) -> TimeParams:
    rate = p.get("sample_rate", 1.0)
    return cal.time_params(arch, {k: v for k, v in p.items() if k in cal.SIM_FIELDS}, seed,
                           1.0 if rate == "auto" else float(rate))


def predict(case: Case, arch: Arch, p: dict, seed: int = 0) -> TimeCounts:
    """The timed simulator's counts for one case under parameter dict ``p`` (``sample_rate``
    a number, or ``"auto"`` for the SHARDS size rule)."""
    return simulate_case(case, _params(arch, p, seed), arch.sector_bytes,
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


def validate(measured: Sequence[cal.MeasuredCase], arch: Arch, p: dict, fit_study: str,
             seeds: int = 1, note: str = "", progress=None,
             maps: Sequence[str] = ()) -> list[ErrorRow]:
    """One ``ErrorRow`` per measured case (see the module docstring). The cases whose run-to-run
    spread exceeds ``STABLE_SPREAD`` are simulated with jitter seeds ``0..seeds-1`` and, seed 0,
    with each SM map of ``maps`` as the placement (a launch's map varies between processes and
    chips, ``analysis.smmap.measured_maps``): the predicted range spans both. The others, and
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


def sawtooth_signs(measured: Sequence[cal.MeasuredCase], rows: Sequence[ErrorRow]) -> list[SignRow]:
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
    loads model with the coalescer term (``analysis.merge``)."""

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


def sector_rows(measured: Sequence[cal.MeasuredCase], arch: Arch, p: dict,
                window: float | None = None) -> list[SectorRow]:
    """Rows in (measured ``lts__t_sectors_srcunit_tex.sum``), rows out: both sector models."""
    from .merge import merged_sector_accesses
    from .models import sector_accesses
    out = []
    for m in measured:
        tp = _params(arch, p)
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
"""Numeric parameters ``scan`` can vary (``analysis.calibrate.SIM_FIELDS``)."""


def scan(measured: Sequence[cal.MeasuredCase], arch: Arch, p: dict, param: str,
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
    d0 = rows[0] if isinstance(rows[0], dict) else asdict(rows[0])
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(d0))
        w.writeheader()
        for r in rows:
            w.writerow(r if isinstance(r, dict) else asdict(r))
    tmp.replace(path)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------
DRIFT_RUN = "profiles/h100/drift-20261125e"
"""The drift the simulator's jitter comes from: the drift study stamped every 64th step
(``experiments.measure.DRIFT_EVERY``). The every-step stamps of the older runs (drift-20261121b,
-20261125c) perturbed the drift they measured: that build's few-CTA linear launches miss 1.4-5.7x
the plain build's sectors, the sparse one's within 0-8% (``profiles/h100/tracecost-20261125``)."""


PAIR_LAGS = "profiles/h100/drift-sm-20261125b/lags.csv.gz"
"""Per-CTA lags of the sparse-stamp trace builds (2, 4, 8 and 132 CTAs, linear and sawtooth, two
launches each; ``profiles/h100/tracecost-20261125/every64``): where the SM-pair slowdown comes
from."""


def device_map(root: Path, device: str) -> Path | None:
    """The newest ``experiments.smmap`` run directory under ``root`` measured on the GPU whose
    UUID starts with ``device``, else None. Why: where a launch's first CTAs sit relative to the
    two L2 partitions differs between chips (one H100 of the seventh holdout splits them, and its
    2-8 CTA launches miss 1.5x), so one chip's runs are predicted with that chip's map when it
    was measured; otherwise with the arch's committed map (``params.placement``)."""
    maps = [d for d in registry.children(root) if d.name.startswith("smmap-")
            and stored(d, "smmap.csv") is not None
            and (cal.run_device(d) or "").startswith(device)]
    if not maps:
        return None
    rel = registry.relative(maps[-1])            # named from the repository root in notes
    return Path("profiles", rel) if rel is not None else maps[-1]


def _fixed(arch: Arch, root: Path) -> tuple[dict, str]:
    drift = stored(DRIFT_RUN, "drift.csv")
    jitter, _, why = cal.jitter_from_drift(drift)
    pair, why_pair = cal.pair_slowdown_from_lags(open_path(PAIR_LAGS))
    facts = FACTS.get(arch.name, H100)
    miss_ratio, why_r = cal.miss_ratio_from_timing(drift, facts)
    placement = arch.name if measured_map(arch.name) else "alternate"
    return {"miss_ratio": miss_ratio, "jitter": jitter, "rate_jitter": 0.0,
            "pair_slowdown": pair,
            "partitions": arch.l2_partitions, "placement": placement, "stores_miss": False}, (
        f"{why_r}" + ("" if facts.name == arch.name else f" (no {arch.name} latencies measured; "
                      f"r = 1 holds for any DRAM latency below t_c)") + f"; {why} (its per-step "
        f"jitter only; the per-CTA speed spread is the SM-pair term: CTAs alone on their pair "
        f"do not drift apart, rate_jitter 0); {why_pair}; "
        f"placement {placement} (analysis.smmap: "
        f"{_smmap_pin(arch.name)['path'] if placement != 'alternate' else 'none measured'}); "
        f"stores_miss=False (profiles/h100/placement-20261123: tex lookup misses equal the "
        f"read-only lookup misses in all 18 launches: a store never misses)")


def _smmap_pin(arch: str) -> dict:
    return registry.instrument("smmap", arch).pin()


def _inputs(arch: Arch, root: Path, study: str, placement: str) -> tuple[dict, ...]:
    """What the fit read, each pinned by path and content hash (``analysis.data``)."""
    runs = cal.study_dirs(root, study)
    pins = {registry.entry(d).path: registry.entry(d).pin() | {"use": f"{study} runs"}
            for d in runs if registry.relative(d) is not None}
    local = [{"use": f"{study} run (local, uncommitted)", "path": str(d),
              "sha256": registry.content_hash(d)} for d in runs if registry.relative(d) is None]
    fixed = [registry.entry(DRIFT_RUN).pin() | {"use": "jitter and miss_ratio (drift)"},
             registry.entry(PAIR_LAGS).pin() | {"use": "pair_slowdown (SM-pair lags)"}]
    if placement != "alternate":
        fixed.append(_smmap_pin(arch.name) | {"use": "placement (SM -> L2 partition map)"})
    return tuple([*pins.values(), *local, *fixed])


def cmd_fit(arch: Arch, root: Path, study: str, every: int, rate: float,
            command: str = "") -> cal.ArchParams:
    measured = cal.load_measured(root, arch, study)
    if not measured:
        raise SystemExit(f"no measured {study} cases under {root}; give --root with the data")
    # every ``every``-th sequence length of each panel (sorted by S), to bound the fit's cost
    by_panel: dict[str, list] = {}
    for m in measured:
        by_panel.setdefault(m.case.variant.id(m.case.problem), []).append(m)
    measured = [m for ms in by_panel.values()
                for m in sorted(ms, key=lambda m: m.case.problem.S_q)[::every]]
    fixed, why = _fixed(arch, root)
    fixed["sample_rate"] = rate
    t0 = time.perf_counter()
    n = [0]
    n_points = int(np.prod([len(v) for v in FIT_GRID.values()]))

    def pred(case, p):
        n[0] += 1
        print(f"\r  fit {n[0]}/{len(measured) * n_points} {time.perf_counter() - t0:.0f}s",
              end="", file=sys.stderr, flush=True)
        return predict(case, arch, p).tex_misses

    best, err, points = cal.fit(measured, pred, FIT_GRID, fixed)
    print(file=sys.stderr)
    ap = cal.ArchParams(
        arch=arch.name, capacity_fraction=best["capacity_fraction"],
        miss_ratio=best["miss_ratio"], jitter=fixed["jitter"], partitions=fixed["partitions"],
        rate_jitter=fixed["rate_jitter"], pair_slowdown=fixed["pair_slowdown"],
        placement=fixed["placement"],
        stores_miss=fixed["stores_miss"],
        fitted=tuple(FIT_GRID), fit_study=study,
        fit_runs=tuple(sorted({r for m in measured for r in m.runs})),
        fit_cases=tuple(m.key for m in measured), fit_rel_rms=err,
        grid={k: list(v) for k, v in FIT_GRID.items()},
        grid_rel_rms=tuple((p["capacity_fraction"], p["miss_ratio"], e) for p, e in points),
        derivation=f"grid search of rel. RMS of tex misses vs the median of the one-pass "
                   f"launches of the runs under {root.as_posix()}, every "
                   f"{every}-th S of each panel, " + (f"SHARDS R={rate:g} (error vs exact: "
                   f"experiments/simbench.py)" if rate < 1 else "exact (no sampling)") +
                   f"; {why} (fixed, not fitted; the H100 drift is used for every sm_90 arch); "
                   f"partitions from the arch registry",
        inputs=_inputs(arch, root, study, fixed["placement"]), command=command)
    return ap


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.simcheck", description=__doc__.split(
        "\n")[0])
    ap.add_argument("command", choices=("fit", "validate", "sectors", "scan"))
    ap.add_argument("--arch", required=True)
    ap.add_argument("--root", type=Path, help="measured data (default profiles/<arch>)")
    ap.add_argument("--fit-study", default="divergence")
    ap.add_argument("--studies", default=",".join(STUDIES),
                    help="studies to validate (the fit study's in-sample error is also in the "
                         "params JSON)")
    ap.add_argument("--seeds", type=int, default=3, help="jitter seeds for unstable cases")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--every", type=int, default=2, help="fit on every N-th S of each panel")
    ap.add_argument("--sample-rate", type=float, default=0.1,
                    help="fit: SHARDS rate R (1: exact); validate uses the size rule unless "
                         "--exact")
    ap.add_argument("--exact", action="store_true", help="validate without sampling")
    ap.add_argument("--replacement", choices=REPLACEMENTS,
                    help="validate: L2 replacement policy (default: the params file's)")
    ap.add_argument("--set", dest="scan_set", metavar="NAME=V1,V2,...",
                    help="scan: the parameter to vary and its values, e.g. miss_ratio=1,1.01")
    ap.add_argument("--device", help="validate/sectors/scan: only the runs measured on the GPU "
                                     "whose UUID starts with this (the manifests' device uuid, "
                                     "without nvidia-smi's GPU- prefix)")
    a = ap.parse_args(argv)
    try:
        arch = get_arch(a.arch)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    root = a.root or Path("profiles") / arch.name
    try:
        if registry.relative(root) is not None and root.as_posix().strip("/").count("/") > 1:
            registry.entry(root)
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not (registry.relative(root) is not None or root.is_dir()):
        print(f"error: no measured data at {root}; pass --root DIR", file=sys.stderr)
        return 2
    if a.command == "fit":
        cmd = (f"python -m analysis.simcheck fit --arch {arch.name} --root {root.as_posix()}"
               + (f" --fit-study {a.fit_study}" if a.fit_study != "divergence" else "")
               + (f" --every {a.every}" if a.every != 2 else "")
               + (f" --sample-rate {a.sample_rate:g}" if a.sample_rate != 0.1 else ""))
        p = cmd_fit(arch, root, a.fit_study, a.every, a.sample_rate, cmd)
        path = cal.write_params(p, a.out / f"{arch.name}.json" if a.out else None)
        print(f"{path}: f={p.capacity_fraction} r={p.miss_ratio} rel RMS {p.fit_rel_rms:.3f}")
        return 0
    p = cal.read_params(arch.name)
    pd = p.sim_values() | {"replacement": a.replacement or p.replacement,
                           "sample_rate": 1.0 if a.exact else "auto"}
    if a.out is None:
        print(f"error: {a.command} needs --out DIR", file=sys.stderr)
        return 2
    if a.command == "sectors":
        a.out.mkdir(parents=True, exist_ok=True)
        srows = []
        for study in a.studies.split(","):
            ms = cal.load_measured(root, arch, study, cal.Metric.L2_TEX_SECTORS, a.device)
            srows += sector_rows(ms, arch, pd)
            write_rows(a.out / "sectors.csv", srows)
        for study in a.studies.split(","):
            rs = [r for r in srows if r.study == study]
            if rs:
                print(f"{study}: L2 tex sectors MAPE loads model "
                      f"{100 * np.mean([abs(r.loads_err) for r in rs]):.1f}%, with the merge "
                      f"term {100 * np.mean([abs(r.merged_err) for r in rs]):.1f}% "
                      f"({len(rs)} cases)")
        return 0
    if a.command == "scan":
        if not a.scan_set:
            print("error: scan needs --set NAME=V1,V2,... (e.g. miss_ratio=1,1.01)",
                  file=sys.stderr)
            return 2
        try:
            key, values = parse_set(a.scan_set)
            for v in values:          # refuse bad values before any simulation
                _params(arch, pd | {key: v})
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    chip_map = device_map(root, a.device) if a.device else None
    if chip_map is not None:
        pd["placement"] = chip_map.as_posix()
        print(f"SM map of device {a.device}: {chip_map}", file=sys.stderr)
    per_study = {study: cal.load_measured(root, arch, study, device=a.device)
                 for study in a.studies.split(",")}
    measured = [m for ms in per_study.values() for m in ms]
    if not measured:
        print(f"error: no measured run of {a.studies} under {root}"
              + (f" on device {a.device}" if a.device else "") + "; check --root, --studies and "
              "--device (the manifests' parameters.device.uuid)", file=sys.stderr)
        return 2
    if a.command == "scan":
        a.out.mkdir(parents=True, exist_ok=True)
        note = p.note() + f"; {key} varied over {values}; exploratory (in-sample)"
        rows = scan(measured, arch, pd, key, values, note)
        write_rows(a.out / "scan.csv", rows)
        stable = [r for r in rows if r.spread <= STABLE_SPREAD]
        for v in values:
            at = [r for r in stable if r.value == v]
            err = cal.rel_rms([r.predicted for r in at], [r.measured_median for r in at])
            print(f"{key}={v:g}: rel RMS {100 * err:.1f}% over {len(at)} stable cases")
        return 0
    maps = (smmap.measured_maps(arch.name)
            if arch.l2_partitions > 1 and pd["placement"] != "alternate" else [])
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for study, ms in per_study.items():
        t0 = time.perf_counter()
        seeds = a.seeds if any(m.spread > STABLE_SPREAD for m in ms) else 1
        note = p.note() + f"; replacement={pd['replacement']}" + (
            f"; unstable ranges over seeds 0..{seeds - 1} and {len(maps)} measured SM maps"
            if maps else "") + (
            "" if a.exact else "; SHARDS size rule (analysis.timesim.shards_rate), error: "
                               "experiments/simbench.py")
        rows += validate(ms, arch, pd, p.fit_study, seeds=seeds, note=note, maps=maps)
        print(f"{study}: {len(ms)} cases, {seeds} seed(s), {time.perf_counter() - t0:.0f}s",
              file=sys.stderr)
        write_rows(a.out / "errors.csv", rows)
    summ = summarize(rows)
    signs = sawtooth_signs(measured, rows)
    write_rows(a.out / "summary.csv", summ)
    write_rows(a.out / "signs.csv", signs)
    for s in summ:
        print(f"{s['study']:>11} {s['sample']:>3}  cases {s['cases']:>3}  stable {s['stable']:>3}"
              f"  rel RMS {100 * s['rel_rms']:6.1f}%  unstable {s['unstable']} "
              f"(overlap {s['unstable_overlap']})")
    for s in signs:
        print(f"  {s.case}: measured {s.measured_pct} predicted {s.predicted_pct:+.1f}% "
              f"{'stable' if s.stable else 'unstable'} {'right' if s.sign_right else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

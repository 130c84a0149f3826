"""``python -m analysis.calibration``: the timed simulator against the measurements.

    python -m analysis.calibration fit --arch h100 --root profiles/h100/onepass-20261125
        # writes analysis/params/h100.json (or --out DIR/h100.json); the file holds this command
    python -m analysis.calibration defaults --arch gb10
        # writes analysis/params/gb10.json: the h100/h200 parameters averaged, nothing fitted
    python -m analysis.calibration validate --arch h100 --out DIR [--seeds 3] [--device UUID]
    python -m analysis.calibration sectors --arch h100 --out DIR
    python -m analysis.calibration scan --arch h100 --set miss_ratio=1,1.003,1.01 --out DIR

Measured data come from ``--root`` (default ``profiles/<arch>``): a registered run directory or a
container of runs, read through ``analysis.data``; a local directory is read as it is. Every number
printed is simulated against measured; the simulated side names its parameters.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from analysis.cache import smmap
from analysis.cache.timesim import REPLACEMENTS
from analysis.calibration import measured as cm
from analysis.calibration import params as cp
from analysis.calibration.fitting import cmd_fit, device_map
from analysis.calibration.simcheck import (
    STABLE_SPREAD,
    STUDIES,
    parse_set,
    sawtooth_signs,
    scan,
    sector_rows,
    sim_params,
    summarize,
    validate,
    write_rows,
)
from analysis.data import DatasetError, output_problem, registry
from spec.arch import get as get_arch
from spec.records import Metric


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.calibration", description=__doc__.split(
        "\n")[0])
    ap.add_argument("command", choices=("fit", "defaults", "validate", "sectors", "scan"),
                    help="fit: fit an arch's parameters on its measured runs; defaults: write the "
                         "derived parameters of an arch without measurements (GB10); validate, "
                         "sectors, scan: the simulator against the measured runs")
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
    if a.out is not None and a.out.exists() and not a.out.is_dir():
        print(f"error: --out {a.out} is a file; pass a directory", file=sys.stderr)
        return 2
    if a.command == "defaults":
        p = cp.derived_params(arch)
        path = cp.write_params(p, a.out / f"{arch.name}.json" if a.out else None)
        print(f"{path}: f={p.capacity_fraction} r={p.miss_ratio} (derived, not fitted)")
        return 0
    if a.command == "fit":
        cmd = (f"python -m analysis.calibration fit --arch {arch.name} --root {root.as_posix()}"
               + (f" --fit-study {a.fit_study}" if a.fit_study != "divergence" else "")
               + (f" --every {a.every}" if a.every != 2 else "")
               + (f" --sample-rate {a.sample_rate:g}" if a.sample_rate != 0.1 else ""))
        p = cmd_fit(arch, root, a.fit_study, a.every, a.sample_rate, cmd)
        path = cp.write_params(p, a.out / f"{arch.name}.json" if a.out else None)
        print(f"{path}: f={p.capacity_fraction} r={p.miss_ratio} rel RMS {p.fit_rel_rms:.3f}")
        return 0
    p = cp.read_params(arch.name)
    pd = p.sim_values() | {"replacement": a.replacement or p.replacement,
                           "sample_rate": 1.0 if a.exact else "auto"}
    if a.out is None:
        print(f"error: {a.command} needs --out DIR", file=sys.stderr)
        return 2
    problem = output_problem(a.out)                 # before any simulation: never overwritten
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if a.command == "sectors":
        a.out.mkdir(parents=True, exist_ok=True)
        srows = []
        for study in a.studies.split(","):
            ms = cm.load_measured(root, arch, study, Metric.L2_TEX_SECTORS, a.device)
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
                sim_params(arch, pd | {key: v})
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    chip_map = device_map(root, a.device) if a.device else None
    if chip_map is not None:
        pd["placement"] = chip_map.as_posix()
        print(f"SM map of device {a.device}: {chip_map}", file=sys.stderr)
    per_study = {study: cm.load_measured(root, arch, study, device=a.device)
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
            err = cp.rel_rms([r.predicted for r in at], [r.measured_median for r in at])
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
            "" if a.exact else "; SHARDS size rule (analysis.cache.timesim.shards_rate), error: "
                               "explorations/simbench.py")
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

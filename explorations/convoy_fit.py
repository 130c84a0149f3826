"""Fit one pipeline-model parameter on the fit half of the convoy grid measured on the H200
(the method: docs/model-card.md): the DRAM queue (``ArchParams.dram_fraction``) or the fills'
latency tail (``ArchParams.fill_sigma``), one at a time, and nothing else.

Why this parameter. The frozen model ``pipeline-v1`` hides every fill of a build that loads one
or more steps ahead, so all depths >= 2 give one staircase and one count; the fit half measured
2.9x between depths (causal, K/V 1.5x the L2: 1.32, 4.18, 2.85 G sectors at depths 2, 3, 4).
A fill is exposed when it waits longer than the lookahead, so a leader that misses can still fall
back at depth >= 2 when some of its fills take several times the unloaded latency, and less
often the deeper the lookahead: intermediate convoy states. Two sources, one parameter each:
DRAM queueing at a share of the bandwidth (``dram_step_sectors``; scanned first, it moves no
count of the fit half: ``profiles/cpu/convoy-fit-dram-20261128``), and a log-normal tail of each
fill's latency around the measured unloaded one (``fill_sigma``). Each is scanned over a grid
fixed in this file, each point scored on the fit half only (relative RMS of the misses against
the median of the occasion's launches). The judged half is never read here.

    python -m explorations.convoy_fit profiles/h200/convoy-20261128-occ1 --param fill_sigma \
        --out DIR
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

GRIDS = {"dram_fraction": (0.0, 1.0, 0.5, 0.35, 0.25),
         "fill_sigma": (0.0, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7)}
"""The points tried of each candidate parameter, one parameter at a time (0: the frozen model
with the H200's measured latencies)."""
MISSES = "lts__t_sectors_srcunit_tex_lookup_miss.sum"


def _simulate(args) -> tuple[str, float, float]:
    case_id, name, value = args
    from analysis.calibration import read_params
    from experiments.registry.plans import convoy_plan
    from experiments.simulation.simulate import timed_rows
    from spec import get_arch
    arch = get_arch("h200")
    case = next(c for c in convoy_plan(arch) if c.id == case_id)
    params = replace(read_params("h200"), **{name: value})
    rows = timed_rows(case, arch, params, run="fit", study="convoy", sample=False)
    return case_id, value, next(r.value for r in rows if r.metric == MISSES)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m explorations.convoy_fit")
    ap.add_argument("runs", nargs="+", help="measured convoy run directories (fit half read)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--param", choices=sorted(GRIDS), default="fill_sigma")
    a = ap.parse_args(argv)
    if a.out.exists():
        print(f"error: {a.out} exists; name a new directory", file=sys.stderr)
        return 2
    from analysis.data import csv_rows
    from experiments.registry.plans import convoy_half, convoy_plan
    from spec import get_arch
    arch = get_arch("h200")
    fit = {c.id: c for c in convoy_plan(arch) if convoy_half(c, arch) == "fit"}
    meas: dict[str, list[float]] = {}
    for run in a.runs:
        for r in csv_rows(Path(run) / "counters.csv", typed=False):
            if r["metric"] == MISSES and r.get("stat") == "median":
                cid = next((i for i, c in fit.items() if c.variant.id(c.problem) == r["variant"]
                            and str(c.problem.causal) == r["causal"]
                            and str(c.problem.S_q) == r["S_q"]), None)
                if cid:
                    meas.setdefault(cid, []).append(float(r["value"]))
    ids = sorted(meas)
    GRID = GRIDS[a.param]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(a.jobs) as pool:
        got = list(pool.map(_simulate, [(i, a.param, f) for f in GRID for i in ids]))
    pred = {(i, f): v for i, f, v in got}
    table = []
    for f in GRID:
        err = np.array([pred[(i, f)] / np.median(meas[i]) - 1 for i in ids])
        rel_rms_pct = float(100 * np.sqrt(np.mean(err ** 2)))
        table.append(dict(param=a.param, value=f, rel_rms_pct=rel_rms_pct, cases=len(ids)))
        print(f"{a.param} {f:5.2f}: rel RMS {table[-1]['rel_rms_pct']:6.1f}% over {len(ids)}")
    best = min(table, key=lambda r: r["rel_rms_pct"])
    a.out.mkdir(parents=True)
    (a.out / "fit.json").write_text(json.dumps(dict(
        grid=table, best=best, runs=a.runs, seconds=round(time.perf_counter() - t0, 1),
        cases={i: dict(measured=meas[i], predicted={str(f): pred[(i, f)] for f in GRID})
               for i in ids}), indent=1))
    print(f"best: {a.param} {best['value']} ({best['rel_rms_pct']:.1f}%); "
          f"wrote {a.out}/fit.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

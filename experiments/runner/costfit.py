"""Refit the per-unit costs of ``experiments.runner.costs`` from committed data.

    python -m experiments.runner.costfit          # prints the fitted constants beside those in use

- ``fit_rates``: TFLOP/s per fully occupied GPU of each (arch, family, tiles), the median over
  the committed timing rows at S >= 32768 of every measured run (and per family over all tiles);
- ``fit_timed_sim``: seconds per simulated step and per cache entry of the timed simulator, least
  squares over the per-case seconds of the committed simulator benchmark runs (``SIMBENCH``);
- ``fit_lockstep``: seconds per trace access of the lock-step simulator, from the per-case
  seconds of a committed run (``LOCKSTEP_RUN``);
- ``fit_measure``: the coefficients of ``costs.measure_cost``, non-negative least squares over the
  wall time of every committed measured run of ``experiments.run`` whose kernels were timed (the
  kernel time of a round is then the sum of the run's own median times, not the rate model).

``tests/cpu/experiments/runner/test_costs.py`` runs the fits and checks the constants in
``experiments.runner.costs``.
"""
from __future__ import annotations

import re
import statistics
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np

from spec import CtaSchedule, Problem, TileGrid, Tiles, get_arch
from spec.schedules import ScheduleKind

from . import costs

SIMBENCH = ("profiles/cpu/simbench-20261125-shards", "profiles/cpu/simbench-20261125-gb10",
            "profiles/cpu/simbench-20261124-exact-b200")
LOCKSTEP_RUN = "profiles/cpu/lockstep-gb10-20261126"
"""The manifest of ``python -m experiments.run sawtooth --arch gb10 --model lockstep --jobs 1
--no-figures`` (its ``case_seconds``; the counters are not kept)."""
MIN_S = 32768


FORWARD_ONLY = ("backward",)
"""Studies whose runs the fits leave out: the backward study times the backward kernels (and SDPA's
backward as its peers), whose rates are not the forward's, and its wall time has phases the
forward cost model does not count."""


def _measured_runs():
    """(run directory, manifest) of every registered measured run of ``experiments.run`` on an
    H100 or H200 (read through the data door, ``analysis.data``), but ``FORWARD_ONLY``'s."""
    from analysis.data import read_manifest, registry
    for e in registry.find(role="dataset"):
        if not e.arch.startswith("h") or e.study in FORWARD_ONLY:
            continue
        d = read_manifest(e.abspath)
        p = d.get("parameters") or {}
        if d.get("mode") == "measure" and d.get("wall_seconds") and p.get("cases"):
            yield e.abspath, d


@lru_cache(maxsize=None)
def _timing(run: Path) -> tuple[dict[tuple, float], bool]:
    """A run's median kernel_time_ms per timed subject, keyed by its row fields, and whether it
    timed eager calls too (rows of ``eager_call_ms``; shape-suite runs before 2026-11-26 did
    not): one read of the run serves both fits."""
    from analysis.data import read_run
    ms: dict[tuple, list[float]] = {}
    eager = False
    for rows in read_run(run).values():
        for r in rows:
            if r["metric"] == "kernel_time_ms":
                key = tuple(r[k] for k in ("variant", "backend", "schedule", "tile_m", "tile_n",
                                           "occupancy", "B", "H", "H_kv", "S_q", "S_kv", "D",
                                           "causal"))
                ms.setdefault(key, []).append(r["value"])
            eager = eager or r["metric"] == "eager_call_ms"
    return {k: statistics.median(v) for k, v in ms.items()}, eager


def _kernel_medians(run: Path) -> dict[tuple, float]:
    """Median kernel_time_ms per timed subject of a run, keyed by its row fields."""
    return _timing(run)[0]


def fit_rates() -> dict[tuple, float]:
    per: dict[tuple, list[float]] = {}
    for run, d in _measured_runs():
        arch = get_arch(d["arch"]["name"] if isinstance(d["arch"], dict) else d["arch"])
        for key, ms in _kernel_medians(run).items():
            _, be, sch, tm, tn, occ, B, H, Hkv, Sq, Skv, D, causal = key
            if Sq < MIN_S:
                continue
            prob = Problem(B, H, Sq, D, S_kv=Skv, causal=causal, H_kv=Hkv)
            share = 1.0
            if not be.startswith("sdpa"):
                g = TileGrid(prob, Tiles(tm, tn))
                sched = CtaSchedule.parse(sch)
                slots = arch.num_sms * (occ or 1)
                static = sched.kind == ScheduleKind.PERSISTENT      # static<P>[h]
                share = min(sched.num_ctas if static else slots, g.n_work, slots) / slots
            tf = prob.flops / (ms * 1e-3) / share / 1e12
            tiles = (None, None) if be.startswith("sdpa") else (tm, tn)
            per.setdefault((arch.name, be, *tiles), []).append(tf)
            if not be.startswith("sdpa"):
                per.setdefault((arch.name, be, None, None), []).append(tf)
    return {k: round(statistics.median(v)) for k, v in sorted(per.items(), key=str)}


def _simbench_rows():
    from analysis.data import csv_rows
    for d in SIMBENCH:
        for r in csv_rows(f"{d}/simbench.csv", typed=False):
            if r["section"] in "ABCDH" and not r["case"].startswith("TOTAL"):
                yield r


def _sans_hint(case_id: str) -> str:
    """A case id without its occupancy hint, which changes neither the trace nor the cost of
    simulating it (timings committed before the GB10 plan took the authors' hint still count)."""
    return re.sub(r"\.occ\d+", "", case_id)


def _by_id(cases) -> dict:
    return {_sans_hint(c.id): c for c in cases}


def fit_timed_sim() -> tuple[float, float, list[tuple[str, float, float]]]:
    """(seconds per step, seconds per cache entry, [(case, measured, fitted)])."""
    from scipy.optimize import nnls

    from experiments.registry.studies import get_study
    from experiments.simulation.simulate import model_params
    plans: dict[str, dict] = {}
    X, y, names = [], [], []
    for r in _simbench_rows():
        arch = get_arch(r["arch"])
        plan = plans.setdefault(arch.name, _by_id(get_study("sawtooth").plan(arch)))
        case = plan[_sans_hint(r["case"])]
        g = TileGrid(case.problem, case.variant.tiles)
        P = model_params(arch).time_params(arch).partitions
        pairs = costs.kv_pairs(case)
        R = float(r["sample_rate"])
        steps = pairs if R >= 1 else min(pairs, 2 * g.n_work + (2 * R - R * R) * pairs)
        X.append([steps, costs.tile_ids(case) * P * P])
        y.append(float(r["seconds"]))
        names.append(f"{arch.name} {r['mode']} {case.id}")
    X, y = np.asarray(X, float), np.asarray(y)
    coef, _ = nnls(X, y)
    return float(coef[0]), float(coef[1]), list(zip(names, y.tolist(), (X @ coef).tolist()))


def fit_lockstep() -> tuple[float, list[tuple[str, float, float]]]:
    """Seconds per trace access of the lock-step simulator: least squares through the origin over
    the per-case seconds of ``LOCKSTEP_RUN``."""
    from analysis.data import read_manifest
    from experiments.registry.studies import get_study
    m = read_manifest(LOCKSTEP_RUN)
    arch = get_arch(m["arch"]["name"])
    plan = _by_id(get_study(m["study"]).plan(arch))
    pairs = [(costs.tile_accesses(plan[_sans_hint(cid)]), s)
             for cid, s in m["parameters"]["case_seconds"].items()]
    a = sum(n * s for n, s in pairs) / sum(n * n for n, _ in pairs)
    return a, [(cid, s, a * costs.tile_accesses(plan[_sans_hint(cid)]))
               for cid, s in m["parameters"]["case_seconds"].items()]


def measure_features(d: dict, kern_s: float, peers_s: float,
                     eager: bool = False) -> dict[str, float]:
    """The terms of ``costs.measure_cost`` for a committed run (kernel time per round given;
    ``eager``: the run timed eager calls too)."""
    p = d["parameters"]
    prof = p.get("profiling") if isinstance(p.get("profiling"), dict) else {}
    n, reps = len(p["cases"]), p.get("reps") or 0
    if prof.get("metric_set"):          # the first protocol: one session, 4 passes, one launch
        sess, launch_passes = 1, 4
    elif prof.get("groups"):
        g = list(prof["groups"])
        sess = prof["sessions"] * len(g)
        launch_passes = prof["repeats"] * sum(costs.PASSES.get(x, 4) for x in g)
    else:
        sess = launch_passes = 0
    problems = {str(c).rsplit(" ", 1)[-1] for c in p["cases"]}     # "variant-id problem-label"
    return {"start": 1.0, "per_case": n, "timed_gpu": reps * (kern_s + peers_s),
            "check_gpu": kern_s + peers_s, "per_session": sess, "per_session_case": sess * n,
            "warmup_gpu": sess * kern_s, "replay_gpu": launch_passes * kern_s,
            "eager_call": costs.eager_calls(n, len(problems), reps) if eager else 0,
            "eager_gpu": reps * (kern_s + peers_s) if eager else 0.0}


def fit_measure() -> tuple[dict[str, float], list[tuple[str, float, float]]]:
    from scipy.optimize import nnls
    X, y, names = [], [], []
    for run, d in _measured_runs():
        if not d["parameters"].get("reps"):
            continue                    # no kernel time measured: the run cannot say what it cost
        med = _kernel_medians(run)
        kern = sum(v for k, v in med.items() if not k[1].startswith("sdpa")) / 1e3
        peers = sum(v for k, v in med.items() if k[1].startswith("sdpa")) / 1e3
        if not kern:
            continue
        f = measure_features(d, kern, peers, _timing(run)[1])
        X.append([f[k] for k in costs.MEASURE_COEF])
        y.append(float(d["wall_seconds"]))
        names.append(f"{run.parent.name}/{run.name}")
    X, y = np.asarray(X, float), np.asarray(y)
    coef, _ = nnls(X, y)
    return dict(zip(costs.MEASURE_COEF, coef.tolist())), list(zip(names, y.tolist(),
                                                                  (X @ coef).tolist()))


def main(argv: list[str] | None = None) -> int:
    step, entry, _ = fit_timed_sim()
    print(f"timed simulator: {step:.4g} s per step (in use {costs.TIMED_S_PER_STEP:.4g}), "
          f"{entry:.4g} s per entry (in use {costs.TIMED_S_PER_ENTRY:.4g})")
    lock, _ = fit_lockstep()
    print(f"lock-step simulator: {lock:.4g} s per access (in use "
          f"{costs.LOCKSTEP_S_PER_ACCESS:.4g})")
    coef, runs = fit_measure()
    for k, v in coef.items():
        print(f"measure {k}: {v:.4g} (in use {costs.MEASURE_COEF[k]:.4g})")
    for name, wall, fit in runs:
        print(f"  {name}: {wall:.0f} s, fitted {fit:.0f} s ({100 * (fit / wall - 1):+.0f}%)")
    for k, v in fit_rates().items():
        print(f"rate {k}: {v} TFLOP/s (in use {costs.RATES.get(k)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

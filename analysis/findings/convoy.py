"""Section V: the simulator's validation grid on the H200, predicted before it was measured.

What it tests. The L2 misses of a causal launch depend on whether its CTAs stay in a convoy
(one leader misses, the followers hit) or spread into a staircase (every wave re-fetches the
K/V). Which of the two happens is decided by how much of a fill a CTA waits for, so the grid
varies what decides that: the K/V pipeline depth of the CUDA twin (stages 1-4: 0 to 3 tiles
loaded ahead), the length (K+V per head 0.5, 1.0, 1.5x the L2) and the CTA count (96, and
GB10's 48), causal and not, linear and sawtooth. The CUDA twin is used because its CTAs are
exactly the persistent CTAs the simulator places.

The method, enforced by what this module reads: each model version's prediction is a committed
run (``PREDICTIONS``) older than every measurement it is scored on (``OCCASIONS``, each a fresh
process on a fresh machine, ``commit_order`` checks the commits); the grid's halves were fixed
in ``experiments.registry.plans.convoy_half`` before any measurement; a version fitted on the
fit half is scored on the judged half only. A case's measured value is the median over the
occasions of each occasion's median launch; its spread is max / min - 1 over the occasions.
"""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Sequence

import numpy as np

from spec.records import Metric

PREDICTIONS: dict[str, str] = {
    "pipeline-v1": "profiles/cpu/prediction-h200-convoy-20261128",
    "pipeline-v2": "profiles/cpu/prediction-h200-convoy-v2-20261128",
}
"""Each frozen model version's prediction of the whole grid, in the order they were made."""
FITTED_ON_FIT_HALF = ("pipeline-v2",)
"""Versions with a parameter fitted on the fit half: scored on the judged half only."""
OCCASIONS: dict[str, tuple[str, ...]] = {
    "occ1": ("profiles/h200/convoy-20261128-occ1",),
    "occ2": ("profiles/h200/convoy-20261128-occ2", "profiles/h200/convoy48-20261128-occ2"),
    "occ3": ("profiles/h200/convoy-20261128-occ3", "profiles/h200/convoy48-20261128-occ3"),
}
"""Measured runs of the grid on the H200: each occasion (a fresh machine and process) and its
run directories (one per CTA count)."""
BARS = dict(judged_rel_rms_pct=25.0, depth_change_size_pct=35.0, occasions=3)


def _key(r: dict) -> tuple[str, str, int]:
    return r["variant"], str(r["causal"]), int(float(r["S_q"]))


def predicted(rows: Sequence[dict]) -> dict[tuple, float]:
    return {_key(r): float(r["value"]) for r in rows if r["metric"] == Metric.L2_TEX_MISSES}


def measured(occasions: Sequence[tuple[str, Sequence[dict]]]) -> dict[tuple, dict[str, float]]:
    """{case: {occasion: median launch}} from each occasion's summary rows."""
    out: dict[tuple, dict[str, float]] = {}
    for occ, rows in occasions:
        for r in rows:
            if r["metric"] == Metric.L2_TEX_MISSES and r.get("stat") == "median":
                out.setdefault(_key(r), {})[occ] = float(r["value"])
    return out


def case_rows(preds: dict[str, dict[tuple, float]], meas: dict[tuple, dict[str, float]],
              half_of) -> list[dict]:
    """One row per measured case: its half, each occasion's count, the median over occasions,
    the spread across occasions, and each version's prediction and error."""
    out = []
    for k in sorted(meas, key=lambda k: (k[1], k[2], k[0])):
        vals = list(meas[k].values())
        m = float(np.median(vals))
        row = dict(variant=k[0], causal=k[1], S_q=k[2], half=half_of(k), occasions=len(vals),
                   measured=m, lo=min(vals), hi=max(vals),
                   spread_pct=100 * (max(vals) / min(vals) - 1) if min(vals) > 0 else None)
        for ver, p in preds.items():
            if k in p:
                row[f"{ver}"] = p[k]
                row[f"{ver}_err_pct"] = 100 * (p[k] / m - 1)
        out.append(row)
    return out


def summary(rows: Sequence[dict], versions: Sequence[str]) -> list[dict]:
    """Relative RMS error per version and half (a fitted version on its judged half only),
    cases within 25%, and the largest spread across occasions."""
    out = []
    for ver in versions:
        for half in ("fit", "judged", "all"):
            if ver in FITTED_ON_FIT_HALF and half != "judged":
                continue
            sel = [r for r in rows if f"{ver}_err_pct" in r and (half == "all" or
                                                                  r["half"] == half)]
            if not sel:
                continue
            e = np.array([r[f"{ver}_err_pct"] for r in sel])
            out.append(dict(version=ver, half=half, cases=len(sel),
                            rel_rms_pct=float(np.sqrt(np.mean(e ** 2))),
                            within_25pct=int(np.sum(np.abs(e) <= 25)),
                            worst_ratio=float(np.max(1 + e / 100)),
                            best_ratio=float(np.min(1 + e / 100)),
                            max_spread_pct=float(max(r["spread_pct"] or 0 for r in sel)),
                            min_occasions=min(r["occasions"] for r in sel)))
    return out


def depth_changes(rows: Sequence[dict], versions: Sequence[str], a: int = 2,
                  b: int = 3) -> list[dict]:
    """The change from pipeline depth (stages) ``a`` to ``b`` of every (order, CTAs, causal, S):
    measured ratio, each version's predicted ratio, direction right, and size error (the
    predicted ratio over the measured one, minus 1)."""
    by = {(r["variant"], r["causal"], r["S_q"]): r for r in rows}

    def stage_of(v: str) -> int:
        return next((int(t[2:]) for t in v.split(".") if t.startswith("st") and t[2:].isdigit()),
                    2)
    out = []
    for (v, causal, s), r in sorted(by.items()):
        if stage_of(v) != a:
            continue
        vb = v + f".st{b}" if a == 2 else v.replace(f".st{a}", f".st{b}")
        rb = by.get((vb, causal, s))
        if rb is None:
            continue
        mr = rb["measured"] / r["measured"]
        row = dict(variant=v, causal=causal, S_q=s, half=rb["half"], measured_ratio=mr)
        for ver in versions:
            if ver in r and ver in rb:
                pr = rb[ver] / r[ver]
                row[f"{ver}_ratio"] = pr
                row[f"{ver}_direction_ok"] = _direction(pr) == _direction(mr)
                row[f"{ver}_size_err_pct"] = 100 * (pr / mr - 1)
        out.append(row)
    return out


NO_CHANGE = 0.05
"""A depth change smaller than this (5%, over twice the launch-to-launch spread of the grid's
cases in one occasion) is read as no change, in the prediction and the measurement alike."""


def _direction(ratio: float) -> int:
    return 0 if abs(ratio - 1) < NO_CHANGE else (1 if ratio > 1 else -1)


def commit_order(prediction: str, measurement: str, repo: Path = Path(".")) -> dict:
    """When each directory first entered the history (commit time of its first commit): the
    prediction must be the older. Empty times outside a git checkout."""
    def first(path: str) -> int | None:
        try:
            out = subprocess.run(["git", "log", "--diff-filter=A", "--format=%ct", "--",
                                  path], cwd=repo, capture_output=True, text=True, check=True)
        except (OSError, subprocess.CalledProcessError):
            return None
        times = [int(x) for x in out.stdout.split()]
        return min(times) if times else None
    p, m = first(prediction), first(measurement)
    return dict(prediction=prediction, measurement=measurement, prediction_commit_time=p,
                measurement_commit_time=m,
                prediction_first=None if p is None or m is None else p < m)


FIT_HALF = {(96, 122880), (96, 368640)}
"""(persistent CTAs, S) of the fit half on the H200, as ``experiments.registry.plans.convoy_half``
fixed it before any measurement (a test holds the two equal)."""


def half_of(key: tuple) -> str:
    variant, _, s = key
    ctas = next((int(t[6:]) for t in variant.split(".") if t.startswith("static")), 0)
    return "fit" if (ctas, int(s)) in FIT_HALF else "judged"


def sections(arch: str) -> dict[str, tuple[str, list[dict]]]:
    """Sections V (cases), Vb (scores), Vc (depth 2 -> 3), Vd (commit order) for the H200."""
    from analysis.data import read_run
    if arch != "h200":
        return {}
    preds = {v: predicted(read_run(Path(p)).get("counters.csv", []))
             for v, p in PREDICTIONS.items()}
    meas = measured([(occ, read_run(Path(d)).get("counters.csv", []))
                     for occ, dirs in OCCASIONS.items() for d in dirs])
    rows = case_rows(preds, meas, half_of)
    vers = list(PREDICTIONS)
    judged_dirs = {d for dirs in OCCASIONS.values() for d in dirs
                   if any(half_of(k) == "judged" for k in measured(
                       [("x", read_run(Path(d)).get("counters.csv", []))]))}
    order = [dict(version=v, **commit_order(p, d)) for v, p in PREDICTIONS.items()
             for dirs in OCCASIONS.values() for d in dirs
             if v not in FITTED_ON_FIT_HALF or d in judged_dirs]
    return {
        "sV_convoy": ("V. The convoy grid on the H200 (CUDA 80x80, depth 1-4, K+V 0.5-1.5x the "
                      "L2, 96 and 48 CTAs): misses per occasion and each frozen model's "
                      f"prediction ({', '.join(PREDICTIONS.values())})", rows),
        "sV_convoy_summary": ("Vb. Relative RMS error per model version and half (a version "
                              "fitted on the fit half is scored on the judged half only), and "
                              "the spread across occasions", summary(rows, vers)),
        "sV_convoy_depth": ("Vc. Pipeline depth 2 -> 3: measured and predicted ratio",
                            depth_changes(rows, vers)),
        "sV_convoy_order": ("Vd. Each prediction entered the history before each measurement it "
                            "is scored on (a fitted version: those holding judged cases)",
                            order),
    }

"""Is the spread of repeated counters a property of the ncu session, or of each launch?

A profiled case is launched ``repeats`` times, split over ``sessions`` fresh processes
(``profiles.collect``). If the miss count depended on something fixed for a whole session (the
physical pages the allocator handed out, hence which L2 slices the K/V lines hash to), then in a
session that draws "bad" pages *every* case would miss more: the session ranks of the cases would
agree. If it depends on what happens inside each launch (how far the CTAs drift apart, which lines
the replacement keeps), the ranks are independent from case to case.

``session_effect`` tests that with Friedman's test (cases as blocks, sessions as treatments) on
the launches normalised by their case's median, over the cases whose spread exceeds ``min_spread``
(the ones with something to explain). A small p-value says the sessions differ; a large one says
the data show no session effect (it cannot prove there is none).

``python -m analysis.launch.sessions RUN_DIR [--metric M]`` prints the table for a run with one
launch per session (``--sessions`` = ``--repeats``, the orchestrator's default).
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from analysis.data import DatasetError, csv_rows, read_manifest, stored
from analysis.data.rows import case_key
from spec.records import Metric


def launches_by_session(repeat_rows: Iterable[dict], metric: str,
                        launches_per_session: int = 1) -> dict[tuple, dict[int, list[float]]]:
    """``{case key: {session: [values]}}`` of the single launches of ``metric`` (the rows of
    ``counters_repeats.csv`` without a ``stat``; the per-case summaries beside them have one, a
    failed launch has no value); launch ``i`` (its ``sample``) ran in session
    ``i // launches_per_session``."""
    out: dict[tuple, dict[int, list[float]]] = {}
    for r in repeat_rows:
        if r["metric"] == metric and not r.get("stat") and math.isfinite(float(r["value"])):
            s = int(r["sample"]) // launches_per_session
            out.setdefault(case_key(r), {}).setdefault(s, []).append(float(r["value"]))
    return out


def session_effect(by_session: dict[tuple, dict[int, list[float]]],
                   min_spread: float = 0.05) -> dict:
    """Friedman's test of the sessions over the cases whose (max - min) / median of all launches
    exceeds ``min_spread``: per session the mean of the case-normalised values, how often it held
    a case's highest and lowest value, the statistic and p-value. Cases missing a session are
    left out."""
    sessions = sorted({s for d in by_session.values() for s in d})
    rows = []
    for d in by_session.values():
        if set(d) != set(sessions):
            continue
        allv = [x for s in sessions for x in d[s]]
        med = statistics.median(allv)
        if med <= 0 or (max(allv) - min(allv)) / med <= min_spread:
            continue
        rows.append([statistics.mean(d[s]) / med for s in sessions])
    out = dict(sessions=len(sessions), cases=len(rows), min_spread=min_spread)
    if len(sessions) < 3 or len(rows) < 2:
        return dict(out, statistic=float("nan"), p_value=float("nan"), session_mean=[],
                    highest=[], lowest=[])
    X = np.asarray(rows)
    from scipy.stats import friedmanchisquare  # about 1 s to import: only where it runs
    stat, p = friedmanchisquare(*X.T)
    return dict(out, statistic=float(stat), p_value=float(p),
                session_mean=X.mean(0).round(4).tolist(),
                highest=np.bincount(X.argmax(1), minlength=len(sessions)).tolist(),
                lowest=np.bincount(X.argmin(1), minlength=len(sessions)).tolist())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.launch.sessions",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a profiled run directory (with counters_repeats.csv)")
    ap.add_argument("--metric", default=Metric.L2_TEX_MISSES)
    ap.add_argument("--min-spread", type=float, default=0.05)
    a = ap.parse_args(argv)
    try:
        path = stored(a.run, "counters_repeats.csv")
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if path is None:
        print(f"error: {a.run} has no counters_repeats.csv; "
              "pass a run profiled with --repeats >= 2", file=sys.stderr)
        return 2
    try:
        prof = read_manifest(a.run).get("parameters", {}).get("profiling")
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    per = (prof.get("launches_per_session") if isinstance(prof, dict) else None) or [1]
    if len(set(per)) != 1:
        print(f"error: {a.run}: sessions of unequal size ({per}); this test needs the same "
              f"number of launches in every session", file=sys.stderr)
        return 2
    res = session_effect(launches_by_session(csv_rows(path), a.metric, per[0]), a.min_spread)
    if res["cases"] < 2 or res["sessions"] < 3:
        print(f"error: {a.run}: {res['cases']} case(s) above a {a.min_spread:.0%} spread in "
              f"{res['sessions']} session(s); the test needs 2 cases and 3 sessions",
              file=sys.stderr)
        return 2
    print(f"{res['cases']} cases with a spread above {a.min_spread:.0%}, {res['sessions']} "
          f"sessions; {a.metric}")
    print("session  mean/median  highest  lowest")
    for s, (m, hi, lo) in enumerate(zip(res["session_mean"], res["highest"], res["lowest"])):
        print(f"{s:>7}  {m:11.3f}  {hi:7d}  {lo:6d}")
    print(f"Friedman chi2 = {res['statistic']:.2f}, p = {res['p_value']:.3f} "
          f"({'the sessions differ' if res['p_value'] < 0.05 else 'no session effect shown'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

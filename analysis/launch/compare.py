"""Two runs of one study, case by case: does run B reproduce run A within A's repeat spread?

The question behind every "the same measurement, somewhere else" claim: a study sharded over two
GPUs against the one-GPU run, a rerun on another day, another driver. For every case
and counter both runs measured with repeats (the ``median`` rows of ``profiles.counters``, with
``lo``/``hi`` = min..max of the repeats), B's median is classed against A:

- ``inside``: B's median lies in A's min..max;
- ``overlap``: it does not, but the two min..max ranges overlap;
- ``outside``: the ranges are disjoint; ``diff_pct`` says by how much the medians differ.

With three repeats a fourth sample falls outside the range of the first three half of the time
even when nothing changed (for any continuous distribution, by symmetry), and a median of three
often does too: ``outside`` is a flag to look at, not a verdict on its own. What separates "the
other GPU" from "another session" is where each case ran: ``placement`` reads the device index of
every case from each run's manifest (``parameters.placement``, written by
``experiments.sharding.shard``), so a case that ran on the same GPU in both runs and still lies
outside measures session-to-session variance, not the sharding.

``python -m analysis.launch.compare RUN_A RUN_B [--metric M ...]`` prints the table and the counts.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Iterable, Sequence

from analysis.data import DatasetError, read_manifest, read_run
from analysis.data.rows import pct_change, problem_tiles
from spec.records import Metric

DEFAULT_METRICS = (Metric.L2_TEX_MISSES, Metric.DRAM_READ_BYTES)
"""The counters compared by default: local tex misses and DRAM read bytes (one ncu pass)."""


def medians(counter_rows: Iterable[dict], metrics: Sequence[str]) -> dict[tuple, tuple]:
    """``{(case id, metric): (median, lo, hi)}`` of the repeated counters of a run."""
    out = {}
    for r in counter_rows:
        if r.get("stat") == "median" and r["metric"] in metrics \
                and r.get("lo") is not None and r.get("hi") is not None:
            out[(_case_id(r), r["metric"])] = (float(r["value"]), float(r["lo"]), float(r["hi"]))
    return out


def classify(a: tuple[float, float, float], b: tuple[float, float, float]) -> str:
    """``inside`` / ``overlap`` / ``outside`` of B's (median, lo, hi) against A's."""
    (_, alo, ahi), (bm, blo, bhi) = a, b
    if alo <= bm <= ahi:
        return "inside"
    return "overlap" if blo <= ahi and alo <= bhi else "outside"


def placement(run_dir: Path) -> dict[str, int]:
    """``{case id: device index}`` from the run's manifest (empty for an unsharded run)."""
    m = read_manifest(run_dir)
    return {k: int(v) for k, v in (m.get("parameters", {}).get("placement") or {}).items()}


def _case_id(r: dict) -> str:
    """The case id of a row as ``spec.Case.id`` writes it (variant id, problem label): the key of
    a manifest's placement."""
    return f"{r['variant']} {problem_tiles(r)[0].label}"


def compare(a_rows: Iterable[dict], b_rows: Iterable[dict], *,
            metrics: Sequence[str] = DEFAULT_METRICS, a_place: dict[str, int] | None = None,
            b_place: dict[str, int] | None = None) -> list[dict]:
    """One row per (case, metric) measured with repeats in both runs: A's median and range, B's,
    the change of B against A (%), the class (``classify``) and the device each ran on (when
    the manifests say)."""
    ma, mb = medians(a_rows, metrics), medians(b_rows, metrics)
    out = []
    for key in sorted(set(ma) & set(mb), key=lambda k: (k[1], k[0])):
        (a, b), cid = (ma[key], mb[key]), key[0]
        out.append(dict(case=cid, metric=key[1], a=a[0], a_lo=a[1], a_hi=a[2], b=b[0], b_lo=b[1],
                        b_hi=b[2], diff_pct=pct_change(b[0], a[0]), verdict=classify(a, b),
                        a_gpu=(a_place or {}).get(cid), b_gpu=(b_place or {}).get(cid)))
    return out


def summary(rows: Sequence[dict]) -> dict[str, int]:
    """Counts per class, and how many ``outside`` cases ran on the same GPU in both runs."""
    out = {v: sum(r["verdict"] == v for r in rows) for v in ("inside", "overlap", "outside")}
    out["outside_same_gpu"] = sum(r["verdict"] == "outside" and r["a_gpu"] is not None
                                  and r["a_gpu"] == r["b_gpu"] for r in rows)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.launch.compare",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("run_a", type=Path, help="the reference run directory (its repeats' range)")
    ap.add_argument("run_b", type=Path, help="the run checked against it")
    ap.add_argument("--metric", action="append", default=None,
                    help="counter to compare (repeatable; default: tex misses, DRAM read bytes)")
    args = ap.parse_args(argv)
    try:
        a, b = read_run(args.run_a), read_run(args.run_b)
        places = placement(args.run_a), placement(args.run_b)
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = compare(a.get("counters.csv", []), b.get("counters.csv", []),
                   metrics=tuple(args.metric or DEFAULT_METRICS),
                   a_place=places[0], b_place=places[1])
    if not rows:
        print(f"error: {args.run_a} and {args.run_b} share no case measured with repeats; compare "
              f"two runs of one study made with --repeats >= 2", file=sys.stderr)
        return 2
    for r in rows:
        gpus = f"gpu {r['a_gpu']}->{r['b_gpu']}" if r["a_gpu"] is not None else ""
        print(f"{r['verdict']:8s} {r['diff_pct']:+7.2f}%  {r['metric'][:30]:30s} {r['case']}  "
              f"{gpus}")
    s = summary(rows)
    print(f"{len(rows)} medians of B against A's min..max: {s['inside']} inside, {s['overlap']} "
          f"overlapping, {s['outside']} outside ({s['outside_same_gpu']} of them on the same GPU "
          f"in both runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

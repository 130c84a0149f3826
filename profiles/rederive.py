"""``python -m profiles.rederive RUN_DIR [--arch NAME]``: recompute a measured run's derived rows.

The derived rows (exact cold misses, measured misses minus cold) are functions of the measured
counters and the case list (``profile_plan.json``); this rewrites them in ``counters.csv`` with the
current ``experiments.measure.derived_miss_rows``, leaving every measured row as it is. Used when
the derivation is fixed after a run (the file is replaced atomically).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import fields
from pathlib import Path

from experiments.measure import derived_miss_rows
from spec.case import case_from_dict
from spec import get_arch
from spec.records import Metric, Row, read_csv, write_csv

DERIVED = {Metric.COLD_MISSES, Metric.NONCOMPULSORY_MISSES}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    a = ap.parse_args(argv)
    plan = json.loads((a.run_dir / "profile_plan.json").read_text())
    cases = [case_from_dict(d) for d in plan["cases"]]
    names = [f.name for f in fields(Row)]
    rows = [Row(**{k: r[k] for k in names}) for r in read_csv(a.run_dir / "counters.csv")
            if r["metric"] not in DERIVED]
    first = rows[0]
    rows += derived_miss_rows(rows, cases, get_arch(plan["arch"]), run=first.run,
                              study=first.study)
    tmp = a.run_dir / ".counters.csv.tmp"
    write_csv(tmp, rows)
    os.replace(tmp, a.run_dir / "counters.csv")
    print(f"{a.run_dir}: {len(rows)} rows, derived rows recomputed for {len(cases)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())

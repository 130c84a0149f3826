"""SRRIP predictions beside a committed LRU prediction (the eleventh holdout's second model).

``python -m explorations.srrip_prediction PREDICTION_DIR OUT.csv`` reads the tex-miss rows of a
main-command prediction (``experiments.run <study> --mode simulate``: the committed model, LRU),
rebuilds each case (the same problem, variant and resident CTAs), simulates it with the same
parameters but ``replacement="srrip"`` (SHARDS at the size rule, as
``analysis.calibration.simcheck``) and writes ``case,lru,srrip`` (sectors, simulated). Why: a second
policy has to be predicted, like the first, before the holdout that compares them is measured
(``profiles/h100/holdout-20261125j``); ``simcheck validate --replacement srrip`` scores it after.
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

from analysis import calibration as cal
from analysis.calibration.simcheck import predict
from analysis.data import csv_rows, stored
from spec.arch import get as get_arch


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m explorations.srrip_prediction PREDICTION_DIR OUT.csv",
              file=sys.stderr)
        return 2
    pred, out = Path(argv[0]), Path(argv[1])
    src = stored(pred, "counters.csv")
    if src is None:
        print(f"error: no counters.csv(.gz) in {pred}; give a directory written by "
              f"`python -m experiments.run <study> --mode simulate`", file=sys.stderr)
        return 2
    if out.exists():
        print(f"error: {out} exists; give a new file name (results are never overwritten)",
              file=sys.stderr)
        return 2
    rows = [r for r in csv_rows(src) if r["metric"] == cal.MISSES]
    arch = get_arch(rows[0]["arch"])
    params = cal.read_params(arch.name).sim_values() | {"sample_rate": "auto"}
    table = []
    for r in rows:
        case = cal.case_of_row(r, arch)
        x = predict(case, arch, params | {"replacement": "srrip"}).tex_misses
        table.append([case.id, int(r["value"]), x])
        print(case.id, int(r["value"]), x, flush=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["case", "lru", "srrip"])
        w.writerows(table)
    tmp.replace(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

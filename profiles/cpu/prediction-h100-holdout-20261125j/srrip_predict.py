"""SRRIP predictions for the cases of a committed LRU prediction (same cases, same parameters
but the replacement policy)."""
import csv, sys
import analysis.calibrate as cal
from analysis.simcheck import predict
from spec.arch import get as get_arch
from spec.records import read_csv
arch = get_arch("h100"); p = cal.read_params("h100")
rows = [r for r in read_csv(sys.argv[1]) if r["metric"] == cal.MISSES]
out = csv.writer(open(sys.argv[2], "w", newline=""))
out.writerow(["case", "lru", "srrip"])
for r in rows:
    c = cal.case_of_row(r, arch)
    x = predict(c, arch, p.sim_values() | {"sample_rate": "auto", "replacement": "srrip"}).tex_misses
    out.writerow([c.id, int(r["value"]), x]); print(c.id, c.resident, int(r["value"]), x, flush=True)

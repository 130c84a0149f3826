"""GPU test of the pointer-chase latency benchmark (experiments.instruments.latency): a tiny run,
one footprint in the L2 and one 8x the L2, end to end through the CLI: positive finite ns per load,
the footprint 8x the L2 slower than the one in it, and the run directory with its CSV and
latency.json."""
from __future__ import annotations

import csv
import json
import math

import pytest

from spec import detect

pytestmark = pytest.mark.gpu


def test_tiny_chase_dram_slower_than_l2(tmp_path, capsys):
    from experiments.instruments.latency import main
    arch = detect()
    big = 8 * arch.l2_bytes
    out = tmp_path / "lat"
    assert main(["--arch", arch.name, "--out", str(out), "--sizes", f"1M,{big}",
                 "--loads", "20000", "--repeats", "3"]) == 0
    with open(out / "latency.csv") as f:
        rows = {int(r["footprint_bytes"]): r for r in csv.DictReader(f)}
    assert sorted(rows) == [2**20, big]
    for r in rows.values():
        ns = [float(r[k]) for k in ("ns_per_load", "min_ns_per_load", "max_ns_per_load")]
        assert all(math.isfinite(v) and v > 0 for v in ns) and ns[1] <= ns[0] <= ns[2]
        assert float(r["cycles_per_load"]) > 0
    small, large = float(rows[2**20]["ns_per_load"]), float(rows[big]["ns_per_load"])
    assert large > small, (small, large)
    meta = json.loads((out / "latency.json").read_text())
    assert meta["l2_hit_ns"] == pytest.approx(small, abs=0.01)
    assert meta["device"]["l2_bytes"] == arch.l2_bytes and meta["command"].startswith("python")
    assert not (out / "manifest.json").exists()
    assert "l2_hit_ns" in capsys.readouterr().out

"""The decode bench's CPU face: --help, --dry-run (the problem list meets the issue's ranges) and
an existing --out refused in one line with exit status 2."""
from __future__ import annotations

import subprocess
import sys

from experiments.speed import decode_bench


def test_dry_run_and_help():
    assert decode_bench.main(["--dry-run"]) == 0
    r = subprocess.run([sys.executable, "-m", "experiments.speed.decode_bench", "--help"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "--out" in r.stdout


def test_problem_ranges():
    P = decode_bench.PROBLEMS
    assert len(P) >= 24
    assert {p[0] for p in P} >= {1, 64} and min(p[4] for p in P) <= 1024
    assert max(p[4] for p in P) >= 131072
    assert {p[1] // p[2] for p in P} >= {1, 4, 8, 32}
    assert {p[5] for p in P} == {64, 128} and {p[3] for p in P} == {1, 4, 16}


def test_existing_out_refused(tmp_path, capsys):
    out = tmp_path / "x.csv"
    out.write_text("")
    assert decode_bench.main(["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "exists" in err and err.count("\n") == 1

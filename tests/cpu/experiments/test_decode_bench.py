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


def test_ragged_problems_and_bad_reps(tmp_path, capsys):
    assert decode_bench.RAGGED and all(p[0] > 1 for p in decode_bench.RAGGED)
    assert decode_bench.main(["--out", str(tmp_path / "y.csv"), "--reps", "2"]) == 2
    assert "--reps" in capsys.readouterr().err
    assert not (tmp_path / "y.csv").exists()


def test_split_fit_set_is_not_the_bench_suite():
    from experiments.tuning import decode_splits
    assert not set(decode_splits.FIT) & set(decode_bench.PROBLEMS + decode_bench.RAGGED)
    assert decode_splits.main(["--dry-run"]) == 0


def test_split_fit_finds_constants_that_pick_the_fastest_measured(tmp_path):
    """A synthetic run whose times follow the work model with (F, C) = (4, 400000): the fit
    must recover choices as good as the truth's (ratio 1.0), and the report names the problems;
    a run the model cannot follow (one split always fastest) is reported as such (ratio > 1)."""
    import csv

    import spec.decode as sd
    from experiments.tuning import decode_splits as ds
    from spec.decode import packing, tile_n_for

    def write(path, cost):
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, ds.FIELDS)
            w.writeheader()
            for p in ds.FIT:
                for s in ds.ladder(p, 132):
                    w.writerow(dict(zip(("B", "H", "H_kv", "S_q", "S_kv", "D"), p), splits=s,
                                    ms=cost(p, s), spread=0.01, max_diff=0.0))

    def model(p, s, F=4.0, C=400_000):
        B, H, H_kv, S_q, S_kv, D = p
        hg, sqp = packing(H // H_kv, S_q)
        saved = sd.FIXED_TILES, sd.MERGE_LAUNCH_BYTES
        sd.FIXED_TILES, sd.MERGE_LAUNCH_BYTES = F, C
        try:
            tn = tile_n_for(D, hg * sqp)
            return sd.predicted_cost(s, units=B * H_kv * (H // H_kv // hg),
                                     n=sd.n_tiles(S_kv, tn), slots=132,
                                     tile_bytes=2 * tn * D * 2,
                                     merge_bytes_per_split=B * H * S_q * D * 4)
        finally:
            sd.FIXED_TILES, sd.MERGE_LAUNCH_BYTES = saved

    truth = tmp_path / "truth.csv"
    write(truth, model)
    rows = list(csv.DictReader(truth.open()))
    report = ds.fit(rows, 132)
    assert "geometric mean 1.000" in report[0], report[0]
    assert len(report) == 2 + len(ds.FIT)
    flat = tmp_path / "flat.csv"
    write(flat, lambda p, s: 1.0 + s)                # more splits always slower: no (F, C)
    line = ds.fit(list(csv.DictReader(flat.open())), 132)[0]      # of the model follows it
    assert float(line.split("geometric mean ")[1].split(",")[0]) > 1.5, line
    assert ds.main(["--fit", str(flat)]) == 0


def test_split_fit_refuses_a_missing_run(tmp_path, capsys):
    from experiments.tuning import decode_splits as ds
    assert ds.main(["--fit", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_the_committed_split_sweep_confirms_the_constants(capsys):
    """The work model with the constants in ``spec.decode`` picks the fastest timed split count
    on every problem of the committed H200 sweep (its README's claim, and its command)."""
    from experiments.tuning import decode_splits as ds
    assert ds.main(["--fit", "profiles/h200/decode-splits-20261128b"]) == 0
    current = capsys.readouterr().out.splitlines()[1]
    assert current.startswith("current (F, C)") and "geometric mean 1.000" in current, current

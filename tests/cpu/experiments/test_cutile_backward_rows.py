"""The training bench's summary (no GPU): per-half ratios against each peer, and the host time per
call against the best SDPA backend that ran (a peer that refused the problem, NaN, is skipped);
stored runs without the host column still summarise."""
from __future__ import annotations

import math

from experiments.speed.cutile_backward_bench import SPEED_FIELDS
from experiments.speed.cutile_backward_rows import summarize, summary, write

NAN = math.nan


def _row(problem, launcher, fwd_bwd, bwd, host, half="validation"):
    return ["llm", half, problem, launcher, fwd_bwd, bwd, 10, NAN, "GPU", host]


ROWS = [
    _row("p1", "cutile", 2.0, 1.0, 0.30), _row("p1", "flash", 4.0, 2.0, 0.20),
    _row("p1", "cudnn", 1.0, 0.5, 0.25),
    # flash refused p2: its host time is NaN, the best SDPA backend there is cuDNN
    _row("p2", "cutile", 1.0, 1.0, 0.40), _row("p2", "flash", NAN, NAN, NAN),
    _row("p2", "cudnn", 0.5, 0.25, 0.20),
]


def _line(lines, *words):
    hit = [ln for ln in lines if all(w in ln for w in words)]
    assert len(hit) == 1, (words, lines)
    return hit[0]


def test_ratios_per_half_and_peer():
    lines = summary(ROWS, [])
    cudnn = _line(lines, "validation", "fwd+bwd", "cudnn/cutile")
    assert "geo-mean 0.500" in cudnn and "min 0.500" in cudnn and "(2 problems)" in cudnn
    flash = _line(lines, "validation", "fwd+bwd", "flash/cutile")
    assert "geo-mean 2.000" in flash and "(1 problems)" in flash      # NaN row left out
    assert not [ln for ln in lines if ln.startswith("tuning")]


def test_host_ratio_skips_a_refusing_peer():
    host = _line(summary(ROWS, []), "host per call")
    # p1: 0.30 / min(0.20, 0.25) = 1.5; p2: 0.40 / 0.20 = 2.0 (flash's NaN skipped)
    assert f"geo-mean {math.sqrt(1.5 * 2.0):.3f}" in host and "max 2.000" in host
    assert "(2 problems" in host


def test_stored_run_without_host_column(tmp_path, capsys):
    run = tmp_path / "old"
    run.mkdir()
    write(run / "speed.csv", SPEED_FIELDS[:-1], [r[:-1] for r in ROWS])
    assert summarize([str(run)]) == 0
    out = capsys.readouterr().out
    assert "fwd+bwd cudnn/cutile geo-mean 0.500" in out and "host per call" not in out
    assert summarize([str(tmp_path / "missing")]) == 2

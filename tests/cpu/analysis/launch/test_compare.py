"""analysis.launch.compare: classes by hand, placement from a manifest, the CLI on committed runs
and on bad input."""
from __future__ import annotations

import pytest

from analysis.launch.compare import classify, compare, main, placement, summary
from spec.records import Metric
from tests.conftest import ROOT

SHARD = ROOT / "profiles/h200/sharding-20261123b"


def row(value, lo, hi, *, variant="cuda.linear.static8.m80n80d64", S=4096,
        metric=Metric.L2_TEX_MISSES):
    return dict(variant=variant, backend="cuda", order="linear", schedule="static8", tile_m=80,
                tile_n=80, occupancy=None, B=1, H=1, H_kv=1, S_q=S, S_kv=S, D=64, dtype="fp16",
                causal=False, metric=metric, value=float(value), stat="median", lo=lo, hi=hi)


@pytest.mark.parametrize("b, want", [((10, 9, 11), "inside"), ((12, 10.5, 13), "overlap"),
                                     ((13, 12, 14), "outside"), ((7, 6.5, 7.9), "outside"),
                                     ((8, 7, 9), "inside")])
def test_classify_against_a_range(b, want):
    assert classify((10, 8, 11), b) == want


def test_compare_pairs_cases_and_counts_same_gpu():
    case = "cuda.linear.static8.m80n80d64 b1h1s4096d64.fp16.full"
    a = [row(100, 95, 105), row(50, 49, 51, S=8192)]
    b = [row(120, 118, 121), row(50.5, 50, 51, S=8192), row(7, 7, 7, S=16384)]   # last: not in A
    rows = compare(a, b, a_place={case: 0}, b_place={case: 0})
    assert [r["verdict"] for r in rows] == ["outside", "inside"]
    assert rows[0]["case"] == case and rows[0]["diff_pct"] == pytest.approx(20.0)
    assert summary(rows) == {"inside": 1, "overlap": 0, "outside": 1, "outside_same_gpu": 1}
    # rows without repeats (no lo/hi) are not compared
    assert compare([dict(row(1, 1, 1), lo=None, hi=None)], [row(1, 1, 1)]) == []


def test_committed_sharded_run_against_the_one_gpu_run(capsys):
    case = "cuda.linear.static1.m80n80d64 b1h1s65536d64.fp16.full"
    assert placement(SHARD / "l1l2-g2")[case] in (0, 1)
    assert main([str(SHARD / "l1l2-g1"), str(SHARD / "l1l2-g2")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("44 medians of B against A's min..max")


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert main([str(tmp_path / "absent"), str(SHARD / "l1l2-g2")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err
    # a timed-only run shares no repeated counter with it
    assert main([str(ROOT / "profiles/h100/longseq-20261121"), str(SHARD / "l1l2-g1")]) == 2
    assert "share no case" in capsys.readouterr().err

"""cuda_baseline.drift on the CPU: the spread arithmetic on hand-made traces, sampling, the plan,
and the CLI's plan and refusals (exit 2, one line, nothing written) without a GPU."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cuda_baseline import drift as dr
from experiments.studies import scaled_seq
from spec import Backend, Problem, ScanOrder, Tiles, get_arch, known_archs
from spec.schedules import ScheduleKind

ROOT = Path(__file__).resolve().parents[2]
EPOCH_NS = 1_763_700_000_123_456_789     # %globaltimer reads ns since the epoch (late 2025)


# -- drift() --------------------------------------------------------------------------------------

def test_drift_with_padding_and_ctas_of_different_lengths():
    # CTA 0 runs 4 steps, CTA 1 three, CTA 2 one; step 3 has a single CTA and is dropped
    t = np.array([[100, 130, 150, 190],
                  [110, 125, 160, -1],
                  [160, -1, -1, -1]], dtype=np.int64)
    d = dr.drift(t)
    np.testing.assert_array_equal(d.step, [0, 1, 2])
    np.testing.assert_array_equal(d.spread_ns, [60, 5, 10])     # 160-100, 130-125, 160-150
    # durations: CTA 0: 30, 20, 40; CTA 1: 15, 35; CTA 2: none -> median of 15 20 30 35 40
    assert d.median_step_ns == 30
    np.testing.assert_allclose(d.spread_steps, [2.0, 5 / 30, 10 / 30])


def test_drift_ignores_padding_in_the_extrema():
    # a -1 pad must not count as an early start (min) nor the pad's diff as a duration
    t = np.array([[1000, 1010, 1020], [1004, -1, -1], [1002, 1012, -1]], dtype=np.int64)
    d = dr.drift(t)
    np.testing.assert_array_equal(d.step, [0, 1])
    np.testing.assert_array_equal(d.spread_ns, [4, 2])
    assert d.median_step_ns == 10


def test_drift_is_exact_at_epoch_timestamps():
    """Real stamps are ~1.8e18 ns, where float64 resolves only 256 ns: spreads of a few ns must
    survive (they were rounded to multiples of 256 ns before times were made relative)."""
    t = EPOCH_NS + np.array([[0, 1000, 2010], [37, 1050, 0]], dtype=np.int64)
    t[1, 2] = -1
    d = dr.drift(t)
    np.testing.assert_array_equal(d.step, [0, 1])
    np.testing.assert_array_equal(d.spread_ns, [37, 50])
    assert d.median_step_ns == 1010                     # durations 1000, 1010, 1013


def test_drift_of_a_single_cta_has_no_spread():
    d = dr.drift(np.array([[5, 15, 35]], dtype=np.int64))
    assert d.step.size == 0 and d.spread_ns.size == 0
    assert d.median_step_ns == 15


# -- kv_tile_bytes, sample_steps ------------------------------------------------------------------

def test_kv_tile_bytes_by_hand():
    # K and V tiles of n=64 rows, D=128, fp16: 2 * 64 * 128 * 2 bytes (m=128 must not enter)
    assert dr.kv_tile_bytes(Problem(1, 1, 1024, 128), Tiles(128, 64)) == 32768
    assert dr.kv_tile_bytes(Problem(1, 1, 1024, 64), Tiles(80, 80)) == 20480


@pytest.mark.parametrize("n", [1, 2, 3, 7, 300, 301, 1000, 4097])
@pytest.mark.parametrize("points", [2, 3, 7, 300])
def test_sample_steps_keeps_ends_sorted_unique_and_at_most_points(n, points):
    s = dr.sample_steps(n, points)
    assert s.dtype.kind == "i"
    assert 1 <= len(s) <= points
    assert s[0] == 0 and s[-1] == n - 1
    assert np.all(np.diff(s) > 0)                        # sorted and unique
    assert s.min() >= 0 and s.max() <= n - 1
    if n <= points:
        np.testing.assert_array_equal(s, np.arange(n))
    else:
        assert len(s) == points                          # evenly spaced, none lost to rounding


@pytest.mark.parametrize("points", [1, 0, -3])
def test_sample_steps_needs_two_points(points):
    with pytest.raises(ValueError, match="at least 2"):
        dr.sample_steps(10, points)


# -- plan -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", known_archs())
def test_plan_is_persistent_twins_at_the_scaled_sequence(name):
    arch = get_arch(name)
    cases = dr.plan(arch)
    assert len(cases) == 8
    assert {(p.B, p.causal) for p, _ in cases} == {(1, False), (4, False), (1, True), (4, True)}
    for p, v in cases:
        assert p.S_q == p.S_kv == scaled_seq(arch) and p.H == 1 and p.D == 64
        assert v.backend == Backend.CUDA and v.tiles == Tiles(80, 80)
        assert v.schedule.kind == ScheduleKind.PERSISTENT and v.schedule.num_ctas == arch.num_sms
    for (p1, lin), (p2, saw) in zip(cases[::2], cases[1::2]):
        assert p1 == p2
        assert lin.order == ScanOrder.linear() and saw.order == ScanOrder.sawtooth()
        assert dataclasses.replace(lin, order=saw.order) == saw      # only the order differs
    assert len({v.id(p) + p.label for p, v in cases}) == 8


# -- CLI ------------------------------------------------------------------------------------------

def cli(*args):
    return subprocess.run([sys.executable, "-m", "cuda_baseline.drift", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_cli_dry_run_lists_the_eight_cases(tmp_path):
    r = cli("--arch", "h100", "--dry-run", "--out", str(tmp_path / "x"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    want = [f"{v.id(p)} {p.label}" for p, v in dr.plan(get_arch("h100"))]
    assert lines == want
    assert "cuda.sawtooth.static132.m80n80d64 b4h1s262144d64.fp16.causal" in lines
    assert not list(tmp_path.iterdir())


def test_cli_unknown_arch_is_one_line_exit_2(tmp_path):
    r = cli("--arch", "a100", "--out", str(tmp_path / "x"))
    assert r.returncode == 2
    assert r.stderr.strip() == "error: unknown arch 'a100'; known: gb10, h100, h200, b200, b300"
    assert "Traceback" not in r.stderr and not list(tmp_path.iterdir())


def _no_measure(*a, **k):
    raise AssertionError("measure() must not be reached")


@pytest.mark.parametrize("present, words", [
    (None, ("no CUDA GPU found", "run it on that machine", "--dry-run")),
    ("h200", ("--arch h100 but the GPU present is h200", "pass --arch h200")),
])
def test_cli_without_the_gpu_is_one_line_exit_2_and_writes_nothing(tmp_path, monkeypatch, capsys,
                                                                     present, words):
    import spec.arch
    monkeypatch.setattr(spec.arch, "detect", lambda: present and get_arch(present))
    monkeypatch.setattr(dr, "measure", _no_measure)
    runs = ROOT / "runs" / "h100" / "drift"
    before = set(runs.iterdir()) if runs.exists() else None
    out = tmp_path / "run"
    assert dr.main(["--arch", "h100", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    for w in words:
        assert w in err
    assert not out.exists() and not list(tmp_path.iterdir())
    # without --out: the default run directory is not created either
    assert dr.main(["--arch", "h100"]) == 2
    assert (set(runs.iterdir()) if runs.exists() else None) == before


def test_cli_existing_out_is_refused_before_measuring(tmp_path, monkeypatch, capsys):
    import spec.arch
    monkeypatch.setattr(spec.arch, "detect", lambda: get_arch("h100"))
    monkeypatch.setattr(dr, "measure", _no_measure)
    (tmp_path / "run").mkdir()
    assert dr.main(["--arch", "h100", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("points", ["1", "0", "-5", "two"])
def test_cli_points_below_two_is_an_argparse_error(points, capsys, monkeypatch):
    monkeypatch.setattr(dr, "measure", _no_measure)
    with pytest.raises(SystemExit) as e:
        dr.main(["--arch", "h100", "--points", points, "--dry-run"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --points" in err and "integer >= 2" in err


def test_cli_points_two_is_accepted(capsys):
    assert dr.main(["--arch", "h100", "--points", "2", "--dry-run"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 8

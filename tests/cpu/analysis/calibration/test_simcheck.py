"""Simulator vs measured: error rows in, summary and sign rows out (no simulation here)."""
import math
from pathlib import Path

import numpy as np
import pytest

from analysis import calibration as cal
from analysis.cache.smmap import slot_partitions
from analysis.calibration.fitting import device_map
from analysis.calibration.simcheck import STABLE_SPREAD, ErrorRow, sawtooth_signs, summarize
from spec import Backend, CtaSchedule, Problem, ScanOrder, Tiles, Variant
from spec.case import Case


def _row(study, sample, rel, spread=0.0, overlap=True, case="c"):
    return ErrorRow("h100", study, case, sample, 1, 100.0, 100.0, 100.0 * (1 + spread), spread,
                    100.0 * (1 + rel), 0, 0, rel, overlap)


def test_summary_separates_in_and_out_of_sample_and_unstable_cases():
    rows = [_row("divergence", "in", 0.1), _row("divergence", "in", -0.1),
            _row("sawtooth", "out", 0.3), _row("sawtooth", "out", 0.4),
            _row("sawtooth", "out", 2.0, spread=STABLE_SPREAD + 0.5, overlap=False)]
    s = {(r["study"], r["sample"]): r for r in summarize(rows)}
    assert math.isclose(s["divergence", "in"]["rel_rms"], 0.1)
    assert math.isclose(s["sawtooth", "out"]["rel_rms"], math.sqrt((0.09 + 0.16) / 2))
    assert s["sawtooth", "out"]["unstable"] == 1 and s["sawtooth", "out"]["unstable_overlap"] == 0
    assert s["all", "out"]["stable"] == 2 and s["all", "in"]["cases"] == 2


def _case(order):
    return Case(Problem(1, 1, 4096, 64), Variant(Backend.CUDA, order, CtaSchedule.persistent(4),
                                                  Tiles(64, 64)), 4, "t")


def test_sawtooth_signs_judge_only_stable_changes():
    lin, saw = _case(ScanOrder.linear()), _case(ScanOrder.sawtooth())
    measured = [cal.MeasuredCase("sawtooth", lin, ("r1", "r2"), (100.0, 100.0)),
                cal.MeasuredCase("sawtooth", saw, ("r1", "r2"), (60.0, 80.0))]
    rows = [_row("sawtooth", "out", 0, case=lin.id), _row("sawtooth", "out", -0.5, case=saw.id)]
    (s,) = sawtooth_signs(measured, rows)
    assert s.measured_pct == (-40.0, -20.0) and s.stable and s.predicted_pct == -50.0
    assert s.sign_right
    measured[1] = cal.MeasuredCase("sawtooth", saw, ("r1", "r2"), (60.0, 120.0))
    (s,) = sawtooth_signs(measured, rows)
    assert not s.stable and not s.sign_right


def test_one_chips_runs_are_simulated_with_that_chips_sm_map(tmp_path):
    """``validate --device`` predicts a chip's runs with the SM map measured on that chip when
    the root holds one (``experiments.instruments.smmap`` beside the runs, matched by the manifests'
    device uuid), else with the arch's committed map. Chip C of the seventh holdout recorded its map
    (the same as the committed one); chip A did not."""
    root = Path("profiles/h100/holdout-20261125f")
    chip = device_map(root, "8c6f14f0")
    assert chip == root / "smmap-20261125" and device_map(root, "800ee51b") is None
    for n in (2, 16, 32, 132):
        assert np.array_equal(slot_partitions(chip.as_posix(), n, 2), slot_partitions("h100", n, 2))
    with pytest.raises(ValueError, match="no measured SM placement"):
        slot_partitions(tmp_path.as_posix(), 4, 2)


def test_measured_maps_are_the_distinct_maps_under_the_arch(tmp_path):
    """One chip (GPU-128ea12b) measured in two processes gave two maps (they differ from 16 CTAs
    up): both are among the H100's maps; a copy of a map already seen adds nothing."""
    import shutil

    from analysis.cache.smmap import measured_map, measured_maps
    maps = measured_maps("h100")
    a = str(Path("profiles/h100/holdout-20261125g/smmap-20261125c").resolve())
    b = str(Path("profiles/h100/onepass-20261125/smmap-20261125").resolve())
    assert a in maps and b in maps
    assert measured_map(a)[8] == measured_map(b)[8] and measured_map(a)[132] != measured_map(b)[132]
    assert len({tuple(sorted(measured_map(m).items())) for m in maps}) == len(maps)
    from analysis.data import catalogue, registry
    prof = tmp_path / "profiles"
    shutil.copytree(a, prof / "h100" / "x" / "smmap-1")
    shutil.copytree(a, prof / "h100" / "smmap-2")
    with registry.use_root(tmp_path):          # a store of two copies of one map
        registry.write([catalogue.entry_fields("h100/x", "measured"),
                        catalogue.entry_fields("h100/smmap-2", "instrument", True)])
        assert measured_maps("h100") == [str(prof / "h100" / "smmap-2")]


def test_unstable_ranges_span_seeds_and_maps(monkeypatch):
    """A case whose launches disagree gets a range over the jitter seeds and the given SM maps;
    a stable case one prediction (seed 0, the parameters' placement), as does every point
    prediction."""
    from types import SimpleNamespace

    from analysis.calibration import simcheck
    calls = []

    def fake(case, arch, p, seed=0):
        calls.append((p.get("placement", "h100"), seed))
        return SimpleNamespace(tex_misses={"h100": 100, "m1": 150, "m2": 60}[
            p.get("placement", "h100")] + seed)
    monkeypatch.setattr(simcheck, "predict", fake)
    lin = _case(ScanOrder.linear())
    unstable = cal.MeasuredCase("traffic", lin, ("r1", "r2"), (140.0, 200.0))
    stable = cal.MeasuredCase("traffic", lin, ("r1", "r2"), (100.0, 101.0))
    from spec import get_arch
    u, s = simcheck.validate([unstable, stable], get_arch("h100"), {}, "divergence", seeds=2,
                             maps=["m1", "m2"])
    assert (u.predicted, u.predicted_lo, u.predicted_hi) == (100, 60, 150) and u.overlap
    assert (s.predicted, s.predicted_lo, s.predicted_hi) == (100, 100, 100)
    assert calls == [("h100", 0), ("h100", 1), ("m1", 0), ("m2", 0), ("h100", 0)]


def test_scan_varies_one_parameter_and_keeps_the_rest(monkeypatch):
    from types import SimpleNamespace

    from analysis.calibration import simcheck
    seen = []

    def fake(case, arch, p, seed=0):
        seen.append(p)
        return SimpleNamespace(tex_misses=100 * p["miss_ratio"])
    monkeypatch.setattr(simcheck, "predict", fake)
    m = cal.MeasuredCase("traffic", _case(ScanOrder.linear()), ("r1", "r2"), (100.0, 110.0))
    from spec import get_arch
    rows = simcheck.scan([m], get_arch("h100"), {"miss_ratio": 1.0, "jitter": 0.5},
                         "miss_ratio", [1.0, 2.0])
    assert [r.predicted for r in rows] == [100.0, 200.0]
    assert [round(r.rel_err, 3) for r in rows] == [round(100 / 105 - 1, 3), round(200 / 105 - 1, 3)]
    assert all(p["jitter"] == 0.5 for p in seen) and rows[0].source == "simulated"


@pytest.mark.parametrize("bad", ["miss_ratio", "colour=1", "miss_ratio=a", "ways=1.5",
                                 "ways=-2"])
def test_scan_set_refuses_bad_input(bad):
    from analysis.calibration.simcheck import parse_set
    with pytest.raises(ValueError, match="--set"):
        parse_set(bad)
    assert parse_set("ways=0,64") == ("ways", [0.0, 64.0])


def test_scan_cli_bad_input_exits_2(tmp_path, capsys):
    from analysis.calibration.__main__ import main
    assert main(["scan", "--arch", "h100", "--out", str(tmp_path / "o")]) == 2
    assert main(["scan", "--arch", "h100", "--set", "miss_ratio=0.5", "--out",
                 str(tmp_path / "o")]) == 2          # a miss faster than a hit
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("error: ") for e in err)
    assert not (tmp_path / "o").exists()


def test_the_latest_holdouts_committed_score_is_recomputed_from_its_case_errors():
    """The README's simulator figure (the eleventh holdout, 15.6% relative RMS over 8 stable
    cases) is not only a pinned number: ``summarize`` over the committed per-case errors (the
    measured medians and spreads, the predictions) gives it again, and the relative error of
    each case is (predicted - median) / median of its own columns."""
    from analysis.calibration.simcheck import ErrorRow, summarize
    from analysis.data import csv_rows, stored
    val = "profiles/cpu/simcheck-h100-holdout-20261125j"
    rows = []
    for r in csv_rows(stored(val, "errors.csv"), typed=False):
        e = ErrorRow(arch=r["arch"], study=r["study"], case=r["case"], sample=r["sample"],
                     runs=int(r["runs"]), measured_median=float(r["measured_median"]),
                     measured_lo=float(r["measured_lo"]), measured_hi=float(r["measured_hi"]),
                     spread=float(r["spread"]), predicted=float(r["predicted"]),
                     predicted_lo=float(r["predicted_lo"]), predicted_hi=float(r["predicted_hi"]),
                     rel_err=float(r["rel_err"]), overlap=r["overlap"] == "True")
        assert e.rel_err == pytest.approx((e.predicted - e.measured_median) / e.measured_median)
        assert e.spread == pytest.approx((e.measured_hi - e.measured_lo) / e.measured_median)
        rows.append(e)
    (out,) = [s for s in summarize(rows) if s["study"] == "all"]
    (committed,) = [r for r in csv_rows(stored(val, "summary.csv"), typed=False)
                    if r["study"] == "all"]
    assert (out["cases"], out["stable"]) == (16, 8) == (int(committed["cases"]),
                                                       int(committed["stable"]))
    assert out["rel_rms"] == pytest.approx(float(committed["rel_rms"])) == pytest.approx(0.156,
                                                                                        abs=5e-4)

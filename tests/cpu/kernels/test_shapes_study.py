"""The shapes study on the CPU: its plan (the issue's suite with each family's default), the
summary against the SDPA peers (experiments.speed.shapes: ratios, eager call time, peers that
fail the gate, the CLI on a stored run, the measure hook) and the model suite's halves."""
from __future__ import annotations

import pytest

from cuda_baseline.build.source import SM90_CTAS_PER_SM
from experiments.registry.studies import get_study
from experiments.registry.suites import shapes_problems
from experiments.speed import shapes
from kernels.rules.choice import problem_config
from spec import Backend, CtaSchedule, Problem, ScanOrder
from spec.problem import TileGrid, Tiles
from spec.schedules import ScheduleKind
from tests.cpu.kernels.shape_helpers import H100


def test_shapes_plan_is_the_issue_suite_with_each_familys_default():
    cases = get_study("shapes").plan(H100)
    probs = {c.problem for c in cases}
    assert len(probs) == 80 and len(cases) == 160 and len({c.id for c in cases}) == 160
    assert {p.dtype.value for p in probs} == {"fp16", "bf16"}
    assert {(p.S_q, p.S_kv, p.causal) for p in probs if p.S_q != p.S_kv} == \
        {(1024, 16384, False), (1024, 16384, True)}
    assert {(p.B, p.H, p.H_kv, p.S_q, p.dtype.value, p.causal) for p in probs if p.H_kv < p.H} \
        == {(2, 32, g, s, "bf16", True) for g in (4, 8) for s in (4096, 16384)}
    assert {p.S_q for p in probs if p.B == 1 and p.H == 16 and p.S_q == p.S_kv} == \
        {4096, 16384, 32768, 131072}
    for c in cases:
        p, v = c.problem, c.variant
        assert v.order == ScanOrder.linear()
        if v.backend == Backend.CUTILE:
            cfg = problem_config("h100", p)
            assert v.tiles == cfg.tiles and v.occupancy == cfg.occupancy
            assert (v.schedule.kind == ScheduleKind.GRID) == (cfg.schedule == "grid")
        else:
            assert v.tiles == (Tiles(64, 64) if (p.D, p.causal) == (128, False)
                               else H100.cuda_tiles)
            if not p.causal:
                assert v.schedule == CtaSchedule.grid()
            else:      # longest first over one wave of resident CTAs, at most one per item
                per_sm = SM90_CTAS_PER_SM[(v.tiles, p.D)]
                n_work = TileGrid(p, v.tiles).n_work
                assert v.schedule == CtaSchedule.longest_first(min(132 * per_sm, n_work))
    study = get_study("shapes")
    assert study.timed and not study.profiled and study.measure is not None


def _rows(times: dict) -> list[dict]:
    """Timing rows: {(problem, who): [ms, ...]}."""
    out = []
    for (p, who), ms in times.items():
        for i, m in enumerate(ms):
            out.append(dict(B=p.B, H=p.H, H_kv=p.H_kv, S_q=p.S_q, S_kv=p.S_kv, D=p.D,
                            dtype=p.dtype.value, causal=p.causal, backend=who,
                            metric="kernel_time_ms", value=m, sample=i))
        out.append(dict(B=p.B, H=p.H, H_kv=p.H_kv, S_q=p.S_q, S_kv=p.S_kv, D=p.D,
                        dtype=p.dtype.value, causal=p.causal, backend=who, metric="tflops",
                        value=999.0, sample=0))
    return out


LONG = Problem(1, 16, 16384, 128)
SHORT = Problem(16, 16, 1024, 64, causal=True)
CROSS = Problem(1, 16, 1024, 64, S_kv=16384, causal=True)


def test_summary_ratios_geomean_minimum_and_missing():
    rows = _rows({
        (LONG, "sdpa-cudnn"): [1.0, 1.0, 9.0], (LONG, "sdpa-flash"): [2.0],
        (LONG, "cutile"): [1.25, 1.25, 0.1], (LONG, "cuda"): [2.0],
        (SHORT, "sdpa-cudnn"): [0.1], (SHORT, "sdpa-flash"): [0.1],
        (SHORT, "cutile"): [0.2],                           # cuda failed here: missing
        (CROSS, "sdpa-cudnn"): [0.5],                       # flash refuses causal S_q != S_kv
        (CROSS, "cutile"): [0.5], (CROSS, "cuda"): [1.0],
    })
    got = {s.family: s for s in shapes.summarize(rows)}
    cu = got["cutile"]
    # medians: long 1.0/1.25 = 0.8, short 0.1/0.2 = 0.5, cross 0.5/0.5 = 1.0
    assert cu.vs_cudnn.n == 3 and cu.vs_cudnn.minimum == pytest.approx(0.5)
    assert cu.vs_cudnn.geomean == pytest.approx((0.8 * 0.5 * 1.0) ** (1 / 3))
    assert cu.vs_cudnn.worst == SHORT.label
    assert cu.vs_flash.n == 2 and cu.vs_flash.geomean == pytest.approx((1.6 * 0.5) ** 0.5)
    assert cu.by_class["cross"].geomean == pytest.approx(1.0) and cu.missing == ()
    assert cu.no_flash == 1 and cu.no_cudnn == 0
    assert got["cuda"].missing == (SHORT.label,) and got["cuda"].vs_cudnn.n == 2
    lines = shapes.summary_lines(rows)
    assert any("cuda has no time for 1 problems" in ln and SHORT.label in ln for ln in lines)
    assert lines[0].startswith("cutile vs cuDNN (kernel time, l2 cold): geomean 0.737x, "
                               "min 0.500x")
    assert not any("eager" in ln for ln in lines)       # no eager call time rows: no lines


def test_summary_reports_the_eager_call_time_beside_the_kernel_time():
    """Eager call time rows (host included) get their own lines, from their own metric: here
    the kernel is as fast as cuDNN's and the eager call half as fast."""
    from experiments.speed.eager import EAGER_CALL_MS
    kernel = _rows({(LONG, "sdpa-cudnn"): [1.0], (LONG, "cutile"): [1.0]})
    eager = [dict(r, metric=EAGER_CALL_MS, value=r["value"] * (2 if r["backend"] == "cutile"
                                                               else 1))
             for r in kernel if r["metric"] == "kernel_time_ms"]
    (k,) = shapes.summarize(kernel + eager)
    (e,) = shapes.summarize(kernel + eager, EAGER_CALL_MS)
    assert k.vs_cudnn.geomean == pytest.approx(1.0) and e.vs_cudnn.geomean == pytest.approx(0.5)
    lines = shapes.summary_lines(kernel + eager)
    assert any(ln.startswith("cutile vs cuDNN (kernel time, l2 cold): geomean 1.000x")
               for ln in lines)
    assert any(ln.startswith("cutile vs cuDNN (eager call time, host included, l2 warm): "
                             "geomean 0.500x") for ln in lines)


def test_a_peer_that_fails_the_gate_is_left_out_of_the_ratios():
    gqa = Problem(2, 32, 4096, 128, H_kv=8, dtype="bf16", causal=True)
    rows = _rows({(CROSS, "sdpa-cudnn"): [0.1], (CROSS, "cutile"): [0.5],
                  (gqa, "sdpa-cudnn"): [1.0], (gqa, "cutile"): [2.0]})
    err = dict(B=CROSS.B, H=CROSS.H, H_kv=CROSS.H_kv, S_q=CROSS.S_q, S_kv=CROSS.S_kv, D=CROSS.D,
               dtype="fp16", causal=True, backend="sdpa-cudnn", metric="max_abs_err", value=3.0,
               note="FAIL: max|err|=3.00e+00 (SDPA own 1.00e-03, tol 3.00e-03)")
    ok = dict(err, B=gqa.B, H=gqa.H, H_kv=gqa.H_kv, S_q=gqa.S_q, S_kv=gqa.S_kv, D=gqa.D,
              dtype="bf16", value=1e-3, note="ok: max|err|=1.00e-03")
    (s,) = shapes.summarize(rows + [err, ok])
    assert s.vs_cudnn.n == 1 and s.vs_cudnn.geomean == pytest.approx(0.5) and s.no_cudnn == 1
    assert shapes.summary_lines(rows + [err, ok])[-1] == \
        f"left out, the peer's output failed the correctness gate: sdpa-cudnn on {CROSS.label}"


def test_peers_are_checked_where_they_may_read_the_call_differently():
    assert shapes.needs_peer_check(CROSS)                                  # causal S_q != S_kv
    assert not shapes.needs_peer_check(Problem(1, 16, 1024, 64, S_kv=16384))
    assert shapes.needs_peer_check(Problem(2, 32, 4096, 128, H_kv=8))      # grouped K/V heads
    assert not shapes.needs_peer_check(Problem(1, 4, 3000, 64, causal=True))
    assert sum(shapes.needs_peer_check(p) for _, p in shapes_problems()) == 6   # 4 GQA, 2 cross


def test_summary_without_any_family_says_so():
    assert shapes.summary_lines(_rows({(LONG, "sdpa-cudnn"): [1.0]})) == \
        ["no family was timed: nothing to summarize"]


def test_shapes_cli_reads_a_stored_run_and_refuses_bad_paths(tmp_path, capsys):
    import csv

    from spec.records import COLUMNS
    path = tmp_path / "timing.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in _rows({(LONG, "sdpa-cudnn"): [1.0], (LONG, "cutile"): [2.0]}):
            w.writerow({k: r.get(k, "") for k in COLUMNS} | {"occupancy": "", "tile_m": 0,
                                                            "tile_n": 0})
    assert shapes.main([str(tmp_path)]) == 0
    assert "cutile vs cuDNN (kernel time, l2 cold): geomean 0.500x" in capsys.readouterr().out
    assert shapes.main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ")


def test_measure_hook_adds_peer_rows_and_prints_the_summary_last(monkeypatch):
    from experiments.measurement import measure as measure_mod
    rows = _rows({(LONG, "sdpa-cudnn"): [1.0], (LONG, "cutile"): [2.0]})
    seen = {}

    def fake_check_and_time(cases, arch, **kw):
        seen["kw"] = kw
        return measure_mod.Outcome(rows=list(rows), summary=["case line"])

    def fake_peer_rows(cases, arch, *, run, study, seed):
        seen["peer"] = (run, study, seed)
        return []
    monkeypatch.setattr(measure_mod, "check_and_time", fake_check_and_time)
    monkeypatch.setattr(shapes, "peer_check_rows", fake_peer_rows)
    out = shapes.measure([], H100, run="r", study="shapes", reps=3, seed=7, timed=True,
                         progress=None)
    assert seen["peer"] == ("r", "shapes", 7) and seen["kw"]["reps"] == 3
    assert out.summary[0] == "case line" and out.summary[1].startswith(
        "cutile vs cuDNN (kernel time, l2 cold): geomean 0.500x")


def test_model_suite_halves_share_no_problem_and_the_tuner_saw_none():
    """The model families: both halves hold every family, no problem is in both, and none is a
    problem ``experiments.tuning.tune`` measures (``kernels.rules.config.representatives`` of every
    class, head dim and mask): the validation half is unseen by the tuning that set the defaults."""
    from experiments.registry.suites import MODEL_FAMILIES, model_problems
    from kernels.rules.config import ShapeClass, representatives
    rows = model_problems()
    halves = {h: {p for _, hh, p in rows if hh == h} for h in ("tuning", "validation")}
    assert not halves["tuning"] & halves["validation"]
    assert len(rows) == len({p for _, _, p in rows}) == sum(map(len, MODEL_FAMILIES.values()))
    for fam in MODEL_FAMILIES:
        assert {h for f, h, _ in rows if f == fam} == {"tuning", "validation"}, fam
    tuned = {p for c in ShapeClass for d in (64, 128) for causal in (False, True)
             for p in representatives(c, d, causal)}
    seen = {(p.B, p.H, p.H_kv, p.S_q, p.S_kv, p.D, p.causal) for p in tuned}
    assert not [p.label for _, _, p in rows
                if (p.B, p.H, p.H_kv, p.S_q, p.S_kv, p.D, p.causal) in seen]


def test_half_lines_read_only_the_models_study_rows():
    from experiments.registry.suites import model_problems
    _, _, p = next(r for r in model_problems() if r[1] == "validation")
    rows = [dict(r, study="models") for r in _rows({(p, "sdpa-cudnn"): [1.0],
                                                    (p, "cutile"): [2.0]})]
    lines = shapes.half_lines(rows)
    assert lines[0] == "validation half (1 of 16 problems timed):"
    assert lines[1].startswith("  cutile kernel vs cuDNN geomean 0.500x") and "bar" in lines[-1]
    assert shapes.half_lines([dict(r, study="shapes") for r in rows]) == []

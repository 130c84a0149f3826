"""The shape suite on the CPU: the shape classes and their per-class defaults (kernels.config), what
``attention()`` picks from them (kernels.backend), the shapes study's plan and summary
(experiments.registry.studies, experiments.speed.shapes) and ``experiments.tuning.tune --classes`` with a fake
measurement (correctness before ranking, atomic JSON that ``kernels.config`` reads back)."""
from __future__ import annotations

import json

import pytest

from cuda_baseline.source import SM90_CTAS_PER_SM
from experiments.registry.studies import get_study
from experiments.registry.suites import shapes_problems
from experiments.speed import shapes
from experiments.tuning import tune
from kernels import config
from kernels.choice import problem_config
from kernels.config import (
    UNMEASURED,
    KernelConfig,
    ShapeClass,
    parse,
    persistent_ctas,
    representative,
    representatives,
    shape_class,
)
from spec import Backend, CtaSchedule, Problem, ScanOrder, get_arch
from spec.problem import TileGrid, Tiles
from spec.schedules import ScheduleKind

H100 = get_arch("h100")


# -- classes ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("problem, cls", [
    (Problem(1, 16, 1024, 128, S_kv=16384, causal=True), ShapeClass.CROSS),
    (Problem(2, 32, 1000, 128, S_kv=1000, H_kv=8), ShapeClass.GQA),      # GQA before uneven
    (Problem(1, 4, 3000, 64, causal=True), ShapeClass.SMALL),           # 4 x 24 = 96 Q tiles
    (Problem(1, 16, 1024, 64), ShapeClass.SMALL),                       # 16 x 8 = 128: the edge
    (Problem(1, 17, 1024, 64), ShapeClass.SHORT),                       # 136 Q tiles
    (Problem(1, 4, 7000, 64, causal=True), ShapeClass.UNEVEN),          # 220 Q tiles
    (Problem(16, 16, 1000, 64), ShapeClass.UNEVEN),                     # uneven before short
    (Problem(32, 16, 2048, 64), ShapeClass.SHORT),
    (Problem(4, 16, 1024, 64), ShapeClass.SHORT),
    (Problem(4, 16, 512, 64), ShapeClass.TINY),                         # at most 512 keys
    (Problem(16, 16, 384, 128, causal=True), ShapeClass.TINY),
    (Problem(16, 16, 500, 64), ShapeClass.UNEVEN),                      # uneven before tiny
    (Problem(1, 16, 4096, 64), ShapeClass.LONG),
    (Problem(16, 16, 4096, 64), ShapeClass.LONG),
])
def test_shape_class_is_the_first_matching_rule(problem, cls):
    assert shape_class(problem) == cls


def test_every_suite_problem_falls_in_the_class_its_panel_names():
    want = {"shapes-bench": "long", "shapes-short": "short", "shapes-gqa": "gqa",
            "shapes-uneven": "uneven", "shapes-cross": "cross"}
    for panel, p in shapes_problems():
        # the uneven panel's one-wave problems (H=4 at S=1000/3000, H=12 at S=1000) are small
        small = p.B * p.H * -(-p.S_q // 128) <= 128
        # the short panel's S=512 problems are tiny
        tiny = panel == "shapes-short" and p.S_kv <= 512
        assert shape_class(p).value == ("small" if small and panel == "shapes-uneven"
                                        else "tiny" if tiny else want[panel]), (panel, p.label)
    assert {p.label for _, p in shapes_problems() if shape_class(p).value == "small"} >= {
        "b1h4s1000d128.fp16.causal", "b1h12s1000d64.fp16.causal", "b1h4s3000d128.fp16.causal"}


@pytest.mark.parametrize("cls", list(ShapeClass))
def test_representatives_are_in_their_class(cls):
    for D in (64, 128):
        for causal in (False, True):
            ps = representatives(cls, D, causal)
            assert representative(cls, D, causal) == ps[0] and len(set(ps)) == len(ps)
            for p in ps:
                assert shape_class(p) == cls and (p.D, p.causal) == (D, causal)


# -- the JSON: schema 2, schema 1 still read, class configs picked by problem_config --------------

BASE = {"d64.full": {"tile_m": 128, "tile_n": 128, "occupancy": 1, "worker_warps": 8,
                     "schedule": "grid"}}


def test_schema_1_reads_as_every_class_falling_back():
    got = parse({"schema": 1, "configs": BASE})
    assert got.base["d64.full"] == KernelConfig(128, 128, 1, 8, "grid")
    assert got.classes == {c: {} for c in ("cross", "gqa", "short", "small", "tiny", "uneven")}
    assert set(got.status.values()) == {UNMEASURED}


def test_committed_h100_file_is_schema_2_and_a_class_is_unmeasured_iff_it_has_no_config():
    data = json.loads((config.CONFIG_DIR / "h100.json").read_text())
    assert data["schema"] == 2
    got = parse(data)
    for name, status in got.status.items():
        # a class without a tuned config says so; one with a config is marked measured
        assert (status == UNMEASURED) == (not got.classes[name]), name
    assert any(got.classes.values())                 # the committed file holds tuned classes


@pytest.mark.parametrize("doc, words", [
    ({"schema": 3, "configs": {}}, "schema 3"),
    ({"schema": 2, "configs": {}, "classes": {"huge": {}}}, "unknown shape class huge"),
    ({"schema": 2, "configs": {}, "classes": {"long": {}}}, "unknown shape class long"),
    ({"schema": 2, "configs": {"d64.full": dict(BASE["d64.full"], schedule="wavefront")}},
     "schedule 'wavefront'"),
    ({"schema": 2, "configs": {"d64.full": {"tile_m": 64, "tiles": 3}}}, "tiles"),
])
def test_bad_config_documents_name_the_problem(doc, words):
    with pytest.raises(ValueError, match=words) as e:
        parse(doc, "h100.json")
    assert "experiments.tuning.tune" in str(e.value)


def _with_file(monkeypatch, tmp_path, doc):
    (tmp_path / "h100.json").write_text(json.dumps(doc))
    monkeypatch.setattr(config, "CONFIG_DIR", tmp_path)
    config.load.cache_clear()


@pytest.fixture
def fresh_cache():
    config.load.cache_clear()
    yield
    config.load.cache_clear()


def test_problem_config_takes_the_class_config_else_the_d_causal_default(
        monkeypatch, tmp_path, fresh_cache):
    short = {"tile_m": 64, "tile_n": 64, "occupancy": 2, "worker_warps": None,
             "schedule": "persistent", "ctas_per_sm": 2}
    _with_file(monkeypatch, tmp_path, {"schema": 2, "configs": BASE, "classes": {
        "short": {"status": "measured", "configs": {"d64.full": short}}}})
    short_p = Problem(16, 16, 1024, 64)
    assert problem_config("h100", short_p) == KernelConfig(**short)
    assert problem_config("h200", short_p) == KernelConfig(**short)          # same die
    base = KernelConfig(**BASE["d64.full"])
    assert problem_config("h100", Problem(1, 16, 16384, 64)) == base         # long
    assert problem_config("h100", Problem(1, 4, 7000, 64)) == base           # uneven: unmeasured
    # a class without this (D, causal) key falls back too, to the registry when the file lacks it
    assert problem_config("h100", Problem(16, 16, 1024, 64, causal=True)) == \
        config.default_config("h100", 64, True)


def test_compile_hints_follow_the_class_config(monkeypatch, tmp_path, fresh_cache):
    from kernels.backend import compile_hints
    from spec import Tiles, Variant
    short = {"tile_m": 128, "tile_n": 64, "occupancy": 1, "worker_warps": 8,
             "schedule": "grid"}
    _with_file(monkeypatch, tmp_path, {"schema": 2, "configs": BASE, "classes": {
        "short": {"configs": {"d64.full": short}}}})
    v = Variant(Backend.CUTILE, ScanOrder.linear(), CtaSchedule.grid(), Tiles(128, 64))
    assert compile_hints(v, Problem(16, 16, 1024, 64), "h100") == (1, 8)
    # the long class's default is 128x128 with 8 warps: other tiles get the registry's hints
    assert compile_hints(v, Problem(1, 16, 16384, 64), "h100") == (1, None)


def test_a_hint_tuned_for_other_tiles_is_not_carried_over(monkeypatch, tmp_path, fresh_cache):
    """The long d64.full default measured as 64x128 at occupancy 2: a 128x128 study build
    (longseq) gets the registry's occupancy 1 and 8 worker warps, not occupancy 2, which gave
    it a 48-64 B stack."""
    from kernels.backend import compile_hints
    from spec import Tiles, Variant
    _with_file(monkeypatch, tmp_path, {"schema": 2, "configs": {"d64.full": {
        "tile_m": 64, "tile_n": 128, "occupancy": 2, "worker_warps": None, "schedule": "grid"}}})
    p = Problem(1, 16, 131072, 64)
    own = Variant(Backend.CUTILE, ScanOrder.linear(), CtaSchedule.grid(), Tiles(64, 128))
    big = Variant(Backend.CUTILE, ScanOrder.sawtooth(), CtaSchedule.grid(), Tiles(128, 128))
    assert compile_hints(own, p, "h100") == (2, None)
    assert compile_hints(big, p, "h100") == (1, 8)
    assert compile_hints(Variant(Backend.CUTILE, ScanOrder.linear(), CtaSchedule.grid(),
                                 Tiles(128, 128), 2), p, "h100") == (2, 8)   # its own hint wins


def test_persistent_cta_count_hook():
    n_work = 16 * 8                     # B*H = 16 heads of 8 Q tiles: fewer items than SMs
    cfg = KernelConfig(128, 64, 2, None, "persistent")
    assert persistent_ctas(cfg, n_work, 132) == n_work
    assert persistent_ctas(cfg, 10_000, 132) == 264                         # occupancy's wave
    assert persistent_ctas(KernelConfig(128, 64, 2, None, "persistent", 1), 10_000, 132) == 132
    assert persistent_ctas(KernelConfig(128, 64, None, None, "persistent"), 10_000, 132) == 132


def test_default_schedule_of_each_named_schedule():
    from kernels.backend import default_schedule
    p = Problem(1, 16, 4096, 64, causal=True)
    for name, kind in (("grid", ScheduleKind.GRID), ("persistent", ScheduleKind.PERSISTENT),
                       ("snake", ScheduleKind.SNAKE), ("lpt", ScheduleKind.LONGEST_FIRST),
                       ("glpt", ScheduleKind.SECTIONED_LONGEST_FIRST)):
        cfg = KernelConfig(128, 64, 2, None, name)
        s = default_schedule(p, cfg, cfg.tiles, H100)
        assert s.kind == kind
        if s.is_persistent:
            assert s.num_ctas == 264
    # K+V of one head at S=4096, D=64, fp16: 1 MiB; half the H100's 50 MiB holds 25 -> 16 heads
    assert default_schedule(p, KernelConfig(128, 64, 2, None, "glpt"), Tiles(128, 64),
                            H100).section == 16


# -- the shapes study ----------------------------------------------------------------------------

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


# -- experiments.tuning.tune --classes with a fake measurement ---------------------------------------

def _fake_measure(wrong_fast: set, calls: list):
    """A measurement: candidates in ``wrong_fast`` fail the check (and would be fastest); the
    others take longer the larger their tiles; LPT is 10% faster than persistent, the snake deal
    1% slower, the sectioned grid 2% and the grid 5%."""
    def measure(arch, problem, cands, *, reps):
        calls.append((problem, tuple(cands), reps))

        def check(c):
            return (c not in wrong_fast), ("FAIL: max|err|=1" if c in wrong_fast else "ok")

        def time(passing):
            f = {"lpt": 0.9, "persistent": 1.0, "snake": 1.01, "glpt": 1.02, "grid": 1.05}
            return {c: (c.tile_m * c.tile_n / 64 * f[c.schedule], 0.01) for c in passing}
        return tune.rank(cands, check, time)
    return measure


def test_class_plan_takes_the_suite_keys_of_each_class():
    assert tune.class_plan(["gqa", "uneven"], None) == {
        "gqa": {"d128.causal": (128, True)},
        "uneven": {"d64.causal": (64, True), "d128.causal": (128, True)}}
    assert tune.class_plan(["short"], [(64, True)]) == {"short": {"d64.causal": (64, True)}}
    with pytest.raises(tune.UsageError, match="gqa: d128.causal"):
        tune.class_plan(["gqa"], [(64, False)])


def test_tune_classes_checks_first_and_writes_what_attention_reads(
        monkeypatch, tmp_path, fresh_cache, capsys):
    import spec
    lpt64 = tune.Candidate(64, 64, 2, None, "lpt")
    calls = []
    monkeypatch.setattr(spec, "detect", lambda: H100)
    monkeypatch.setattr(tune, "measure_problem", _fake_measure({lpt64}, calls))
    monkeypatch.setattr(tune, "_device_name", lambda: "fake H100")
    out = tmp_path / "h100.json"
    old = json.loads((config.CONFIG_DIR / "h100.json").read_text())
    out.write_text(json.dumps({k: v for k, v in old.items() if k not in ("classes", "rule")}
                              | {"schema": 1}))
    assert tune.main(["--arch", "h100", "--classes", "uneven,gqa", "--out", str(out),
                      "--force", "--reps", "3"]) == 0
    # each key measured once at each of its class's problems, with the LPT candidates
    assert sorted((p.label, r) for p, _, r in calls) == sorted(
        (p.label, 3) for c, d, k in (("uneven", 64, True), ("uneven", 128, True),
                                     ("gqa", 128, True))
        for p in representatives(ShapeClass(c), d, k))
    assert all({"lpt", "snake", "glpt"} <= {c.schedule for c in cands} for _, cands, _ in calls)
    doc = json.loads(out.read_text())
    assert doc["schema"] == 2 and doc["configs"] == old["configs"]       # the rest is kept
    got = parse(doc)
    # the fastest, 64x64 LPT (57.6 us), fails its check: the winner is the fastest passing one,
    # 64x64 persistent (64 us; sectioned grid 65.3, grid 67.2, 128x64 LPT 115.2)
    win = got.classes["uneven"]["d64.causal"]
    assert (win.tile_m, win.tile_n, win.schedule) == (64, 64, "persistent")
    assert "measured on fake H100: d128.causal, d64.causal" in got.status["uneven"]
    assert got.status["short"] == UNMEASURED and got.classes["short"] == {}
    trials = doc["classes"]["uneven"]["measured"]["d64.causal"]
    assert [t["passed"] for t in trials][-1] is False and trials[-1]["us"] is None
    # attention()'s choice: the class config for an uneven problem, the default for a long one
    monkeypatch.setattr(config, "CONFIG_DIR", tmp_path)
    config.load.cache_clear()
    assert problem_config("h100", Problem(1, 12, 7000, 64, causal=True)) == win
    assert problem_config("h100", Problem(1, 16, 16384, 64, causal=True)) == \
        KernelConfig(**old["configs"]["d64.causal"])
    assert "wrote" in capsys.readouterr().out


def test_a_class_key_where_nothing_passes_falls_back_and_says_so():
    cands = tune.class_candidates(H100, 128, True)
    trials = tune.rank(cands, lambda c: (False, "NaN"), lambda cs: pytest.fail("timed"))
    ps = representatives(ShapeClass.GQA, 128, True)
    doc = tune.document_classes(H100, "H100", {"gqa": {"d128.causal": (ps, trials)}}, None, 5)
    got = parse(doc)
    assert got.classes["gqa"] == {} and "no candidate passed for d128.causal" in got.status["gqa"]
    assert doc["classes"]["gqa"]["problems"] == {"d128.causal": [p.label for p in ps]}


def test_base_tune_keeps_the_class_blocks():
    a = tune.Candidate(64, 64, 2, None, "grid")
    trials = tune.rank([a], lambda c: (True, "ok"), lambda cs: {a: (1.0, 0.0)})
    existing = {"configs": {}, "classes": {"short": {"status": "measured on X", "configs": {
        "d64.full": a.config().to_json()}}}}
    doc = tune.document(H100, "H100", {"d64.full": (Problem(1, 16, 16384, 64),)},
                        {"d64.full": trials}, existing)
    assert doc["classes"]["short"]["status"] == "measured on X"
    assert parse(doc).classes["short"]["d64.full"] == a.config()


@pytest.mark.parametrize("argv, words", [
    (["--arch", "h100", "--classes", "huge", "--out", "X"], "unknown shape class"),
    (["--arch", "h100", "--classes", "gqa", "--only", "d64.full", "--out", "X"], "leaves no key"),
])
def test_tune_classes_refusals_are_one_line_exit_2(tmp_path, capsys, monkeypatch, argv, words):
    import spec
    monkeypatch.setattr(spec, "detect", lambda: H100)
    monkeypatch.setattr(tune, "measure_problem", lambda *a, **k: pytest.fail("measured"))
    argv = [str(tmp_path / "new.json") if a == "X" else a for a in argv]
    assert tune.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and words in err
    assert not list(tmp_path.iterdir())


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


def test_several_problems_rank_by_the_geometric_mean_and_a_failure_anywhere_fails():
    """A: 10 us at the small end, 100 at the large; B: 12 and 60; C: fastest at the small end
    and wrong at the large one. B wins (geomean 26.8 against 31.6 us); C fails, never timed
    again, and its verdict names the problem it failed on; D failed at the small end and was not
    built for the large one."""
    a, b, c, d = (tune.Candidate(m, 64, 2, None, "grid") for m in (16, 32, 64, 128))
    small, large = representatives(ShapeClass.UNEVEN, 64, True)
    times = {small: {a: 10.0, b: 12.0, c: 5.0}, large: {a: 100.0, b: 60.0}}
    wrong = {small: {d}, large: {c}}
    asked = []

    def measure(arch, problem, cands, *, reps):
        asked.append((problem, tuple(cands)))
        return tune.rank(cands, lambda x: (x not in wrong[problem], "ok" if x not in wrong[problem]
                                           else "FAIL: NaN"),
                         lambda ps: {x: (times[problem][x], 0.01) for x in ps})

    trials = tune.measure_problems(H100, (small, large), [a, b, c, d], reps=3, measure=measure)
    assert [t.candidate for t in trials] == [b, a, c, d]
    assert trials[0].us == pytest.approx((12.0 * 60.0) ** 0.5)
    assert trials[1].us == pytest.approx((10.0 * 100.0) ** 0.5)
    assert trials[0].per_problem == ((small.label, 12.0), (large.label, 60.0))
    assert not trials[2].passed and trials[2].verdict.startswith(large.label)
    assert not trials[3].passed and trials[3].verdict.startswith(small.label)
    assert asked[1] == (large, (a, b, c))                   # d, failed on the small end, not built
    assert tune._trial_json(trials[0])["us_per_problem"] == {small.label: 12.0, large.label: 60.0}


def test_model_suite_halves_share_no_problem_and_the_tuner_saw_none():
    """The model families: both halves hold every family, no problem is in both, and none is a
    problem ``experiments.tuning.tune`` measures (``kernels.config.representatives`` of every class,
    head dim and mask): the validation half is unseen by the tuning that set the defaults."""
    from experiments.registry.suites import MODEL_FAMILIES, model_problems
    from kernels.config import ShapeClass, representatives
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

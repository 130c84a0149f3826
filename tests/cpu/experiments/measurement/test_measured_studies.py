"""The GPU measurements that used to run beside the registry, checked on the CPU: the plans of the
bench and cuda-tiles studies, the resource rows every measured case writes, the two kernel
families' common interface, and experiments.tuning.tune's rule that a candidate is checked
before it is ranked (a wrong-but-fast candidate never wins) and that a config file is never
silently replaced."""
from __future__ import annotations

import inspect
import json
from dataclasses import fields

import pytest

from cuda_baseline.build.source import TESTED_TILES
from experiments.measurement.measure import RESOURCES, resource_rows
from experiments.registry.studies import STUDIES, get_study
from experiments.registry.suites import BENCH_SEQS
from experiments.tuning import tune
from spec import Backend, Case, CtaSchedule, Problem, ScanOrder, Tiles, Variant, get_arch
from spec.family import PREPARED_FIELDS, BadInput, Prepared

H100 = get_arch("h100")


# -- plans ----------------------------------------------------------------------------------------

def test_new_studies_are_registered_and_timed_beside_sdpa_without_ncu():
    for name in ("bench", "cuda-tiles", "drift"):
        assert name in STUDIES and STUDIES[name].measurable and not STUDIES[name].profiled
    assert get_study("bench").timed and get_study("cuda-tiles").timed


def test_bench_plan_is_each_familys_default_attention_configuration():
    cases = get_study("bench").plan(H100)
    shapes = {(c.problem.S_q, c.problem.D, c.problem.causal) for c in cases}
    assert shapes == {(s, d, c) for s in BENCH_SEQS for d in (64, 128) for c in (False, True)}
    from cuda_baseline.host.backend import default_variant as cuda_default
    from kernels.host.backend import default_variant as cutile_default
    for c in cases:
        p, v = c.problem, c.variant
        assert (p.B, p.H, p.dtype.value) == (1, 16, "fp16") and v.order == ScanOrder.linear()
        default = cutile_default if v.backend == Backend.CUTILE else cuda_default
        assert v == default(p, H100), c.id          # the build attention() runs
    assert len(cases) == 2 * len(shapes) and len({c.id for c in cases}) == len(cases)


def test_cuda_tiles_plan_sweeps_every_tested_tile_and_the_persistent_builds():
    from cuda_baseline.build.source import SM90_CTAS_PER_SM
    cases = get_study("cuda-tiles").plan(H100)
    assert all(c.variant.backend == Backend.CUDA and c.problem.S_q == 16384 for c in cases)
    for D in (64, 128):
        for causal in (False, True):
            mine = [c.variant for c in cases if (c.problem.D, c.problem.causal) == (D, causal)]
            grid = [v for v in mine if v.schedule == CtaSchedule.grid()]
            assert [v.tiles for v in grid] == list(TESTED_TILES)
            rest = {(v.order.label, v.schedule.label) for v in mine if v not in grid}
            p = 132 * SM90_CTAS_PER_SM[(H100.cuda_tiles, D)]   # one wave of resident CTAs
            assert p == (264 if D == 64 else 132)               # 128 x 64: 2 CTAs/SM at D = 64
            g = 4 if D == 64 else 2     # heads whose K+V (16K rows) fit half of 50 MiB, pow2
            assert rest == {("linear", f"static{p}"), ("sawtooth", f"static{p}"),
                            ("linear", f"static{p}h"), ("sawtooth", f"static{p}h"),
                            ("linear", f"lpt{p}"), ("linear", f"glpt{g}")}
            assert all(v.tiles == H100.cuda_tiles for v in mine if v not in grid)


# -- resource rows and the families' common interface ---------------------------------------------

def test_resource_rows_name_the_build_in_the_committed_metric_names():
    variant = Variant(Backend.CUTILE, ScanOrder.linear(), CtaSchedule.grid(), Tiles(128, 128), 1)
    case = Case(Problem(1, 16, 4096, 128), variant, 132, "p")
    prepared = Prepared(case.variant, case.problem, n_ctas=132, threads=256, registers=168,
                        local_bytes=0, smem_bytes=132152, ctas_per_sm=1, build="fmha_fwd_x")
    rows = resource_rows(case, prepared, run="r", study="bench", arch="h100")
    got = {r.metric: (r.value, r.unit) for r in rows}
    assert got == {"registers": (168, "register"), "local_bytes": (0, "byte"),
                   "smem_bytes": (132152, "byte"), "threads": (256, "thread"),
                   "ctas_per_sm": (1, "CTA")}
    assert all(r.note == "fmha_fwd_x" and r.variant == case.variant.id(case.problem)
               for r in rows)
    assert [m for m, _, _ in RESOURCES] == ["registers", "local_bytes", "smem_bytes", "threads",
                                            "ctas_per_sm"]


def test_both_families_prepare_the_same_fields_first():
    from cuda_baseline.host.backend import CudaFamily
    from cuda_baseline.host.backend import Prepared as CudaPrepared
    from kernels.host.backend import CutileFamily
    from kernels.host.backend import Prepared as CutilePrepared
    for prepared in (CutilePrepared, CudaPrepared):
        names = [f.name for f in fields(prepared)]
        assert tuple(names[:len(PREPARED_FIELDS)]) == PREPARED_FIELDS
    for fam in (CutileFamily, CudaFamily):
        assert fam("h100").requested_arch == "h100"
        assert all(callable(getattr(fam, m)) for m in ("prepare", "run", "trace"))
        assert inspect.signature(fam.trace).parameters["every"].default == 1
    # the cuTile trace build records visits and no timing: a stamp stride is refused up front
    with pytest.raises(BadInput, match="every=64"):
        CutileFamily("h100").trace(None, None, None, None, None, every=64)


# -- tune: correctness before rank ----------------------------------------------------------------

def _cands():
    return [tune.Candidate(64, 64, 2, None, "grid"), tune.Candidate(128, 64, 2, None, "grid"),
            tune.Candidate(128, 128, 1, 8, "grid")]


def test_a_wrong_but_fast_candidate_is_never_timed_nor_wins():
    fast_wrong, slow_ok, mid_ok = _cands()
    timed_with = []

    def check(c):
        return (c is not fast_wrong), ("FAIL: max|err|=1" if c is fast_wrong else "ok")

    def time(cands):
        timed_with.append(list(cands))
        speed = {fast_wrong: 1.0, slow_ok: 30.0, mid_ok: 20.0}
        return {c: (speed[c], 0.01) for c in cands}

    trials = tune.rank([fast_wrong, slow_ok, mid_ok], check, time)
    assert timed_with == [[slow_ok, mid_ok]]
    assert [t.candidate for t in trials] == [mid_ok, slow_ok, fast_wrong]
    assert tune.best(trials) == mid_ok
    assert trials[-1].us is None and not trials[-1].passed and "FAIL" in trials[-1].verdict


def test_no_passing_candidate_is_an_error_not_a_default():
    trials = tune.rank(_cands(), lambda c: (False, "NaN"), lambda cs: pytest.fail("timed"))
    with pytest.raises(tune.TuneError, match="no candidate passed"):
        tune.best(trials)


def test_document_keeps_other_keys_and_records_every_trial():
    a, b, c = _cands()
    trials = tune.rank([a, b, c], lambda x: (x is not a, "v"),
                       lambda xs: {x: (10.0 if x is c else 12.0, 0.0) for x in xs})
    old = {"configs": {"d64.causal": {"tile_m": 64}}, "measured": {}}
    doc = tune.document(H100, "H100", {"d64.full": tune.long_problems(64, False, None)},
                        {"d64.full": trials}, old)
    assert doc["configs"]["d64.causal"] == {"tile_m": 64}
    assert doc["problems"]["d64.full"] == ["b1h16s16384d64.fp16.full", "b1h16s131072d64.fp16.full"]
    assert doc["configs"]["d64.full"] == c.config().to_json()
    assert [m["passed"] for m in doc["measured"]["d64.full"]] == [True, True, False]
    assert doc["schema"] == 2 and "experiments.tuning.tune" in doc["source"]


def test_config_file_is_never_silently_replaced(tmp_path):
    path = tmp_path / "h100.json"
    tune.write_atomic(path, {"schema": 1, "configs": {}}, force=False)
    assert json.loads(path.read_text())["schema"] == 1
    with pytest.raises(tune.UsageError, match="--force"):
        tune.write_atomic(path, {"schema": 1, "configs": {"x": 1}}, force=False)
    assert json.loads(path.read_text())["configs"] == {}
    tune.write_atomic(path, {"schema": 1, "configs": {"x": 1}}, force=True)
    assert json.loads(path.read_text())["configs"] == {"x": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h100.json"]


def test_config_file_keeps_one_line_per_trial():
    doc = {"configs": {"d64.full": {"tile_m": 64}}, "empty": {}, "none": [],
           "measured": {"d64.full": [{"us": 1.5, "us_per_problem": {"a": 1.0}}, {"us": None}]}}
    text = tune.dumps(doc)
    assert json.loads(text) == doc
    lines = text.splitlines()
    assert '   {"us": 1.5, "us_per_problem": {"a": 1.0}},' in lines and '   {"us": null}' in lines
    assert '  "d64.full": {' in lines and '   "tile_m": 64' in lines      # the rest indented


@pytest.mark.parametrize("argv, words", [
    (["--arch", "a100"], "unknown arch"),
    (["--arch", "h100", "--only", "d32.full", "--out", "X"], "unknown key"),
    (["--arch", "h100", "--out", "X"], "run it on that machine"),
])
def test_tune_cli_refusals_are_one_line_exit_2(tmp_path, capsys, monkeypatch, argv, words):
    import spec
    monkeypatch.setattr(spec, "detect", lambda: None)
    argv = [str(tmp_path / "new.json") if a == "X" else a for a in argv]
    assert tune.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and words in err
    assert not list(tmp_path.iterdir())


def test_tune_cli_refuses_an_existing_file_without_force(tmp_path, capsys):
    out = tmp_path / "h100.json"
    out.write_text("{}")
    assert tune.main(["--arch", "h100", "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err and out.read_text() == "{}"

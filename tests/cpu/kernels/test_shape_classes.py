"""The shape classes on the CPU: the first matching rule, the suite's problems in the classes
their panels name, each class's representatives; the per-class defaults (kernels.rules.config: the
JSON's schemas and errors) and what ``attention()`` picks from them (kernels.rules.choice,
kernels.host.backend: the config, the compile hints, the persistent CTA count, the schedule)."""
from __future__ import annotations

import json

import pytest

from experiments.registry.suites import shapes_problems
from kernels.rules import config
from kernels.rules.choice import problem_config
from kernels.rules.config import (
    UNMEASURED,
    KernelConfig,
    ShapeClass,
    parse,
    persistent_ctas,
    representative,
    representatives,
    shape_class,
)
from spec import Backend, CtaSchedule, Problem, ScanOrder
from spec.problem import Tiles
from spec.schedules import ScheduleKind
from tests.cpu.kernels.shape_helpers import H100


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
    from kernels.host.backend import compile_hints
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
    from kernels.host.backend import compile_hints
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
    from kernels.host.backend import default_schedule
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

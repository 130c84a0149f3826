"""``experiments.tuning.tune --classes`` with a fake measurement: each class's keys, correctness
before ranking, the geometric mean over a class's problems, a key where nothing passes, the
atomic JSON that ``kernels.rules.config`` reads back, and its one-line refusals."""
from __future__ import annotations

import json

import pytest

from experiments.tuning import tune
from kernels.rules import config
from kernels.rules.choice import problem_config
from kernels.rules.config import UNMEASURED, KernelConfig, ShapeClass, parse, representatives
from spec import Problem
from tests.cpu.kernels.shape_helpers import H100


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

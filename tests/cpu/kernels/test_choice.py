"""The configuration rule (kernels.rules.choice): its work quantities, its model, its fit
(experiments.tuning.rulefit) regenerating the committed constants, and the sweep's command line."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from experiments.tuning import rulefit, sweep
from kernels.rules import choice
from kernels.rules.choice import BY_LABEL, CANDIDATES, Rule, load_rule, problem_config, quantities
from kernels.rules.config import CONFIG_DIR, KernelConfig, class_config
from spec import Problem
from spec.problem import TileGrid, Tiles


def test_item_steps_and_masked_fraction_count_whole_tiles():
    g = TileGrid(Problem(64, 12, 197, 64), Tiles(64, 128))
    assert list(g.item_steps()) == [2, 2, 2, 2]
    assert g.masked_fraction() == pytest.approx(1 - 197 * 197 / (256 * 256))
    assert TileGrid(Problem(1, 16, 4096, 64), Tiles(64, 128)).masked_fraction() == 0.0
    causal = TileGrid(Problem(1, 1, 256, 64, causal=True), Tiles(64, 64))
    assert list(causal.item_steps()) == [1, 2, 3, 4]
    # 10 tiles of 64x64 computed, 256*257/2 valid scores
    assert causal.masked_fraction() == pytest.approx(1 - 256 * 257 / 2 / (10 * 64 * 64))


def test_uniform_items_fill_the_sms_before_a_second_ctas_slot():
    cfg = KernelConfig(128, 64, 2, None, "persistent")
    # 180 items on 132 SMs: the busiest SM holds 2 and runs them side by side -> one wave
    q = quantities(Problem(2, 5, 2304, 64), cfg, 132)
    assert (q.items, q.per_sm, q.uniform) == (180, 2, True)
    assert choice.waves_and_steps(q) == (1.0, 36.0)
    # 360 items of 64 rows: 3 on the busiest SM, 2 at a time -> 1.5 waves of 18 steps
    q = quantities(Problem(2, 5, 2304, 64), KernelConfig(64, 128, 2, None, "grid"), 132)
    assert choice.waves_and_steps(q) == (1.5, 27.0)


def test_unequal_items_take_the_balanced_share_or_the_longest():
    cfg = KernelConfig(64, 128, 2, None, "glpt")
    q = quantities(Problem(1, 32, 8192, 128, causal=True), cfg, 132)
    w, s = choice.waves_and_steps(q)
    assert w == pytest.approx(q.items / q.slots)
    assert s == pytest.approx(32 * q.steps.sum() / q.slots)
    one = quantities(Problem(1, 1, 8192, 128, causal=True), cfg, 132)   # 128 items, 1 head
    assert choice.waves_and_steps(one) == (1.0, float(one.steps.max()))


def test_the_committed_rule_covers_every_key_with_candidates_only():
    rule = load_rule("h100")
    assert rule is not None and rule.num_sms == 132
    assert set(rule.constants) == {"d64.full", "d64.causal", "d128.full", "d128.causal"}
    for key, per in rule.constants.items():
        causal = key.endswith("causal")
        assert per and {BY_LABEL[lab] for lab in per} <= set(CANDIDATES[causal])
        assert all(a >= 0 and b > 0 for a, b in per.values())
    assert load_rule("h200") is not None                     # same die: the H100's file


@pytest.mark.parametrize("D,causal", [(64, False), (64, True), (128, False), (128, True)])
def test_the_chosen_time_grows_smoothly_with_the_problem(D, causal):
    """No class borders: the predicted time of the chosen configuration never drops when a
    problem grows (a larger S, B or H), so there is no cliff where a bigger problem would be
    predicted faster because it fell into another class."""
    rule = load_rule("h100")

    def best(p):
        return min(rule.predictions(p).values())
    lengths = list(range(100, 2200, 37)) + [4096, 7000, 9216, 16384]
    for B, H in ((1, 16), (8, 12), (64, 6)):
        times = [best(Problem(B, H, s, D, causal=causal)) for s in lengths]
        assert all(b >= a - 1e-9 for a, b in zip(times, times[1:])), (B, H)
    for S in (197, 1024):
        times = [best(Problem(b, 12, S, D, causal=causal)) for b in (1, 2, 4, 8, 16, 32, 64)]
        assert all(y >= x - 1e-9 for x, y in zip(times, times[1:]))


def test_problem_config_takes_the_rules_choice_and_falls_back_to_the_class():
    p = Problem(64, 12, 197, 64, dtype="bf16")
    rule = load_rule("h100")
    assert problem_config("h100", p) == rule.choose(p)
    empty = Rule({}, 132)
    assert empty.choose(p) is None
    assert class_config("h100", p) is not None


def test_parse_rule_names_an_unknown_configuration():
    with pytest.raises(ValueError, match="unknown configuration 99x99"):
        choice.parse_rule({"num_sms": 132, "constants": {"d64.full": {"99x99.occ1.grid": [1, 1]}}})
    assert choice.parse_rule(None) is None


def test_rulefit_regenerates_the_committed_configs_file(tmp_path, capsys):
    out = tmp_path / "h100.json"
    assert rulefit.main(["--arch", "h100", "--write", "--out", str(out)]) == 0
    assert out.read_bytes() == (CONFIG_DIR / "h100.json").read_bytes()
    text = capsys.readouterr().out
    assert "validation" in text and "[never fitted]" in text
    rule = json.loads(out.read_text())["rule"]
    assert all(k.startswith("h100/sweep-") for k in rule["inputs"])
    # the judged sets are never fitted: the fit's sizes count tuning and shapes problems only
    sets, times = rulefit.measurements(rulefit.sweep_runs("h100"))
    fit_n = sum(1 for lab, (s, p) in sets.items() if s in rulefit.FIT_SETS
                and (p.D, p.causal) == (128, True) and times.get(lab))
    assert max(e["n"] for e in rule["fit_error"]["d128.causal"].values()) == fit_n


def test_rulefit_validation_regret_is_what_the_report_says():
    sets, times = rulefit.measurements(rulefit.sweep_runs("h100"))
    reg = rulefit.regrets(load_rule("h100"), sets, times)
    val = [r for _, _, r, _ in reg["validation"]]
    assert len(val) == 16 and all(1.0 <= r < math.inf for r in val)   # every choice measured
    assert abs(math.exp(np.mean(np.log(val))) - 1.0252) < 5e-5   # REPORT section 11 states it


def test_rulefit_leave_one_out_prefers_the_prefetch_twins():
    """The candidate set with the next-item Q prefetch twins was adopted on its leave-one-out
    regret over the fit sets (never on the judged ones): it must stay the lower."""
    sets, times = rulefit.measurements(rulefit.sweep_runs("h100"))
    with_twins = rulefit.loo_regrets(sets, times, 132)
    saved = {k: tuple(v) for k, v in rulefit.CANDIDATES.items()}
    try:
        for k in saved:
            rulefit.CANDIDATES[k] = tuple(c for c in saved[k] if not c.tactic)
        without = rulefit.loo_regrets(sets, times, 132)
    finally:
        rulefit.CANDIDATES.update(saved)
    geo = lambda reg: math.exp(np.mean(np.log([r for v in reg.values() for r in v])))
    assert geo(with_twins) < geo(without)
    assert set(with_twins) == {"tuning", "shapes", "long"}


def test_rulefit_bad_input_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    out = tmp_path / "x.json"
    out.write_text("{}")
    assert rulefit.main(["--arch", "h100", "--write", "--out", str(out)]) == 2
    assert "never overwritten" in capsys.readouterr().err
    monkeypatch.setattr(rulefit, "sweep_runs",
                        lambda a: (_ for _ in ()).throw(rulefit.FitError("no registered sweep")))
    assert rulefit.main(["--arch", "h100"]) == 2
    assert rulefit.main(["--arch", "nope"]) == 2


def test_sweep_plan_and_bad_input(capsys):
    plan = sweep.sweep_problems(("models", "scan", "shapes", "long"))
    assert {s for s, _, _ in plan} == set(sweep.SETS)
    assert len([1 for s, _, _ in plan if s == "scan"]) == len(sweep.SCAN_LENGTHS)
    long = [p for s, _, p in plan if s == "long"]
    assert long == list(sweep.LONG_CAUSAL) and all(p.causal for p in long)
    assert ({p.S_q for p in long} == {16384, 32768, 65536, 131072}
            and {p.D for p in long} == {64, 128})
    # every long problem holds at least 4096 work items of 64 query rows
    assert min(p.B * p.H * p.S_q // 64 for p in long) >= 4096
    assert max(p.S_q for s, _, p in plan if s == "shapes") <= sweep.SHAPES_MAX_S
    assert sweep.shard(list(range(10)), "1/3") == [1, 4, 7]
    # one half of the model families alone: the two halves partition "models"
    halves = {h: sweep.sweep_problems((h,)) for h in ("tuning", "validation")}
    assert all({s for s, _, _ in v} == {h} for h, v in halves.items())
    assert sorted(map(str, halves["tuning"] + halves["validation"])) == sorted(
        map(str, sweep.sweep_problems(("models",))))
    assert sweep.main(["--arch", "h100", "--dry-run"]) == 0
    assert "problems" in capsys.readouterr().out
    assert sweep.main(["--arch", "h100", "--dry-run", "--sets", "long", "--tactics",
                       "--peers"]) == 0
    assert "8 problems (long)" in capsys.readouterr().out
    # the prefetch A/B's selection: the tuning half (never the validation half) and the shape
    # suite, D=64, at most 577 rows; only the prefetch trials join the rule's candidates
    argv = ["--arch", "h100", "--dry-run", "--sets", "tuning,shapes", "--head-dim", "64",
            "--max-s", "577", "--tactics", "prefetch", "--peers"]
    assert sweep.main(argv) == 0
    out = capsys.readouterr().out
    listed = [ln.split() for ln in out.splitlines()[1:]]
    assert listed and {s for s, _ in listed} == {"tuning", "shapes"}
    picked = [p for s, _, p in sweep.sweep_problems(("tuning", "shapes"))
              if p.D == 64 and max(p.S_q, p.S_kv) <= 577]
    assert [lb for _, lb in listed] == [p.label for p in picked]
    n = sum(len(sweep.candidates_for(None, p, "prefetch")) for p in picked)
    assert all(len(sweep.candidates_for(None, p, "prefetch")) > len(sweep.candidates_for(None, p))
               for p in picked)
    rows = n + 2 * len(picked)
    assert f"estimate {sweep.COMPILE_S + sweep.ROW_S * rows:.0f} s" in out
    for bad in (["--sets", "foo"], ["--shard", "3/3"], ["--reps", "0"], ["--head-dim", "0"],
                ["--sets", "long", "--max-s", "1000"]):
        assert sweep.main(["--arch", "h100", "--dry-run", *bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ")
    assert sweep.main(["--arch", "h100"]) == 2                 # no H100 here
    assert "run it on that machine" in capsys.readouterr().err


def test_longscan_plan_ratios_and_bad_input(capsys):
    from experiments.tuning import longscan
    assert longscan.main(["--arch", "h100", "--dry-run"]) == 0
    assert "8 problems" in capsys.readouterr().out
    for bad in (["--arch", "h100", "--reps", "2"], ["--arch", "nope"]):
        assert longscan.main(["--dry-run", *bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ")
    assert longscan.main(["--arch", "h100"]) == 2                 # no H100 here
    rows = [dict(problem=p, metric=m, who=w, ms=str(t))
            for p, m, w, t in (("a", longscan.KERNEL, "cutile", 1.0),
                               ("a", longscan.KERNEL, "sdpa-cudnn", 1.1),
                               ("b", longscan.KERNEL, "cutile", 2.0),
                               ("b", longscan.KERNEL, "sdpa-cudnn", 1.6),
                               ("c", longscan.KERNEL, "cutile", 1.0))]   # no peer: left out
    (line,) = longscan.ratio_lines(rows)
    assert "geomean 0.938x" in line and "min 0.800x (b)" in line and "n=2" in line

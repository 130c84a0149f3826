"""The backward rule's fit (experiments.tuning.backward_fit through ``python -m
experiments.tuning.rulefit --backward``): it recovers known constants, never fits a key on fewer
problems than it needs, regenerates the committed configs file and choice table byte for byte,
reads the tuning half only, and refuses bad input in one line."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from experiments.tuning import backward_fit, rulefit
from kernels.host import backward
from kernels.rules import backward_choice
from kernels.rules.backward_choice import CANDIDATES, work
from spec import Problem
from spec.records import read_bytes

NUM_SMS = 132
COMPARE = "profiles/cpu/backward-rule-20261127"


def _synthetic(truth, problems, noise=0.0, seed=0):
    """{(label, pass): {candidate: µs}} made by the model itself from ``truth`` constants."""
    rng = np.random.default_rng(seed)
    times = {}
    for lab, p in problems.items():
        key = f"d{p.D}.{'causal' if p.causal else 'full'}"
        for pass_ in backward.PASSES:
            times[lab, pass_] = {}
            for c, pc in CANDIDATES.items():
                a, b = truth[pass_][key][c]
                w, s = work(p, pass_, pc, NUM_SMS)
                times[lab, pass_][c] = (a * w + b * s) * (1 + noise * rng.standard_normal())
    return times


def _truth(keys):
    rng = np.random.default_rng(1)
    return {pass_: {k: {c: (float(rng.uniform(1, 20)), float(rng.uniform(0.3, 3)))
                        for c in CANDIDATES} for k in keys} for pass_ in backward.PASSES}


PROBLEMS = {p.label: p for p in [
    Problem(b, h, s, 64) for b, h, s in ((64, 12, 128), (16, 12, 512), (2, 20, 1024),
                                         (2, 8, 4096), (32, 12, 257), (8, 16, 1000))] + [
    Problem(b, h, s, 128, H_kv=hk, causal=True) for b, h, hk, s in (
        (4, 16, 1, 1000), (1, 64, 8, 2049), (2, 32, 8, 3001), (1, 32, 8, 7777))]}


def test_the_fit_recovers_known_constants():
    """Noise-free times from known constants: every candidate fastest somewhere gets its own α
    and β back; candidates fastest nowhere are dropped; 1% noise moves them a few percent."""
    truth = _truth(("d64.full", "d128.causal"))
    consts, errors, shared = backward_fit.fit(_synthetic(truth, PROBLEMS), NUM_SMS, PROBLEMS)
    assert shared == {"d64.causal": "d64.full", "d128.full": "d128.causal"}
    for pass_, per_key in consts.items():
        for key, per in per_key.items():
            assert per
            for c, (a, b) in per.items():
                ta, tb = truth[pass_][key][c]
                assert a == pytest.approx(ta, rel=1e-3, abs=1e-3)
                assert b == pytest.approx(tb, rel=1e-3)
                assert errors[pass_][key][c]["loo_max"] < 1e-3
    noisy, _, _ = backward_fit.fit(_synthetic(truth, PROBLEMS, 0.01), NUM_SMS, PROBLEMS)
    for pass_, per_key in noisy.items():
        for key, per in per_key.items():
            for c, (a, b) in per.items():
                assert b == pytest.approx(truth[pass_][key][c][1], rel=0.1)


def test_a_key_with_too_few_problems_is_never_fitted():
    """Two problems of a key: not fitted (shares the other mask's constants); one key with
    none at either mask: no constants at all (the base)."""
    few = {lab: p for lab, p in PROBLEMS.items() if p.D == 64}
    few |= dict([(lab, p) for lab, p in PROBLEMS.items() if p.D == 128][:2])
    truth = _truth(("d64.full", "d128.causal"))
    consts, errors, shared = backward_fit.fit(_synthetic(truth, few), NUM_SMS, few)
    assert set(consts["dkdv"]) == {"d64.full"} and set(errors["dq"]) == {"d64.full"}
    assert shared == {"d64.causal": "d64.full"}
    rule = backward_fit.rule_of(consts, shared, NUM_SMS)
    assert rule.choose(Problem(1, 32, 4096, 128, H_kv=8, causal=True)) is None


def test_nnls_rel_is_the_relative_least_squares_fit():
    rows = [((1.0, 10.0), 30.0), ((2.0, 40.0), 100.0), ((4.0, 100.0), 240.0)]
    a, b = backward_fit.nnls_rel(rows)
    assert (a, b) == (pytest.approx(10.0), pytest.approx(2.0))


def test_the_documented_commands_regenerate_the_committed_files(tmp_path, capsys):
    out, cmp_dir = tmp_path / "h100-backward.json", tmp_path / "cmp"
    assert rulefit.main(["--backward", "--arch", "h100", "--write", "--out", str(out),
                         "--compare", str(cmp_dir)]) == 0
    assert out.read_bytes() == backward_choice.CONFIG.read_bytes()
    from analysis.data.registry import open_path
    assert (cmp_dir / "choices.csv").read_bytes() == \
        read_bytes(open_path(f"{COMPARE}/choices.csv"))        # committed compressed
    text = capsys.readouterr().out
    assert "loo rms" in text and "regret on the tuning half" in text
    assert "validation half: 16 of 32 pass choices differ" in text
    doc = json.loads(out.read_text())
    assert all(k.startswith("h100/cutile-backward-tune-") for k in doc["rule"]["inputs"])
    assert rulefit.main(["--backward", "--arch", "h100"]) == 0


def test_the_fit_reads_the_tuning_half_only(monkeypatch):
    """Every fitted problem is a tuning one; a validation problem in the data is refused."""
    times, _ = backward_fit.measurements(backward_fit.tune_runs("h100"))
    halves = {h for lab, _ in times for h in [backward_fit.suite()[lab][0]]}
    assert halves == {"tuning"}
    _, errors, _ = backward_fit.fit(times, NUM_SMS)
    n = sum(1 for lab, pass_ in times if pass_ == "dq" and "d128" in lab and "causal" in lab)
    assert max(e["n"] for e in errors["dq"]["d128.causal"].values()) == n == 6
    real = backward_fit.suite()
    monkeypatch.setattr(backward_fit, "suite", lambda: {
        lab: ("validation" if "s128d64" in lab else h, f, p) for lab, (h, f, p) in real.items()})
    with pytest.raises(backward_fit.FitError, match="validation problem"):
        backward_fit.measurements(backward_fit.tune_runs("h100"))


def test_the_rule_regret_on_the_tuning_half_is_what_the_report_says():
    times, table = backward_fit.measurements(backward_fit.tune_runs("h100"))
    reg = backward_fit.regrets(backward_choice.fitted_rule(), table, times)
    for pass_, rs in reg.items():
        assert len(rs) == 17 and all(r[3] >= 1.0 and r[5] >= 1.0 for r in rs)
        geo = math.exp(np.mean([math.log(r[3]) for r in rs]))
        assert geo < 1.05, pass_
    loo = backward_fit.loo_regrets(times, NUM_SMS)
    for pass_, (rule_r, table_r) in loo.items():
        assert len(rule_r) == len(table_r) == 17
        assert all(1.0 <= r < math.inf for r in rule_r + table_r)
        # out of sample the rule does no worse than the table made the same way (the report)
        assert np.mean(np.log(rule_r)) <= np.mean(np.log(table_r)) + 1e-12, pass_


def test_bad_input_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    out = tmp_path / "x.json"
    out.write_text("{}")
    assert rulefit.main(["--backward", "--arch", "h100", "--write", "--out", str(out)]) == 2
    assert "never overwritten" in capsys.readouterr().err
    assert rulefit.main(["--backward", "--arch", "h100", "--compare", str(tmp_path)]) == 2
    assert rulefit.main(["--arch", "h100", "--compare", str(tmp_path / "n")]) == 2
    assert "--compare goes with --backward" in capsys.readouterr().err
    assert rulefit.main(["--backward", "--arch", "nope"]) == 2
    assert "unknown arch" in capsys.readouterr().err
    monkeypatch.setattr(backward_fit, "tune_runs", lambda a: (_ for _ in ()).throw(
        backward_fit.FitError("no registered cutile-backward-bench tuning run")))
    assert rulefit.main(["--backward", "--arch", "h100"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")


def test_a_registered_validation_run_fills_the_comparison_and_is_never_fitted(
        tmp_path, monkeypatch, capsys):
    """A non-tuning run's validation rows become the comparison's measured times and the
    report's validation regret; its tuning-half rows and the fit ignore it."""
    from types import SimpleNamespace

    import analysis.data.registry as reg
    run = tmp_path / "run"
    run.mkdir()
    label = "b8h16s1024d64.fp16.full"
    rows = ["family,half,problem,pass,config,kernel_ms,device"]
    for i, c in enumerate(CANDIDATES):
        for pass_ in backward.PASSES:
            rows.append(f"encoder,validation,{label},{pass_},{c},{0.1 + 0.01 * i},X")
            rows.append(f"encoder,tuning,b64h12s128d64.fp16.full,{pass_},{c},9.9,X")
    (run / "tune.csv").write_text("\n".join(rows) + "\n")
    real = reg.find

    def find(**kw):   # the registered validation runs replaced by this one
        extra = [SimpleNamespace(role="evidence", abspath=run, path="h100/x", sha256="0")]
        if kw.get("study") != backward_fit.STUDY or kw.get("role") not in (None, "evidence"):
            return real(**kw)
        return [r for r in real(**kw) if r.role == "tuning"] + extra
    monkeypatch.setattr(reg, "find", find)
    judged = backward_fit.validation_times("h100")
    assert set(judged) == {(label, "dkdv"), (label, "dq")}
    assert judged[label, "dq"]["m64n128ww8"] == pytest.approx(100.0)
    assert backward_fit.measurements(backward_fit.tune_runs("h100"))[0].keys().isdisjoint(judged)
    assert rulefit.main(["--backward", "--arch", "h100", "--compare", str(tmp_path / "c")]) == 0
    assert "regret on the validation half" in capsys.readouterr().out
    text = (tmp_path / "c" / "choices.csv").read_text().splitlines()
    mine = [r.split(",") for r in text if f",{label}," in r]
    assert len(mine) == 2 and all(r[9] and r[10] and r[11] == "m64n128ww8" for r in mine)

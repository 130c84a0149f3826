"""``python -m experiments.tuning.rulefit --backward --arch h100``: fit the backward rule's
constants (``kernels.rules.backward_choice``) on the registered pass timings of the model suite's
tuning half, judge them, and write them into ``kernels/rules/configs/<arch>-backward.json``.

    python -m experiments.tuning.rulefit --backward --arch h100           # fit and report
    python -m experiments.tuning.rulefit --backward --arch h100 --write [--out F]
    python -m experiments.tuning.rulefit --backward --arch h100 --compare DIR

Inputs: every registered ``tuning`` run of study ``cutile-backward-bench`` for the arch (its
``tune.csv``: kernel time of each pass of each candidate on each tuning problem), read through
the data door and pinned by hash in the rule block. Per pass, (D, causal) key and candidate, α
and β of ``predict = α·w + β·s`` are the non-negative least-squares fit of the relative error
(a 50 µs problem weighs as much as a 50 ms one). A candidate whose build spills at the key
(``kernels.rules.backward_choice.SPILLING``) or that is the fastest spill-free one on none of the
key's problems for that pass is dropped from it. A key with fewer than ``MIN_PROBLEMS`` problems
is not fitted (two constants on one point would fit it exactly and say nothing): it shares the
constants of the same D's other mask, and its problems are judged out of sample.

The report: per pass, key and candidate the fit's relative error in sample and leave-one-out
(each problem predicted from constants fitted without it); per pass the regret on the tuning
problems (the chosen candidate's measured time over the fastest measured), in sample and
leave-one-out, beside the regret of the per-key table the rule replaced (the run's
``choice.csv``; leave-one-out: the table made without the problem). ``--compare DIR`` writes
``choices.csv`` (every model-suite problem: each pass's table choice and the rule's, with
predictions, and measured times where the problem was measured) and a manifest. Where the two
choices differ on the validation half, the pass times are measured on a GPU by the bench's
``--phases tune --halves validation``; once that run is registered (any role but ``tuning``),
its validation rows fill those times and the report adds the validation regret, never fitted.
"""
from __future__ import annotations

import csv
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from kernels.host.backward import BASE, PASSES
from kernels.rules.backward_choice import (
    CANDIDATES,
    BackwardRule,
    allowed,
    cfg_label,
    parse_rule,
    work,
)
from kernels.rules.config import CONFIG_DIR, config_key
from spec import Problem

STUDY = "cutile-backward-bench"
KEYS = ("d64.full", "d64.causal", "d128.full", "d128.causal")
MIN_PROBLEMS = 3
SCHEMA = 2
COMPARE_FIELDS = ("half", "family", "problem", "pass", "table", "rule", "differ", "table_pred_us",
                  "rule_pred_us", "table_us", "rule_us", "fastest", "fastest_us")


class FitError(ValueError):
    pass


def tune_runs(arch: str):
    from analysis.data.registry import find
    runs = [e for e in find(role="tuning", arch=arch, study=STUDY)]
    if not runs:
        raise FitError(f"no registered {STUDY} tuning run for {arch}; measure one with python -m "
                       "experiments.speed.cutile_backward_bench --halves tuning --phases tune "
                       "--out DIR and register it (python -m analysis.data register DIR --role "
                       "tuning)")
    return runs


def suite() -> dict[str, tuple[str, str, Problem]]:
    """{problem label: (half, family, Problem)} of the model suite."""
    from experiments.registry.suites import model_problems
    return {p.label: (h, f, p) for f, h, p in model_problems()}


def measurements(runs) -> tuple[dict, dict]:
    """({(problem label, pass): {candidate: µs}}, {key: (dkdv label, dq label)} of the runs'
    per-key tables); a later run's rows replace an earlier one's."""
    from analysis.data.tables import csv_rows, stored
    known = suite()
    times: dict = defaultdict(dict)
    table: dict = {}
    for e in runs:
        for r in csv_rows(e.abspath / "tune.csv", typed=False):
            if r["problem"] not in known:
                raise FitError(f"profiles/{e.path}/tune.csv: problem {r['problem']} is not in the "
                               "model suite (experiments.registry.suites.model_problems)")
            if known[r["problem"]][0] != "tuning":
                raise FitError(f"profiles/{e.path}/tune.csv: {r['problem']} is a validation "
                               "problem; the rule is fitted on the tuning half only")
            if r["config"] in CANDIDATES and r["pass"] in PASSES:
                times[r["problem"], r["pass"]][r["config"]] = float(r["kernel_ms"]) * 1e3
        choice = stored(e.abspath, "choice.csv")
        for r in csv_rows(choice, typed=False) if choice else ():
            table[config_key(int(r["D"]), r["causal"] == "True")] = (r["dkdv"], r["dq"])
    return dict(times), table


def validation_times(arch: str) -> dict:
    """{(problem label, pass): {candidate: µs}} of the validation-half rows of every registered
    run of the study that is not a tuning run (the rule's judges, never fitted)."""
    from analysis.data.registry import find
    from analysis.data.tables import csv_rows, stored
    known = suite()
    times: dict = defaultdict(dict)
    for e in find(arch=arch, study=STUDY):
        path = None if e.role == "tuning" else stored(e.abspath, "tune.csv")
        for r in csv_rows(path, typed=False) if path else ():
            if r["half"] == "validation" and r["problem"] in known and r["pass"] in PASSES \
                    and r["config"] in CANDIDATES:
                times[r["problem"], r["pass"]][r["config"]] = float(r["kernel_ms"]) * 1e3
    return dict(times)


def nnls_rel(rows: list[tuple[tuple[float, float], float]]) -> tuple[float, float]:
    """(α, β) >= 0 minimising Σ ((α·w + β·s) / t − 1)² over rows ((w, s), t)."""
    from scipy.optimize import nnls
    X = np.array([[w / t, s / t] for (w, s), t in rows])
    (a, b), _ = nnls(X, np.ones(len(rows)))
    return float(a), float(b)


def _rel(ab, rows) -> list[float]:
    return [(ab[0] * w + ab[1] * s) / t - 1.0 for (w, s), t in rows]


def _stats(rel: list[float]) -> tuple[float, float]:
    return (round(float(np.sqrt(np.mean(np.square(rel)))), 4),
            round(float(np.max(np.abs(rel))), 4))


def key_problems(times: dict, problems: dict[str, Problem]) -> dict[str, list]:
    """{key: [(label, Problem)]} of the measured problems."""
    out = defaultdict(list)
    for lab in sorted({lab for lab, _ in times}):
        p = problems[lab]
        out[config_key(p.D, p.causal)].append((lab, p))
    return dict(out)


def fit(times: dict, num_sms: int, problems: dict[str, Problem] | None = None
        ) -> tuple[dict, dict, dict]:
    """(constants {pass: {key: {label: (α, β)}}}, errors {pass: {key: {label: {n, rms, max,
    loo_rms, loo_max}}}}, shared {key: source key}) of ``times`` ({(label, pass): {candidate:
    µs}}); ``problems`` maps the labels (default: the model suite's)."""
    if problems is None:
        problems = {lab: p for lab, (_, _, p) in suite().items()}
    probs = key_problems(times, problems)
    consts: dict = {p: {} for p in PASSES}
    errors: dict = {p: {} for p in PASSES}
    fitted = [k for k in KEYS if len(probs.get(k, ())) >= MIN_PROBLEMS]
    for pass_ in PASSES:
        for key in fitted:
            kp = probs[key]
            ok = allowed(pass_, kp[0][1].D, kp[0][1].causal)
            fastest = {min((c for c in times[lab, pass_] if c in ok), key=times[lab, pass_].get)
                       for lab, _ in kp}
            consts[pass_][key], errors[pass_][key] = {}, {}
            for label, pc in CANDIDATES.items():
                if label not in fastest:
                    continue
                rows = [(work(p, pass_, pc, num_sms), times[lab, pass_][label])
                        for lab, p in kp if label in times[lab, pass_]]
                ab = nnls_rel(rows)
                loo = [_rel(nnls_rel(rows[:i] + rows[i + 1:]), [rows[i]])[0]
                       for i in range(len(rows))]
                consts[pass_][key][label] = (round(ab[0], 4), round(ab[1], 5))
                rms, mx = _stats(_rel(ab, rows))
                loo_rms, loo_max = _stats(loo)
                errors[pass_][key][label] = {"n": len(rows), "rms": rms, "max": mx,
                                             "loo_rms": loo_rms, "loo_max": loo_max}
    shared = {}
    for key in KEYS:
        if key in fitted:
            continue
        d, mode = key.split(".")
        other = f"{d}.{'full' if mode == 'causal' else 'causal'}"
        if other in fitted:
            shared[key] = other
    return consts, errors, shared


def rule_of(consts: dict, shared: dict, num_sms: int) -> BackwardRule:
    return parse_rule({"num_sms": num_sms, "constants": consts, "shared": shared})


def table_choice(table: dict, p: Problem) -> dict[str, str]:
    """{pass: label} of the per-key table the rule replaces (BASE where it had no key)."""
    labels = table.get(config_key(p.D, p.causal)) or (cfg_label(BASE),) * 2
    return dict(zip(PASSES, labels))


def regrets(rule: BackwardRule, table: dict, times: dict) -> dict:
    """{pass: [(problem, key, rule label, rule regret, table label, table regret, fastest)]}
    over the measured problems: a choice's measured time over the fastest measured."""
    known = suite()
    out = defaultdict(list)
    for (lab, pass_), t in sorted(times.items()):
        p = known[lab][2]
        fastest = min(t, key=t.get)
        mine = rule.choose_pass(p, pass_)
        old = table_choice(table, p)[pass_]
        out[pass_].append((lab, config_key(p.D, p.causal), mine,
                           t.get(mine, math.inf) / t[fastest], old,
                           t.get(old, math.inf) / t[fastest], fastest))
    return dict(out)


def loo_regrets(times: dict, num_sms: int) -> dict[str, tuple[list[float], list[float]]]:
    """{pass: (rule regrets, table regrets)}: each measured problem chosen without it, by the
    rule fitted on the others (its constants and candidate set) and by the table made from the
    others (the key's least geometric-mean candidate; the base where the key had no other
    problem): the tuning half's own out-of-sample judge of both."""
    known = suite()
    out: dict = {p: ([], []) for p in PASSES}
    for lab in sorted({lab for lab, _ in times}):
        p = known[lab][2]
        rest = {k: v for k, v in times.items() if k[0] != lab}
        consts, _, shared = fit(rest, num_sms)
        rule = rule_of(consts, shared, num_sms)
        for pass_ in PASSES:
            t = times[lab, pass_]
            mine = rule.choose_pass(p, pass_) or cfg_label(BASE)
            logs = defaultdict(list)
            for (other, ps), tt in rest.items():
                q = known[other][2]
                if ps == pass_ and (q.D, q.causal) == (p.D, p.causal):
                    for c, us in tt.items():
                        logs[c].append(math.log(us))
            old = min(logs, key=lambda c: sum(logs[c]) / len(logs[c])) if logs \
                else cfg_label(BASE)
            out[pass_][0].append(t.get(mine, math.inf) / min(t.values()))
            out[pass_][1].append(t.get(old, math.inf) / min(t.values()))
    return out


def _geo(xs) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs))


def report(consts: dict, errors: dict, shared: dict, reg: dict, rule: BackwardRule,
           times: dict, loo: dict | None = None) -> list[str]:
    lines = ["fit (relative error on the tuning half; loo: each problem predicted by constants "
             "fitted without it):"]
    for pass_ in PASSES:
        for key, per in errors[pass_].items():
            for label, e in per.items():
                a, b = consts[pass_][key][label]
                lines.append(f"  {pass_:4s} {key:11s} {label:11s} n={e['n']:2d} alpha {a:7.2f} us "
                             f"beta {b:6.3f} us/step  rms {e['rms']:.3f} max {e['max']:.3f}  "
                             f"loo rms {e['loo_rms']:.3f} max {e['loo_max']:.3f}")
    known = suite()
    for key, src in shared.items():
        rel = []
        for (lab, pass_), t in sorted(times.items()):
            p = known[lab][2]
            if config_key(p.D, p.causal) == key:
                pred = rule.predictions(p, pass_)
                rel += [f"{pass_} {c} {pred[c] / t[c] - 1:+.2f}" for c in pred if c in t]
        lines.append(f"  {key}: fewer than {MIN_PROBLEMS} problems, shares {src}'s constants; "
                     "its own problems, out of sample: " + (", ".join(rel) or "none measured"))
    lines.append("regret on the tuning half (chosen candidate's measured time / the fastest):")
    for pass_, rs in reg.items():
        lines.append(f"  {pass_:4s} rule  geomean {_geo([r[3] for r in rs]):.4f} max "
                     f"{max(r[3] for r in rs):.3f}   table geomean "
                     f"{_geo([r[5] for r in rs]):.4f} max {max(r[5] for r in rs):.3f}  "
                     f"(n={len(rs)})")
        if loo:
            lo, lt = loo[pass_]
            lines.append(f"       leave-one-out (each problem chosen without it): rule geomean "
                         f"{_geo(lo):.4f} max {max(lo):.3f}   table geomean {_geo(lt):.4f} "
                         f"max {max(lt):.3f}")
        for lab, key, mine, r, old, ro, fastest in rs:
            if max(r, ro) > 1.05:
                lines.append(f"    {lab:36s} rule {mine:11s} {r:.3f}  table {old:11s} {ro:.3f}  "
                             f"fastest {fastest}")
    return lines


def compare_rows(rule: BackwardRule, table: dict, times: dict) -> list[tuple]:
    """``COMPARE_FIELDS`` rows for every model-suite problem and pass."""
    from experiments.registry.suites import model_problems
    out = []
    for fam, half, p in model_problems():
        old = table_choice(table, p)
        for pass_ in PASSES:
            pred = rule.predictions(p, pass_)
            mine = rule.choose_pass(p, pass_) or cfg_label(BASE)
            t = times.get((p.label, pass_), {})
            fastest = min(t, key=t.get) if t else ""

            def f(x):
                return "" if x is None else f"{x:.2f}"
            out.append((half, fam, p.label, pass_, old[pass_], mine, int(old[pass_] != mine),
                        f(pred.get(old[pass_])), f(pred.get(mine)), f(t.get(old[pass_])),
                        f(t.get(mine)), fastest, f(t.get(fastest)) if t else ""))
    return out


def rule_block(arch_name: str, runs, consts: dict, errors: dict, shared: dict,
               num_sms: int) -> dict:
    return {"source": f"python -m experiments.tuning.rulefit --backward --arch {arch_name} --write "
                      "(nnls on the relative error over the model suite's tuning half)",
            "inputs": {e.path: e.sha256 for e in runs}, "num_sms": num_sms,
            "min_problems": MIN_PROBLEMS,
            "constants": {p: {k: {lab: list(v) for lab, v in per.items()}
                              for k, per in consts[p].items()} for p in PASSES},
            "shared": shared, "fit_error": errors}


def document(arch_name: str, device: str, block: dict) -> dict:
    return {"schema": SCHEMA, "arch": arch_name, "device": device,
            "about": "The cuTile backward's default (kernels.rules.backward_choice): per pass, the "
                     "candidate of least predicted time under the fitted constants below.",
            "rule": block}


def write_compare(out: Path, rows: list[tuple], runs, arch_name: str) -> None:
    """``out/choices.csv`` and ``out/manifest.json`` (refuses an existing directory)."""
    if out.exists():
        raise FitError(f"{out} exists; runs are never overwritten: pass another directory")
    tmp = out.with_name(f".{out.name}.partial")
    tmp.mkdir(parents=True)
    with open(tmp / "choices.csv", "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(COMPARE_FIELDS)
        w.writerows(rows)
    (tmp / "manifest.json").write_text(json.dumps(
        {"schema": 1, "study": "backward-rule-choices", "source": "predicted", "arch": arch_name,
         "command": f"python -m experiments.tuning.rulefit --backward --arch {arch_name} "
                    f"--compare {out}",
         "inputs": {e.path: e.sha256 for e in runs}}, indent=1) + "\n")
    tmp.rename(out)


def main(args) -> int:
    """The ``--backward`` path of ``experiments.tuning.rulefit`` (its parsed arguments)."""
    from analysis.data.registry import DatasetError
    from spec import get_arch
    from spec.arch import UnknownArch

    from .tune import write_atomic
    try:
        arch = get_arch(args.arch)
        dest = CONFIG_DIR / f"{arch.name}-backward.json"
        out = args.out or dest
        if args.out is not None and args.out.exists():
            raise FitError(f"{args.out} exists; runs are never overwritten: pass another --out")
        if args.compare is not None and args.compare.exists():
            raise FitError(f"{args.compare} exists; runs are never overwritten: pass another "
                           "directory")
        runs = tune_runs(arch.name)
        times, table = measurements(runs)
    except (UnknownArch, FitError, DatasetError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    consts, errors, shared = fit(times, arch.num_sms)
    rule = rule_of(consts, shared, arch.num_sms)
    for line in report(consts, errors, shared, regrets(rule, table, times), rule, times,
                       loo_regrets(times, arch.num_sms)):
        print(line)
    judged = validation_times(arch.name)
    if judged:
        for pass_, rs in regrets(rule, table, judged).items():
            lines = [f"  {pass_:4s} rule  geomean {_geo([r[3] for r in rs]):.4f} max "
                     f"{max(r[3] for r in rs):.3f}   table geomean {_geo([r[5] for r in rs]):.4f}"
                     f" max {max(r[5] for r in rs):.3f}  (n={len(rs)})  [never fitted]"]
            print(f"regret on the validation half ({pass_}):\n" + "\n".join(lines))
    rows = compare_rows(rule, table, {**times, **judged})
    diff = [r for r in rows if r[0] == "validation" and r[6]]
    print(f"validation half: {len(diff)} of {sum(r[0] == 'validation' for r in rows)} pass "
          "choices differ from the table's (never fitted; "
          + ("measured: registered runs" if judged else "measure them") + "):")
    for r in diff:
        print(f"  {r[2]:36s} {r[3]:4s} table {r[4]:11s} ({r[7]} us)  rule {r[5]:11s} ({r[8]} us)")
    if args.write:
        from analysis.data.tables import read_manifest
        device = read_manifest(runs[-1].abspath).get("device", "")
        write_atomic(out, document(arch.name, device,
                                   rule_block(arch.name, runs, consts, errors, shared,
                                              arch.num_sms)), force=True)
        print(f"wrote {out}")
    if args.compare is not None:
        write_compare(args.compare, rows, runs, arch.name)
        print(f"wrote {args.compare}/choices.csv")
    return 0

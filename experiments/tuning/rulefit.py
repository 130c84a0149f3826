"""``python -m experiments.tuning.rulefit --arch h100``: fit the configuration rule's constants
(``kernels.rules.choice``) on the registered sweep runs, judge it on the problems it never saw, and
write it into ``kernels/rules/configs/<arch>.json``.

    python -m experiments.tuning.rulefit --arch h100                 # fit and report, write nothing
    python -m experiments.tuning.rulefit --arch h100 --write [--out F]

Inputs: every registered ``tuning`` run of study ``sweep`` for the arch (``python -m
analysis.data list``), read through the data door and pinned by hash in the rule block. Per (D,
causal) key and configuration, α and β of ``predict = α·w + β·s`` (``kernels.rules.choice
.waves_and_steps``) are the non-negative least-squares fit of the *relative* error over the fit
sets (``tuning``: the tuning half of the model families; ``shapes``: the shape suite;
``long``: the long-causal scan, S 16K..128K), so a 50 µs problem weighs as much as a 50 ms one. A
configuration that is the fastest on none of a key's fit problems is dropped from that key (it would
only be chosen by a prediction error).

The report: per key and configuration the fit's size and its relative error (rms, max); then per
set the rule's regret, the chosen configuration's measured time over the fastest measured one
(geometric mean and max), with every problem whose regret exceeds 5%, and for the fit sets the
leave-one-out regret (each problem chosen for by a rule fitted without it). ``validation`` (the
model families' other half) and ``scan`` (lengths across the old class borders) are never fitted:
their regret is the rule's out-of-sample error.

``--write`` replaces only the file's ``rule`` block (written atomically; the tuned classes stay as
the fallback for keys without constants). Re-running it on the same registered runs gives the
same bytes (a CPU test checks the committed file).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from kernels.rules.choice import (
    BY_LABEL,
    CANDIDATES,
    Rule,
    config_label,
    quantities,
    waves_and_steps,
)
from kernels.rules.config import CONFIG_DIR, config_key
from spec import Problem, get_arch, known_archs
from spec.arch import UnknownArch

FIT_SETS = ("tuning", "shapes", "long")
JUDGED_SETS = ("validation", "scan")
KEYS = ("d64.full", "d64.causal", "d128.full", "d128.causal")


class FitError(ValueError):
    pass


def sweep_runs(arch: str):
    from analysis.data.registry import find
    runs = find(role="tuning", arch=arch, study="sweep")
    if not runs:
        raise FitError(f"no registered sweep run for {arch}; measure one with python -m "
                       f"experiments.tuning.sweep --arch {arch} and register it "
                       "(python -m analysis.data register DIR --role tuning)")
    return runs


def measurements(runs) -> tuple[dict, dict]:
    """({problem label: (set, Problem)}, {problem label: {configuration label: median us}})
    of the passing trials of ``runs`` (a problem measured twice keeps its last run's)."""
    from analysis.data.tables import csv_rows
    sets, times = {}, defaultdict(dict)
    for e in runs:
        for r in csv_rows(e.abspath / "trials.csv.gz", typed=False):
            p = Problem(int(r["B"]), int(r["H"]), int(r["S_q"]), int(r["D"]),
                        S_kv=int(r["S_kv"]), H_kv=int(r["H_kv"]), dtype=r["dtype"],
                        causal=r["causal"] == "1")
            sets[r["problem"]] = (r["set"], p)
            if r["passed"] == "1" and r["config"] in BY_LABEL:
                times[r["problem"]][r["config"]] = float(r["us"])
    return sets, dict(times)


def fit(sets: dict, times: dict, num_sms: int) -> tuple[dict, dict]:
    """(constants {key: {label: (α, β)}}, fit errors {key: {label: {n, rms, max}}})."""
    from scipy.optimize import nnls
    consts, errors = {}, {}
    for key in KEYS:
        probs = [(lab, p) for lab, (s, p) in sets.items()
                 if s in FIT_SETS and config_key(p.D, p.causal) == key and times.get(lab)]
        if not probs:
            continue
        fastest = {min(times[lab], key=times[lab].get) for lab, _ in probs}
        causal = probs[0][1].causal
        consts[key], errors[key] = {}, {}
        for cfg in CANDIDATES[causal]:
            label = config_label(cfg)
            if label not in fastest:
                continue
            rows = [(waves_and_steps(quantities(p, cfg, num_sms)), times[lab][label])
                    for lab, p in probs if label in times[lab]]
            X = np.array([[w / t, s / t] for (w, s), t in rows])
            (a, b), _ = nnls(X, np.ones(len(rows)))
            rel = X @ np.array([a, b]) - 1.0
            consts[key][label] = (round(float(a), 4), round(float(b), 5))
            rms = float(np.sqrt(np.mean(rel ** 2)))
            errors[key][label] = {"n": len(rows), "rms": round(rms, 4),
                                  "max": round(float(np.max(np.abs(rel))), 4)}
    return consts, errors


def regrets(rule: Rule, sets: dict, times: dict) -> dict[str, list[tuple[str, str, float, str]]]:
    """{set: [(problem, chosen, regret, fastest)]}: chosen's measured time over the fastest's."""
    out = defaultdict(list)
    for lab, (s, p) in sets.items():
        t = times.get(lab)
        cfg = rule.choose(p)
        if not t or cfg is None:
            continue
        chosen = config_label(cfg)
        fastest = min(t, key=t.get)
        out[s].append((lab, chosen, t[chosen] / t[fastest] if chosen in t else math.inf, fastest))
    return dict(out)


def loo_regrets(sets: dict, times: dict, num_sms: int) -> dict[str, list[float]]:
    """{fit set: [regret]}: each fit problem chosen for by a rule fitted without it (the rule's
    error on a problem it never saw, within the fit sets; how candidate sets and model forms are
    compared, never by the judged sets)."""
    out = defaultdict(list)
    for lab, (s, p) in sets.items():
        t = times.get(lab)
        if s not in FIT_SETS or not t:
            continue
        cfg = Rule(fit({k: v for k, v in sets.items() if k != lab}, times, num_sms)[0],
                   num_sms).choose(p)
        if cfg is not None and config_label(cfg) in t:
            out[s].append(t[config_label(cfg)] / min(t.values()))
    return dict(out)


def class_regrets(arch_name: str, sets: dict, times: dict) -> dict[str, list[float]]:
    """{set: [regret]} of the shape classes' choice (``kernels.rules.config.class_config``, what
    attention() ran before the rule) where that configuration was measured."""
    from kernels.rules.config import class_config
    out = defaultdict(list)
    for lab, (s, p) in sets.items():
        t = times.get(lab)
        chosen = config_label(class_config(arch_name, p))
        if t and chosen in t:
            out[s].append(t[chosen] / min(t.values()))
    return dict(out)


def report(errors: dict, consts: dict, reg: dict, old: dict | None = None,
           loo: dict | None = None) -> list[str]:
    lines = ["fit (relative error over the fit sets: " + ", ".join(FIT_SETS) + "):"]
    for key, per in errors.items():
        for label, e in per.items():
            a, b = consts[key][label]
            lines.append(f"  {key:12s} {label:26s} n={e['n']:3d}  alpha {a:6.2f} us  beta "
                         f"{b:6.3f} us/step  rms {e['rms']:.3f}  max {e['max']:.3f}")
    lines.append("regret (chosen configuration's measured time / the fastest measured):")
    for s in FIT_SETS + JUDGED_SETS:
        rs = [x for x in reg.get(s, []) if math.isfinite(x[2])]
        unmeasured = [x for x in reg.get(s, []) if not math.isfinite(x[2])]
        if unmeasured:
            lines.append(f"  {s:10s} {len(unmeasured)} problem(s) chose a configuration never "
                         "measured on them (left out of the regret): "
                         + ", ".join(f"{lab} ({chosen})" for lab, chosen, _, _ in unmeasured))
        if not rs:
            continue
        g = math.exp(sum(math.log(r) for _, _, r, _ in rs) / len(rs))
        worst = max(rs, key=lambda x: x[2])
        lines.append(f"  {s:10s} n={len(rs):3d}  geomean {g:.4f}  max {worst[2]:.3f} ({worst[0]})"
                     + ("" if s in FIT_SETS else "  [never fitted]"))
        for lab, chosen, r, fastest in sorted(rs, key=lambda x: -x[2]):
            if r > 1.05:
                lines.append(f"    {lab:40s} chose {chosen:26s} {r:.3f}x the fastest ({fastest})")
        lo = (loo or {}).get(s)
        if lo:
            lines.append(f"    leave-one-out (each problem by a rule fitted without it): geomean "
                         f"{math.exp(sum(map(math.log, lo)) / len(lo)):.4f}, max {max(lo):.3f}")
        o = (old or {}).get(s)
        if o:
            lines.append(f"    the shape classes' choice on the same set: geomean "
                         f"{math.exp(sum(map(math.log, o)) / len(o)):.4f}, max {max(o):.3f} "
                         f"(n={len(o)}: the problems where it was a measured configuration)")
    return lines


def rule_block(arch_name: str, runs, consts: dict, errors: dict, num_sms: int) -> dict:
    return {"source": f"python -m experiments.tuning.rulefit --arch {arch_name} --write "
                      "(nnls on the relative error; fit sets: " + ", ".join(FIT_SETS) + ")",
            "inputs": {e.path: e.sha256 for e in runs},
            "num_sms": num_sms, "constants": {k: {lab: list(v) for lab, v in per.items()}
                                              for k, per in consts.items()},
            "fit_error": errors}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.tuning.rulefit",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, help=f"one of {', '.join(known_archs())}")
    ap.add_argument("--write", action="store_true", help="write the rule block")
    ap.add_argument("--out", type=Path, help="configs JSON to write (default "
                    "kernels/rules/configs/<arch>.json, with --backward <arch>-backward.json; "
                    "another path gets a copy of it with the rule)")
    ap.add_argument("--backward", action="store_true", help="fit the backward's rule "
                    "(experiments.tuning.backward_fit) instead of the forward's")
    ap.add_argument("--compare", type=Path, metavar="DIR", help="with --backward: write each "
                    "model-suite problem's table and rule choices to DIR/choices.csv")
    args = ap.parse_args(argv)
    if args.backward:
        from .backward_fit import main as backward_main
        return backward_main(args)
    if args.compare is not None:
        print("error: --compare goes with --backward", file=sys.stderr)
        return 2
    from analysis.data.registry import DatasetError

    from .tune import write_atomic
    try:
        arch = get_arch(args.arch)
        src = CONFIG_DIR / f"{arch.name}.json"
        out = args.out or src
        if args.write and not src.exists():
            raise FitError(f"{src} does not exist; tune the arch first (python -m "
                           f"experiments.tuning.tune --arch {arch.name})")
        if args.out is not None and args.out.exists():
            raise FitError(f"{args.out} exists; runs are never overwritten: pass another --out")
        runs = sweep_runs(arch.name)
        sets, times = measurements(runs)
    except (UnknownArch, FitError, DatasetError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    consts, errors = fit(sets, times, arch.num_sms)
    rule = Rule(consts, arch.num_sms)
    for line in report(errors, consts, regrets(rule, sets, times),
                       class_regrets(arch.name, sets, times),
                       loo_regrets(sets, times, arch.num_sms)):
        print(line)
    if args.write:
        doc = json.loads(src.read_text())
        doc["rule"] = rule_block(arch.name, runs, consts, errors, arch.num_sms)
        write_atomic(out, doc, force=True)
        print(f"wrote the rule block of {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

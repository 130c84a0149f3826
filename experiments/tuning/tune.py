"""``python -m experiments.tuning.tune --arch h100``: measure the cuTile configurations per \
(D, causal) and
write the arch's defaults, ``kernels/rules/configs/<arch>.json``.

    python -m experiments.tuning.tune --arch h100 [--seq 16384] [--only d64.full,d128.causal]
                               [--out kernels/rules/configs/h100.json] [--force]
    python -m experiments.tuning.tune --arch h100 --classes short,uneven [--only d64.causal] --force

For each (D, causal) at B=1, H=16, fp16 and the long class's two sequence lengths (16K and 128K,
``kernels.rules.config.representatives``; ``--seq S`` tunes at S alone), every candidate
configuration (tiles × occupancy hint × worker warps × default schedule) goes through the project's
one path: prepared by ``kernels.host.backend.CutileFamily`` with the candidate as its defaults, run
once on a NaN-poisoned output and checked against the fp32 reference
(``experiments.measurement.correctness``); only the candidates that pass are timed, interleaved and
with a cold L2 (``experiments.measurement.timing``), and ranked by median time. A wrong-but-fast
candidate never wins: it is never timed. The candidates of sm_90 are those whose builds are
spill-free there (a spilling build reads local memory through L2). Where a key is tuned at several
problems, a candidate must pass on each, and the winner has the smallest geometric mean of its
median times over them (the same ranking as the geometric mean of its slowdowns against each
problem's fastest), so one size cannot pick tiles that lose at another.

``--classes`` tunes shape classes instead (``kernels.rules.config.ShapeClass``: cross, gqa, small,
uneven, tiny, short; the top-level (D, causal) defaults are the long class): per class, the
(D, causal) keys that the shape suite has in that class
(``experiments.registry.suites.shapes_problems``; ``--only`` narrows them), each at the class's
problems (``kernels.rules.config.representatives``: its small and large end), through the same
check-then-time ranking; the candidates are the key's, plus for causal keys each persistent one
again with the snake deal and with the longest-first (LPT) order. The winners go to the class's
block of the JSON; a key where no candidate passes keeps falling back to the (D, causal) default,
and its trials and the class's status say so. Everything else in the file is kept.

Runs never autotune: they read the JSON (``kernels.rules.config``). The JSON is written atomically
and never silently replaced: an existing file needs ``--force`` (or pass another ``--out``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Callable

from kernels.rules.config import (
    CONFIG_DIR,
    SCHEMA,
    UNMEASURED,
    ShapeClass,
    config_key,
    representatives,
    shape_class,
)
from spec import Arch, Backend, Problem, ScanOrder, Variant, get_arch, known_archs
from spec.arch import UnknownArch

from ..runner.options import UsageError, require_present
from .candidates import (
    KEYS,
    Candidate,
    Trial,
    TuneError,
    best,
    by_speed,
    candidates,
    class_candidates,
    rank,
)


def long_problems(D: int, causal: bool, seq: int | None) -> tuple[Problem, ...]:
    """The (D, causal) default's problems: the long class's (B=1, H=16, fp16, S=16K and 128K),
    or B=1, H=16, fp16 at ``seq`` alone."""
    if seq is None:
        return representatives(ShapeClass.LONG, D, causal)
    return (Problem(B=1, H=16, S_q=seq, D=D, causal=causal),)


def measure_problems(arch: Arch, problems: tuple[Problem, ...], cands: list[Candidate], *,
                     reps: int, measure: Callable | None = None) -> list[Trial]:
    """Check and time ``cands`` on each problem in turn (a candidate that fails on one is not
    built for the next), and rank by the geometric mean of the median times (module docstring).
    ``measure`` defaults to ``measure_problem`` (looked up at call time)."""
    measure = measure or measure_problem
    alive = list(cands)
    runs = []                                    # (problem, {candidate: trial})
    for problem in problems:
        got = {t.candidate: t for t in measure(arch, problem, alive, reps=reps)} if alive else {}
        runs.append((problem, got))
        alive = [c for c in alive if got[c].passed]
    if len(problems) == 1:
        return [runs[0][1][c] for c in by_speed(runs[0][1], cands)]
    trials = {}
    for c in cands:
        seen = [(p, got[c]) for p, got in runs if c in got]
        bad = next(((p, t) for p, t in seen if not t.passed), None)
        if bad is not None:
            trials[c] = Trial(c, False, f"{bad[0].label}: {bad[1].verdict}")
            continue
        us = [t.us for _, t in seen]
        trials[c] = Trial(c, True, "; ".join(f"{p.label}: {t.verdict}" for p, t in seen),
                          math.exp(sum(math.log(u) for u in us) / len(us)),
                          max(t.spread for _, t in seen),
                          tuple((p.label, t.us) for p, t in seen))
    return [trials[c] for c in by_speed(trials, cands)]


def measure_problem(arch: Arch, problem: Problem, cands: list[Candidate], *, reps: int = 10,
                    seed: int = 0) -> list[Trial]:
    """The GPU side: correctness of every candidate on ``problem``, then interleaved cold-L2
    timing of those that pass and do not spill."""
    import torch

    from kernels.host.backend import CutileFamily, default_schedule

    from ..measurement.correctness import check, poisoned_like, random_inputs, reference
    from ..measurement.timing import time_interleaved
    causal = problem.causal
    _precompile(arch, problem, cands)
    q, k, v = random_inputs(problem, seed)
    ref = reference(q, k, v, causal)
    launchers = {}

    def check_one(c: Candidate) -> tuple[bool, str]:
        cfg = c.config()
        fam = CutileFamily(arch.name, defaults=cfg)
        var = Variant(Backend.CUTILE, ScanOrder.linear(),
                      default_schedule(problem, cfg, cfg.tiles, arch), cfg.tiles,
                      c.occupancy)
        try:
            p = fam.prepare(var, problem)
            out = poisoned_like(q)
            fam.run(p, q, k, v, out)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - a candidate that does not build is reported
            return False, f"{type(e).__name__}: {str(e)[:300]}"
        verdict = check(out, q, k, v, causal, ref)
        note = f"{verdict}; {p.registers} registers, {p.local_bytes} B local"
        if verdict.passed and p.local_bytes:
            return False, f"spills ({note})"
        launchers[c] = (lambda fam=fam, p=p, o=out: fam.run(p, q, k, v, o))
        return verdict.passed, note

    def time_all(passing: list[Candidate]) -> dict[Candidate, tuple[float, float]]:
        s = time_interleaved({c: launchers[c] for c in passing}, reps=reps, l2="cold")
        return {c: (x.median * 1e3, x.spread) for c, x in s.items()}

    return rank(cands, check_one, time_all)


def _precompile(arch: Arch, problem: Problem, cands: list[Candidate]) -> None:
    """Build every candidate in parallel worker processes first (``kernels.host.warm``), so the
    sequential check below finds the cubins in the JIT's disk cache. A build that fails here
    fails again in the check, which reports it."""
    precompile(arch, [(problem, cands)])


def precompile(arch: Arch, pairs) -> list[str]:
    """``_precompile`` over many (problem, candidates) pairs in one pool; returns the errors."""
    from kernels.host.backend import default_schedule
    from kernels.host.warm import Job, warm
    return warm([Job(p.B, p.H, p.H_kv, p.S_q, p.S_kv, p.D, p.dtype.value, p.causal, "linear",
                     default_schedule(p, c.config(), c.config().tiles, arch).label, c.tile_m,
                     c.tile_n, c.occupancy, worker_warps=c.worker_warps, tactic=c.tactic)
                 for p, cands in pairs for c in cands])


def _trial_json(t: Trial) -> dict:
    out = dict(t.candidate.config().to_json(), passed=t.passed, check=t.verdict,
               us=None if t.us is None else round(t.us, 2))
    if t.per_problem:
        out["us_per_problem"] = {label: round(us, 2) for label, us in t.per_problem}
    return out


def _classes(existing: dict | None) -> dict:
    """The existing document's class blocks, every class present (unmeasured where absent)."""
    old = (existing or {}).get("classes", {})
    return {c.value: dict(old.get(c.value) or {"status": UNMEASURED, "configs": {},
                                               "measured": {}})
            for c in ShapeClass if c != ShapeClass.LONG}


def document(arch: Arch, device: str, problems: dict[str, tuple[Problem, ...]],
             results: dict[str, list[Trial]], existing: dict | None) -> dict:
    """The JSON ``kernels.rules.config`` reads: the best passing candidate per key, and every
    trial; the class blocks and the rule block (``experiments.tuning.rulefit``) of ``existing``
    are kept."""
    configs = dict((existing or {}).get("configs", {}))
    measured = dict((existing or {}).get("measured", {}))
    tuned_at = dict((existing or {}).get("problems", {}))
    for key, trials in results.items():
        configs[key] = best(trials).config().to_json()
        measured[key] = [_trial_json(t) for t in trials]
        tuned_at[key] = [p.label for p in problems[key]]
    return {"schema": SCHEMA, "arch": arch.name, "device": device,
            "source": f"python -m experiments.tuning.tune --arch {arch.name} (correctness gate, "
                      "then experiments.measurement.timing: interleaved, cold L2; ranked by the "
                      "geometric mean over each key's problems)",
            "configs": configs, "measured": measured, "problems": tuned_at,
            "classes": _classes(existing),
            **({"rule": existing["rule"]} if existing and "rule" in existing else {})}


def document_classes(arch: Arch, device: str, results: dict[str, dict[str, list[Trial]]],
                     existing: dict | None, reps: int) -> dict:
    """``existing`` (or an empty document) with the class blocks of ``results``
    ({class: {key: (problem, trials)}}) replaced: per key the best passing candidate, or none when
    nothing passed (the key then falls back to the (D, causal) default), every trial, the problem
    measured, a status."""
    doc = dict(existing or {"arch": arch.name, "configs": {}, "measured": {}})
    doc["schema"] = SCHEMA
    classes = _classes(existing)
    for name, keys in results.items():
        block = {"configs": dict(classes[name].get("configs", {})),
                 "measured": dict(classes[name].get("measured", {})),
                 "problems": dict(classes[name].get("problems", {}))}
        failed = []
        for key, (problems, trials) in keys.items():
            block["measured"][key] = [_trial_json(t) for t in trials]
            block["problems"][key] = [p.label for p in problems]
            if trials and trials[0].passed:
                block["configs"][key] = best(trials).config().to_json()
            else:
                block["configs"].pop(key, None)
                failed.append(key)
        chosen = sorted(block["configs"])
        status = (f"measured on {device}: {', '.join(chosen)}" if chosen else "unmeasured")
        if failed:
            status += f"; no candidate passed for {', '.join(failed)}"
        block["status"] = status + "; other keys fall back to the d/causal default"
        block["source"] = (f"python -m experiments.tuning.tune --arch {arch.name} --classes {name} "
                           f"(correctness gate, then experiments.measurement.timing: interleaved, "
                           f"cold L2, {reps} repetitions; ranked by the geometric mean over each "
                           "key's problems)")
        classes[name] = block
    doc["classes"] = classes
    return doc


def dumps(doc, indent: int = 0) -> str:
    """``doc`` as indented JSON, except that each record of a list of records (the trials) takes
    one line: the file stays readable and diffs one line per trial."""
    pad = " " * (indent + 1)
    if isinstance(doc, dict) and doc:
        items = ",\n".join(f"{pad}{json.dumps(k)}: {dumps(v, indent + 1)}" for k, v in doc.items())
        return "{\n" + items + "\n" + " " * indent + "}"
    if isinstance(doc, list) and doc and all(isinstance(x, dict) for x in doc):
        return "[\n" + ",\n".join(pad + json.dumps(x) for x in doc) + "\n" + " " * indent + "]"
    return json.dumps(doc)


def write_atomic(path: Path, doc: dict, force: bool) -> None:
    """Write ``doc`` to ``path`` via a temporary sibling and a rename; refuse to replace an
    existing file unless ``force``."""
    if path.exists() and not force:
        raise UsageError(f"{path} exists; pass --force to replace it or --out to write another "
                         "file")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        tmp.write_text(dumps(doc) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _keys(only: str | None) -> list[tuple[int, bool]]:
    if not only:
        return list(KEYS)
    known = {config_key(*k): k for k in KEYS}
    want = only.split(",")
    bad = [w for w in want if w not in known]
    if bad:
        raise UsageError(f"--only {','.join(bad)}: unknown key; known: {', '.join(known)}")
    return [known[w] for w in want]


CLASSES = tuple(c.value for c in ShapeClass if c != ShapeClass.LONG)


def class_keys(name: str) -> list[tuple[int, bool]]:
    """The (D, causal) keys the shape suite has in class ``name``."""
    from ..registry.suites import shapes_problems
    keys = {(p.D, p.causal) for _, p in shapes_problems() if shape_class(p).value == name}
    return [k for k in KEYS if k in keys]


def _classes_arg(value: str) -> list[str]:
    want = list(CLASSES) if value == "all" else value.split(",")
    bad = [w for w in want if w not in CLASSES]
    if bad:
        raise UsageError(f"--classes {','.join(bad)}: unknown shape class; known: "
                         f"{', '.join(CLASSES)} or all (the long class is the default tune)")
    return want


def class_plan(names: list[str], only: list[tuple[int, bool]] | None
               ) -> dict[str, dict[str, tuple[int, bool]]]:
    """{class: {key: (D, causal)}}: each class's suite keys, narrowed to ``only`` when given."""
    plan = {}
    for name in names:
        keys = [k for k in class_keys(name) if only is None or k in only]
        if keys:
            plan[name] = {config_key(*k): k for k in keys}
    if not plan:
        raise UsageError("--only leaves no key of the chosen classes; their keys: " + "; ".join(
            f"{n}: {', '.join(config_key(*k) for k in class_keys(n))}" for n in names))
    return plan


def _print(line: str) -> None:
    print(line, flush=True)


def tune_classes(arch: Arch, plan: dict[str, dict[str, tuple[int, bool]]], *, reps: int,
                 measure: Callable | None = None, log: Callable[[str], None] = _print) -> dict:
    """Measure every (class, key) of ``plan`` at its class's problems; returns
    {class: {key: (problems, trials)}} for ``document_classes``. ``measure`` (one problem)
    defaults to ``measure_problem``."""
    results: dict = {}
    for name, keys in plan.items():
        for key, (D, causal) in keys.items():
            problems = representatives(ShapeClass(name), D, causal)
            trials = measure_problems(arch, problems, class_candidates(arch, D, causal),
                                      reps=reps, measure=measure)
            results.setdefault(name, {})[key] = (problems, trials)
            _log_trials(f"{name}.{key}", trials, log)
    return results


def _log_trials(key: str, trials: list[Trial], log: Callable[[str], None]) -> None:
    for t in trials:
        time = f"{t.us:9.1f} us" if t.us is not None else "  not timed"
        log(f"{key} {t.candidate.label:28s} {time}  {t.verdict}")


def _device_name() -> str:
    import torch
    return torch.cuda.get_device_name()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.tuning.tune",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, help=f"one of {', '.join(known_archs())}")
    ap.add_argument("--seq", type=int, help="tune the (D, causal) defaults at this sequence "
                    "length alone (default: the long class's, 16K and 128K)")
    ap.add_argument("--out", type=Path,
                    help="JSON path (default kernels/rules/configs/<arch>.json)")
    ap.add_argument("--force", action="store_true", help="replace an existing JSON")
    ap.add_argument("--only", help="comma list of keys, e.g. d64.full,d128.causal")
    ap.add_argument("--classes", help=f"tune shape classes instead: comma list of "
                    f"{', '.join(CLASSES)}, or all")
    ap.add_argument("--reps", type=int, default=10, help="timed repetitions per candidate")
    args = ap.parse_args(argv)
    try:
        arch = get_arch(args.arch)
        keys = _keys(args.only)
        plan = (class_plan(_classes_arg(args.classes), keys if args.only else None)
                if args.classes else None)
        if (args.seq is not None and args.seq <= 0) or args.reps < 1:
            raise UsageError("--seq must be positive and --reps at least 1")
        out = args.out or CONFIG_DIR / f"{arch.name}.json"
        if out.exists() and not args.force:
            raise UsageError(f"{out} exists; pass --force to replace it or --out to write "
                             "another file")
        present = require_present(arch, "tuning")
        existing = json.loads(out.read_text()) if out.exists() else None
    except (UsageError, UnknownArch) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:           # an unreadable existing file
        print(f"error: {out}: {e}; fix or move it, or pass another --out", file=sys.stderr)
        return 2
    try:
        if plan is not None:
            results = tune_classes(present, plan, reps=args.reps)
            doc = document_classes(present, _device_name(), results, existing, args.reps)
        else:
            results, problems = {}, {}
            for D, causal in keys:
                key = config_key(D, causal)
                problems[key] = long_problems(D, causal, args.seq)
                results[key] = measure_problems(present, problems[key],
                                                candidates(present, D, causal), reps=args.reps)
                _log_trials(key, results[key], _print)
            doc = document(present, _device_name(), problems, results, existing)
        write_atomic(out, doc, args.force)
    except (TuneError, UsageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

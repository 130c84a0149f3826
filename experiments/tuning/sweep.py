"""``python -m experiments.tuning.sweep --arch h100``: every configuration the rule chooses among
(``kernels.rules.choice.CANDIDATES``), checked and timed on every problem of the shape suites, the
data ``python -m experiments.tuning.rulefit`` fits the rule's constants on and judges it with.

    python -m experiments.tuning.sweep --arch h100 [--sets models,scan] [--reps 10] [--out DIR]
                                [--budget-s 520] [--shard I/N] [--masks full]
                                [--head-dim 64] [--max-s 577]
                                [--tactics [all|prefetch]] [--peers] [--dry-run]

Problem sets (the ``set`` column of ``trials.csv.gz``):

- ``tuning`` / ``validation``: the two halves of the model families
  (``experiments.registry.suites.model_problems``; ``--sets models`` both, ``--sets tuning`` /
  ``validation`` one half alone); the fit sees the tuning half only;
- ``shapes``: the shape suite up to S=32K (``experiments.registry.suites.shapes_problems``: the
  benchmark's shapes, batched short prefill, grouped heads, uneven lengths, a short query block
  against a long K/V), the problems the old shape classes were tuned on; the fit sees them;
- ``scan``: a vision-transformer batch (B=32, H=12, D=64, bf16) at lengths across the old class
  borders (tiny / uneven / short): 197, 256, 257, 512, 577, 1024. Not fitted: it shows whether
  the chosen configuration's time moves smoothly where the classes jumped;
- ``long``: the long-causal scan (``LONG_CAUSAL``: S 16K..128K, D 64 and 128, bf16, heads
  halving as S doubles so that every problem holds thousands of work items); fitted, so the
  per-step cost is learnt where K/V per head outgrows the L2.

``--tactics`` adds the kernel-tactic trials (``experiments.tuning.candidates.tactic_trials``:
the same configurations with the masked tiles first, unchecked bulk loads, other load-latency
hints, the next-item Q prefetch of the persistent configurations, and two hint-only
configurations) to every problem's candidates; ``--tactics prefetch`` adds only the prefetch
trials. The rule reads only the configurations it chooses among, so these rows are an A/B, not
fit data, until a candidate list names them. ``--head-dim`` and ``--max-s`` keep the problems of
that head dimension and of at most that many query and key rows. ``--peers`` also times PyTorch
SDPA's flash and cuDNN backends on the same inputs right after each problem's candidates (cold L2,
interleaved with each other; rows with ``config`` sdpa-flash / sdpa-cudnn, which the fit ignores).

Per problem, each candidate goes through the tuner's path
(``experiments.tuning.tune.measure_problem``): prepared by ``kernels.host.backend.CutileFamily``
with the candidate as its defaults, run on a NaN-poisoned output and checked against the fp32
reference, then the passing ones timed interleaved with a cold L2 (kernel time, the GPU spin hides
the host). A candidate that fails or spills has no time. Builds compile first, all problems at once,
in parallel worker processes.

``--budget-s``: no new problem starts after that many seconds (the device's per-command limit);
the manifest names the problems left out. The run directory appears only when the sweep ends.
``--dry-run`` prints the plan and its time estimate: the compile phase plus a cost per timed row
(a candidate or a peer on one problem), the largest rates of the committed H100 sweeps
(``COMPILE_S``, ``ROW_S``).
"""
from __future__ import annotations

import argparse
import csv
import gzip
import io
import sys
import time
from pathlib import Path

from kernels.rules.choice import CANDIDATES, config_label
from spec import Problem, get_arch, known_archs
from spec.arch import UnknownArch

from ..runner.options import UsageError, require_present

SETS = ("tuning", "validation", "shapes", "scan", "long")
SET_GROUPS = {"models": ("tuning", "validation"), "tuning": ("tuning",),
              "validation": ("validation",), "shapes": ("shapes",), "scan": ("scan",),
              "long": ("long",)}
SCAN_LENGTHS = (197, 256, 257, 512, 577, 1024)
LONG_CAUSAL = tuple(Problem(1, max(2, 16 * 16384 // s), s, d, dtype="bf16", causal=True)
                    for d in (64, 128) for s in (16384, 32768, 65536, 131072))
"""The long-causal scan: B=1, H = 16, 8, 4, 2 heads at S = 16K, 32K, 64K, 128K (4096 work items
of 64 query rows each), D 64 and 128, bf16, causal."""
SHAPES_MAX_S = 32768
COMPILE_S, ROW_S = 35.0, 2.0
"""The dry run's estimate: seconds of the compile phase and per timed row, the largest of the
committed H100 sweeps (profiles/h100/sweep-20261126a..d, -20261127a: 26-33 s compiling, then
1.0-2.0 s per row, the check against the fp32 reference and the timing)."""
TACTIC_SETS = ("all", "prefetch")
COLUMNS = ("set", "family", "problem", "B", "H", "H_kv", "S_q", "S_kv", "D", "dtype", "causal",
           "config", "passed", "us", "spread", "verdict")


def sweep_problems(groups: tuple[str, ...]) -> list[tuple[str, str, Problem]]:
    """(set, family, problem) of the named groups (``SET_GROUPS``), in that order."""
    from ..registry.suites import model_problems, shapes_problems
    out = []
    for g in groups:
        if g in ("models", "tuning", "validation"):
            out += [(half, fam, p) for fam, half, p in model_problems()
                    if g == "models" or half == g]
        elif g == "shapes":
            out += [("shapes", panel.removeprefix("shapes-"), p)
                    for panel, p in shapes_problems() if p.S_q <= SHAPES_MAX_S]
        elif g == "scan":
            out += [("scan", "vit-scan", Problem(32, 12, s, 64, dtype="bf16"))
                    for s in SCAN_LENGTHS]
        elif g == "long":
            out += [("long", "long-causal", p) for p in LONG_CAUSAL]
    return out


def candidates_for(arch, problem: Problem, tactics: str | None = None):
    """The rule's candidates for the problem's mask, as the tuner's ``Candidate`` (with
    ``tactics``, the kernel-tactic trials after them: ``all``, or ``prefetch`` for the next-item
    Q prefetch's alone)."""
    from kernels.device.tactics import TACTIC_PREFETCH_Q

    from .candidates import Candidate, tactic_trials
    base = [Candidate(c.tile_m, c.tile_n, c.occupancy, c.worker_warps, c.schedule, c.tactic)
            for c in CANDIDATES[problem.causal]]
    if not tactics:
        return base
    return base + [c for c in tactic_trials(problem.D, problem.causal) if c not in base
                   and (tactics == "all" or c.tactic & TACTIC_PREFETCH_Q)]


def peer_rows(set_name: str, family: str, problem: Problem, reps: int, seed: int = 0) -> list:
    """SDPA flash and cuDNN on the problem's inputs (the candidates' seed), cold L2, timed
    interleaved with each other: rows like ``rows_for``'s, verdict ``peer (not checked)``."""
    from ..measurement.correctness import random_inputs
    from ..measurement.timing import sdpa_peers, time_interleaved
    q, k, v = random_inputs(problem, seed)
    s = time_interleaved(sdpa_peers(q, k, v, problem.causal), reps=reps, l2="cold")
    p = problem
    return [dict(set=set_name, family=family, problem=p.label, B=p.B, H=p.H, H_kv=p.H_kv,
                 S_q=p.S_q, S_kv=p.S_kv, D=p.D, dtype=p.dtype.value, causal=int(p.causal),
                 config=name, passed=1, us=f"{x.median * 1e3:.3f}", spread=f"{x.spread:.4f}",
                 verdict="peer (not checked)") for name, x in s.items()]


def rows_for(set_name: str, family: str, problem: Problem, trials) -> list[dict]:
    p = problem
    out = []
    for t in trials:
        c = t.candidate
        out.append(dict(set=set_name, family=family, problem=p.label, B=p.B, H=p.H, H_kv=p.H_kv,
                        S_q=p.S_q, S_kv=p.S_kv, D=p.D, dtype=p.dtype.value, causal=int(p.causal),
                        config=config_label(c.config()), passed=int(t.passed),
                        us="" if t.us is None else f"{t.us:.3f}",
                        spread="" if t.spread is None else f"{t.spread:.4f}",
                        verdict=t.verdict.replace("\n", " ")[:300]))
    return out


def write_trials(path: Path, rows: list[dict]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(buf.getvalue().encode())


def shard(plan: list, value: str) -> list:
    """Every N-th entry of ``plan`` from the I-th, for ``--shard I/N``."""
    try:
        i, n = (int(x) for x in value.split("/"))
        if not 0 <= i < n:
            raise ValueError
    except ValueError:
        raise UsageError(f"--shard {value!r}: give I/N with 0 <= I < N, e.g. 0/2") from None
    return plan[i::n]


def _groups(value: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    bad = [n for n in names if n not in SET_GROUPS]
    if bad or not names:
        raise UsageError(f"--sets {value!r}: name some of {', '.join(SET_GROUPS)} "
                         "(comma separated)")
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.tuning.sweep",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, help=f"one of {', '.join(known_archs())}")
    ap.add_argument("--sets", default="models,scan,shapes",
                    help=f"comma list of {', '.join(SET_GROUPS)} (default: all, in that order)")
    ap.add_argument("--reps", type=int, default=10, help="timed repetitions per candidate")
    ap.add_argument("--budget-s", type=float, default=520.0,
                    help="start no new problem after this many seconds")
    ap.add_argument("--out", type=Path, help="run directory (default runs/<arch>/sweep/<stamp>)")
    ap.add_argument("--shard", default="0/1", help="I/N: every N-th problem from the I-th "
                    "(0-based), to split a sweep over several device calls")
    ap.add_argument("--masks", choices=("both", "full", "causal"), default="both",
                    help="only the non-causal (full) or the causal problems")
    ap.add_argument("--head-dim", type=int, help="only the problems of this head dimension")
    ap.add_argument("--max-s", type=int, help="only the problems of at most this many query "
                    "and key rows")
    ap.add_argument("--tactics", nargs="?", const="all", choices=TACTIC_SETS,
                    help="add the kernel-tactic trials to every problem's candidates (prefetch: "
                    "the next-item Q prefetch's alone)")
    ap.add_argument("--peers", action="store_true",
                    help="also time SDPA flash and cuDNN on each problem")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, measure nothing")
    args = ap.parse_args(argv)
    try:
        arch = get_arch(args.arch)
        groups = _groups(args.sets)
        if args.reps < 1 or args.budget_s <= 0:
            raise UsageError("--reps must be at least 1 and --budget-s positive")
        if (args.head_dim is not None and args.head_dim < 1) or \
                (args.max_s is not None and args.max_s < 1):
            raise UsageError("--head-dim and --max-s must be positive")
        from ..rundirs.rundir import check_creatable, check_free
        if args.out is not None:
            check_free(args.out)
            check_creatable(args.out)
        plan = [x for x in shard(sweep_problems(groups), args.shard)
                if (args.masks == "both" or x[2].causal == (args.masks == "causal"))
                and (args.head_dim is None or x[2].D == args.head_dim)
                and (args.max_s is None or max(x[2].S_q, x[2].S_kv) <= args.max_s)]
        if not plan:
            raise UsageError("no problem left after the set, mask, --head-dim and --max-s "
                             "selection; widen it")
        if args.dry_run:
            n = sum(len(candidates_for(arch, p, args.tactics)) for _, _, p in plan)
            rows = n + (2 * len(plan) if args.peers else 0)
            print(f"sweep on {arch.name}: {len(plan)} problems ({', '.join(groups)}), {n} "
                  f"(problem, configuration) pairs, {args.reps} timed repetitions each; "
                  f"estimate {COMPILE_S + ROW_S * rows:.0f} s ({COMPILE_S:.0f} s compiling, "
                  f"{rows} rows at {ROW_S:.1f} s)")
            for set_name, _, p in plan:
                print(f"  {set_name:10s} {p.label}")
            return 0
        present = require_present(arch, "the sweep")
    except (UsageError, UnknownArch, FileExistsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return _run(present, plan, args, argv if argv is not None else sys.argv[1:])


def _run(arch, plan, args, argv) -> int:
    import torch

    from ..rundirs.rundir import command_line, default_run_dir, reserved_run_dir, write_manifest
    from .tune import measure_problem, precompile
    t0 = time.monotonic()
    errors = precompile(arch, [(p, candidates_for(arch, p, args.tactics)) for _, _, p in plan])
    compile_s = time.monotonic() - t0
    rows, skipped = [], []
    for i, (set_name, family, p) in enumerate(plan):
        if time.monotonic() - t0 > args.budget_s:
            skipped = [q.label for _, _, q in plan[i:]]
            break
        trials = measure_problem(arch, p, candidates_for(arch, p, args.tactics), reps=args.reps)
        rows += rows_for(set_name, family, p, trials)
        if args.peers:
            rows += peer_rows(set_name, family, p, args.reps)
        best = next((t for t in trials if t.passed), None)
        print(f"[{time.monotonic() - t0:5.0f} s] {set_name:10s} {p.label:40s} best "
              f"{config_label(best.candidate.config()) if best else 'none'} "
              f"{best.us if best else float('nan'):9.1f} us", flush=True)
    with reserved_run_dir(args.out, lambda: default_run_dir(arch.name, "sweep", "measure")) \
            as (final, work):
        write_trials(work / "trials.csv.gz", rows)
        write_manifest(work, command=command_line("experiments.tuning.sweep", argv), arch=arch.name,
                       device=torch.cuda.get_device_name(), reps=args.reps, l2="cold",
                       metric="kernel time, median us", sets=sorted({r["set"] for r in rows}),
                       tactics=args.tactics, peers=args.peers,
                       problems=len({r["problem"] for r in rows}), skipped=skipped,
                       build_errors=errors, compile_s=round(compile_s, 1),
                       wall_s=round(time.monotonic() - t0, 1))
    print(f"wrote {final} ({len(rows)} trials; {len(skipped)} problems left out by --budget-s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

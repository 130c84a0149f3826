"""``python -m experiments.tuning.longscan --arch h100``: ``attention()`` on the long-causal scan
beside SDPA flash and cuDNN, kernel time and eager call time.

    python -m experiments.tuning.longscan --arch h100 [--reps 15] [--out DIR] [--dry-run]

The problems are the sweep's long-causal scan (``experiments.tuning.sweep.LONG_CAUSAL``: S 16K to
128K, D 64 and 128, bf16, causal, heads halving as S doubles). Per problem: ``kernels.attention``
(the configuration ``kernels.rules.choice`` picks) runs once on a NaN-poisoned output and is checked
against the fp32 reference (``experiments.measurement.correctness``); then its prepared launch
and the SDPA peers are timed interleaved with a cold L2 (kernel time,
``experiments.measurement.timing``), and ``kernels.attention`` itself and the peers' SDPA calls
are timed eagerly (events around one call on an idle GPU, host included, L2 warm:
``experiments.speed.eager.eager_call_ms``). A problem that fails the check has no times.

Writes ``times.csv`` (problem, config, who, metric, median ms, spread) and ``manifest.json``;
prints per metric the geometric mean and minimum of cuDNN's time over cuTile's.
"""
from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time
from pathlib import Path

from spec import get_arch, known_archs
from spec.arch import UnknownArch

from ..runner.options import UsageError, require_present
from .sweep import LONG_CAUSAL

COLUMNS = ("problem", "config", "who", "metric", "ms", "spread", "verdict")
KERNEL, EAGER = "kernel_ms_cold", "eager_call_ms_warm"


def ratio_lines(rows: list[dict]) -> list[str]:
    """Per metric: geomean and min of cuDNN time / cuTile time over the problems with both."""
    out = []
    for metric in (KERNEL, EAGER):
        t = {}
        for r in rows:
            if r["metric"] == metric:
                t.setdefault(r["problem"], {})[r["who"]] = float(r["ms"])
        rs = {p: d["sdpa-cudnn"] / d["cutile"] for p, d in t.items()
              if "sdpa-cudnn" in d and "cutile" in d}
        if rs:
            g = math.exp(sum(map(math.log, rs.values())) / len(rs))
            worst = min(rs, key=rs.get)
            out.append(f"cutile vs cuDNN ({metric}): geomean {g:.3f}x, min {rs[worst]:.3f}x "
                       f"({worst}), n={len(rs)}")
    return out


def _measure(problem, arch_name: str, reps: int) -> list[dict]:
    import functools

    import torch

    import kernels
    from kernels.host.backend import launch_for
    from kernels.rules.choice import config_label, problem_config

    from ..measurement.correctness import check, poisoned_like, random_inputs
    from ..measurement.timing import sdpa_peers, time_interleaved
    from ..speed.eager import eager_call_ms, sdpa_callers
    q, k, v = random_inputs(problem, seed=0)
    label = config_label(problem_config(arch_name, problem))
    out = poisoned_like(q)
    launch = launch_for(q, k, v, True)          # attention()'s cached launch for these tensors
    launch(q, k, v, out)
    torch.cuda.synchronize()
    verdict = check(out, q, k, v, True)
    base = dict(problem=problem.label, config=label, verdict=str(verdict))
    if not verdict.passed:
        return [dict(base, who="cutile", metric=KERNEL, ms="", spread="")]
    fns = {"cutile": functools.partial(launch, q, k, v, out), **sdpa_peers(q, k, v, True)}
    rows = [dict(base, who=n, metric=KERNEL, ms=f"{s.median:.5f}", spread=f"{s.spread:.4f}")
            for n, s in time_interleaved(fns, reps=reps, l2="cold").items()]
    callers, ctx = sdpa_callers(q, k, v, True)
    callers = {"cutile": functools.partial(kernels.attention, q, k, v, causal=True), **callers}
    for n, ms in eager_call_ms(callers, reps=reps, enter=ctx).items():
        med = statistics.median(ms)
        q1, _, q3 = statistics.quantiles(ms, n=4)
        rows.append(dict(base, who=n, metric=EAGER, ms=f"{med:.5f}",
                         spread=f"{(q3 - q1) / (2 * med):.4f}"))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.tuning.longscan",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, help=f"one of {', '.join(known_archs())}")
    ap.add_argument("--reps", type=int, default=15, help="timed calls per launcher and metric")
    ap.add_argument("--out", type=Path, help="run directory (default runs/<arch>/longscan/<stamp>)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, measure nothing")
    args = ap.parse_args(argv)
    try:
        arch = get_arch(args.arch)
        if args.reps < 4:
            raise UsageError("--reps must be at least 4 (the spread needs quartiles)")
        from ..rundirs.rundir import check_creatable, check_free
        if args.out is not None:
            check_free(args.out)
            check_creatable(args.out)
        if args.dry_run:
            print(f"longscan on {arch.name}: {len(LONG_CAUSAL)} problems "
                  f"({', '.join(p.label for p in LONG_CAUSAL)}), {args.reps} calls each")
            return 0
        require_present(arch, "longscan")
    except (UsageError, UnknownArch, FileExistsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import torch

    from ..rundirs.rundir import command_line, default_run_dir, reserved_run_dir, write_manifest
    t0 = time.monotonic()
    rows = []
    for p in LONG_CAUSAL:
        rows += _measure(p, arch.name, args.reps)
        print(f"[{time.monotonic() - t0:5.0f} s] {p.label}: {rows[-1]['verdict']}", flush=True)
    with reserved_run_dir(args.out, lambda: default_run_dir(arch.name, "longscan", "measure")) \
            as (final, work):
        with open(work / "times.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
        write_manifest(work, command=command_line("experiments.tuning.longscan",
                                                  argv if argv is not None else sys.argv[1:]),
                       arch=arch.name, device=torch.cuda.get_device_name(), reps=args.reps,
                       problems=[p.label for p in LONG_CAUSAL],
                       wall_s=round(time.monotonic() - t0, 1))
    for line in ratio_lines(rows):
        print(line)
    print(f"wrote {final}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

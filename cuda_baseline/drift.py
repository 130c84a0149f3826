"""How far concurrent CTAs drift apart, read off a trace build (``CudaBackend.trace``).

The wavefront argument assumes that CTAs running at the same time advance through their K/V scans
in lock-step, so that one CTA's miss is the others' hit. The trace build stamps ``%globaltimer`` at
the start of every step of every CTA; for a persistent launch (all CTAs resident from the start)
the spread of the start times of step ``s`` over the CTAs measures the drift after ``s`` steps, in
nanoseconds and in units of one step's duration.

Worked example: 3 CTAs whose step 10 starts at 1000, 1040 and 1100 ns, with steps of 20 ns,
have drifted apart by 100 ns = 5 steps by then; K/V tiles they share are then 5 tiles apart in
their scans instead of 0.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spec import Arch, Backend, CtaSchedule, Problem, ScanOrder, Tiles, Variant
from spec.problem import TileGrid
from spec.records import Metric, Row, Source, case_fields


from analysis.drift import drift, sample_steps  # noqa: E402  (moving to experiments: issue 11)


def kv_tile_bytes(problem, tiles):
    return TileGrid(problem, tiles).kv_step_bytes


# -- the measured dataset -------------------------------------------------------------------------

def plan(arch: Arch) -> list[tuple[Problem, Variant]]:
    """The sawtooth study's CUDA configuration (persistent, one CTA per SM, 80×80 tiles, D=64,
    H=1, the arch's scaled S), non-causal and causal, linear and sawtooth, at B=1 and B=4."""
    from experiments.studies import scaled_seq
    s = scaled_seq(arch)
    sched = CtaSchedule.persistent(arch.num_sms)
    cases = []
    for causal in (False, True):
        for b in (1, 4):
            prob = Problem(B=b, H=1, S_q=s, D=64, causal=causal)
            for order in (ScanOrder.linear(), ScanOrder.sawtooth()):
                cases.append((prob, Variant(Backend.CUDA, order, sched, Tiles(80, 80))))
    return cases


def measure(cases, arch: Arch, run: str, points: int, seed: int = 0) -> tuple[list[Row], list[str]]:
    """Trace build of every case: per-step start-time spread (sampled) and summary rows."""
    import torch

    from experiments.correctness import check, poisoned_like, random_inputs

    from .backend import CudaBackend
    be = CudaBackend()
    rows, table = [], []
    for problem, variant in cases:
        q, k, v = random_inputs(problem, seed)
        out = poisoned_like(q)
        prepared = be.prepare(variant, problem)
        tr = be.trace(prepared, q, k, v, out)
        verdict = check(out, q, k, v, problem.causal)
        if not verdict.passed:
            raise RuntimeError(f"{variant.id(problem)}: trace build output {verdict}")
        d = drift(tr["time_ns"])
        base = dict(run=run, study="drift", arch=arch.name, source=Source.MEASURED.value,
                    **case_fields(problem, variant))
        rows.append(Row(**base, metric=Metric.STEP_NS, value=d.median_step_ns, unit="ns",
                        note=f"trace build {tr['instance']}, %globaltimer at each step start; "
                             f"output {verdict}"))
        for i in sample_steps(len(d.step), points):
            rows.append(Row(**base, metric=Metric.CTA_START_SPREAD_NS, value=float(d.spread_ns[i]),
                            unit="ns", x=float(d.step[i])))
        n_kv = TileGrid(problem, variant.tiles).n_kv
        steps = d.spread_steps
        after_one = steps[min(n_kv, len(steps) - 1)]
        span_mib = steps.max() * kv_tile_bytes(problem, variant.tiles) / 2**20
        table.append(f"{variant.id(problem)} {problem.label}: step {d.median_step_ns / 1e3:.2f} us,"
                     f" spread {after_one:.1f} steps after one work item ({n_kv} steps), max "
                     f"{steps.max():.1f} steps = {span_mib:.1f} MiB of K/V (L2 "
                     f"{arch.l2_bytes / 2**20:.0f} MiB)")
        print(table[-1], flush=True)
        del q, k, v, out, tr
        torch.cuda.empty_cache()
    return rows, table


def _points(text: str) -> int:
    import argparse
    try:
        n = int(text)
    except ValueError:
        n = None
    if n is None or n < 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 2 (the first and last "
                                         "step are always kept)")
    return n


def main(argv: list[str] | None = None) -> int:
    import argparse
    import datetime as dt
    import time

    from experiments.rundir import RunDirExists, atomic_run_dir, check_free, default_run_dir, write_manifest
    from spec import arch as arch_registry
    from spec.backend import UnsupportedVariant
    from spec.records import write_csv

    ap = argparse.ArgumentParser(prog="python -m cuda_baseline.drift", description=(
        "Measure how far persistent CTAs drift from lock-step (CUDA trace build timestamps)."))
    ap.add_argument("--arch", required=True, help="the GPU present (h100, h200, ...)")
    ap.add_argument("--out", type=Path, help="run directory to create (must not exist)")
    ap.add_argument("--points", type=_points, default=300,
                    help="spread samples kept per case (an integer >= 2; first and last step kept)")
    ap.add_argument("--dry-run", action="store_true", help="list the cases and exit")
    args = ap.parse_args(argv)
    try:
        arch = arch_registry.get(args.arch)
        cases = plan(arch)
        if args.dry_run:
            for problem, variant in cases:
                print(variant.id(problem), problem.label)
            return 0
        present = arch_registry.detect()
        if present is None:
            raise UnsupportedVariant(f"no CUDA GPU found: the drift measurement runs the trace "
                                     f"build on the {arch.name} GPU; run it on that machine, or "
                                     f"pass --dry-run to list the cases")
        if present.name != arch.name:
            raise UnsupportedVariant(f"--arch {arch.name} but the GPU present is {present.name}; "
                                     f"pass --arch {present.name}")
        out = args.out or default_run_dir(arch.name, "drift", "measure")
        check_free(out)
    except (KeyError, ValueError, UnsupportedVariant, RunDirExists) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    run = dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    rows, table = measure(cases, arch, run, args.points)
    with atomic_run_dir(out) as tmp:
        write_csv(tmp / "drift.csv", rows)
        write_manifest(tmp, study="drift", arch=arch.name, mode="measure", device=present.marketing_name,
                       cases=[f"{v.id(p)} {p.label}" for p, v in cases], points=args.points,
                       summary=table)
    print("\n".join(table))
    print(f"wrote {out} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

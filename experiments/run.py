"""``python -m experiments.run <study> --arch <name>``: plan, run and record a study.

    python -m experiments.run --list
    python -m experiments.run sawtooth --arch gb10 --dry-run
    python -m experiments.run sawtooth --arch gb10              # no GPU here: simulates, says so

Modes: ``simulate`` runs the study's cases through the L2 simulator (CPU only); ``measure`` runs the
kernels on the GPU; ``auto`` measures when a CUDA GPU is present and the study can be measured, and
simulates otherwise, printing one line that says which and why. Results go to a new run directory
(``runs/<arch>/<study>/<stamp>-<mode>`` unless ``--out``): tidy ``counters.csv``, ``manifest.json``
and ``figures/``. Errors in the arguments exit with code 2 and one line naming the fix.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

from spec import InvalidProblem, Problem, detect, get_arch, known_archs
from spec.arch import MiB, UnknownArch

from .rundir import RunDirExists, atomic_run_dir, check_free, default_run_dir, write_manifest
from .studies import STUDIES, Case, UnknownStudy, describe_scale, get_study


class UsageError(ValueError):
    """A problem with the command line; printed as one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m experiments.run",
                                description="Run a study of the Sawtooth cache-locality framework.")
    p.add_argument("study", nargs="?", help="study name (see --list)")
    p.add_argument("--arch", help=f"target architecture: {', '.join(known_archs())}")
    p.add_argument("--list", action="store_true", help="list the studies and exit")
    p.add_argument("--dry-run", action="store_true", help="print the plan (cases × variants) only")
    p.add_argument("--mode", choices=("auto", "measure", "simulate"), default="auto")
    p.add_argument("--out", type=Path, help="run directory to create (must not exist)")
    p.add_argument("--capacity-mib", type=float,
                   help="simulated L2 capacity in MiB (an effective capacity; default: the arch's L2)")
    p.add_argument("--seq", type=int, help="override every case's sequence length (quick runs)")
    p.add_argument("--filter", help="regular expression on case ids: run only the matching cases")
    p.add_argument("--no-figures", action="store_true", help="skip drawing figures")
    return p


def _has_cuda_gpu() -> bool:
    return detect() is not None


def _resolve_mode(requested: str, study, has_gpu: bool) -> tuple[str, str]:
    """(mode, one-line reason)."""
    can_measure = study.measure is not None
    if requested == "simulate":
        return "simulate", "simulating (--mode simulate): predictions, not measurements"
    if requested == "measure":
        if not has_gpu:
            raise UsageError("--mode measure needs a CUDA GPU and none was found "
                             "(torch.cuda.is_available() is False); use --mode simulate")
        if not can_measure:
            raise UsageError(f"study {study.name!r} has no measure mode yet (it lands with the "
                             "profiling layer); use --mode simulate")
        return "measure", "measuring on the GPU (--mode measure)"
    if has_gpu and can_measure:
        return "measure", "auto: CUDA GPU found, measuring"
    why = "no CUDA GPU found" if not has_gpu else f"study {study.name!r} has no measure mode yet"
    return "simulate", f"auto: {why}, SIMULATING: every number below is a prediction of the L2 simulator"


def _plan(args, study, arch) -> list[Case]:
    cases = study.plan(arch)
    if args.seq is not None:
        if args.seq <= 0:
            raise UsageError(f"--seq {args.seq} must be a positive sequence length")
        cases = [replace(c, problem=replace(c.problem, S_q=args.seq, S_kv=args.seq))
                 for c in cases]
    if args.filter:
        try:
            rx = re.compile(args.filter)
        except re.error as e:
            raise UsageError(f"--filter {args.filter!r} is not a valid regular expression: {e}")
        cases = [c for c in cases if rx.search(c.id) or rx.search(c.panel)]
        if not cases:
            raise UsageError(f"--filter {args.filter!r} matches no case; see --dry-run for ids")
    return cases


def _print_plan(console, study, arch, cases: list[Case]) -> None:
    from rich.table import Table
    from spec import TileGrid
    t = Table(title=f"{study.name} on {arch.name}: {len(cases)} cases")
    for col in ("panel", "variant", "problem", "resident CTAs", "tile pairs"):
        t.add_column(col)
    for c in cases:
        g = TileGrid(c.problem, c.variant.tiles)
        pairs = sum(g.kv_tiles_for(i) for i in range(g.n_q)) * g.n_bh
        t.add_row(c.panel, c.variant.id(c.problem), c.problem.label, str(c.resident), f"{pairs:,}")
    console.print(t)
    probs = {c.problem.S_kv: c.problem for c in cases}
    for p in probs.values():
        console.print(f"  S={p.S_kv}: {describe_scale(arch, p)}")


def _simulate(args, console, study, arch, cases, run_dir: Path) -> list:
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)
    from spec.records import write_csv
    from .simulate import rows_for, simulate_case

    capacity = int(args.capacity_mib * MiB) if args.capacity_mib else arch.l2_bytes
    if capacity <= 0:
        raise UsageError(f"--capacity-mib {args.capacity_mib} must be positive")
    results, rows = [], []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=False) as progress:
        task = progress.add_task("simulating", total=len(cases))
        for c in cases:
            progress.update(task, description=f"simulating {c.variant.id(c.problem)} {c.problem.label}")
            r = simulate_case(c, arch, capacity)
            results.append(r)
            rows.extend(rows_for(r, run=run_dir.name, study=study.name, arch=arch))
            progress.advance(task)
    write_csv(run_dir / "counters.csv", rows)
    return results, capacity


def _summary(console, results, capacity: int) -> None:
    from rich.table import Table
    t = Table(title=f"SIMULATED L2 misses (fully associative LRU, {capacity / MiB:.1f} MiB)")
    for col in ("panel", "variant", "B", "S", "misses", "non-compulsory", "reduction vs linear"):
        t.add_column(col, justify="right" if col not in ("panel", "variant") else "left")
    linear = {}
    for r in results:
        c = r.case
        key = (c.panel, c.problem, c.variant.schedule, c.variant.tiles)
        if c.variant.order.label == "linear":
            linear[key] = r.counts
    for r in results:
        c, k = r.case, r.counts
        base = linear.get((c.panel, c.problem, c.variant.schedule, c.variant.tiles))
        red = ""
        if base is not None and c.variant.order.label != "linear" and base.misses:
            red = f"{100 * (1 - k.misses / base.misses):.1f}% misses"
            if base.noncompulsory_misses:
                red += f", {100 * (1 - k.noncompulsory_misses / base.noncompulsory_misses):.1f}% non-comp."
        t.add_row(c.panel, c.variant.id(c.problem), str(c.problem.B), str(c.problem.S_q),
                  f"{k.misses:,}", f"{k.noncompulsory_misses:,}", red)
    console.print(t)


def run(args) -> int:
    from rich.console import Console
    console = Console(width=None if sys.stdout.isatty() else 150)
    if args.list:
        for s in STUDIES.values():
            console.print(f"[bold]{s.name}[/]: {s.description} (figures {', '.join(s.figures)})")
        return 0
    if not args.study:
        raise UsageError(f"name a study (known: {', '.join(STUDIES)}) or pass --list")
    study = get_study(args.study)
    if not args.arch:
        raise UsageError(f"--arch is required; known: {', '.join(known_archs())}")
    arch = get_arch(args.arch)
    cases = _plan(args, study, arch)
    if args.dry_run:
        _print_plan(console, study, arch, cases)
        return 0
    if args.capacity_mib is not None and args.capacity_mib <= 0:
        raise UsageError(f"--capacity-mib {args.capacity_mib} must be positive")
    mode, why = _resolve_mode(args.mode, study, _has_cuda_gpu() if args.mode != "simulate" else False)
    out = args.out or default_run_dir(arch.name, study.name, mode)
    check_free(out)
    console.print(f"[bold yellow]{why}[/]")
    t0 = time.perf_counter()
    with atomic_run_dir(out) as tmp:
        results, capacity = _simulate(args, console, study, arch, cases, tmp)
        figures = []
        if not args.no_figures:
            from paper_figures import render_run
            figures = render_run(tmp, arch.name, tmp / "figures", console=console)
        write_manifest(tmp, study=study.name, mode=mode, arch=arch, source="simulated",
                       parameters={"capacity_bytes": capacity, "seq_override": args.seq,
                                   "filter": args.filter, "cases": [c.id for c in cases]},
                       figures=figures, wall_seconds=round(time.perf_counter() - t0, 1))
    _summary(console, results, capacity)
    console.print(f"wrote {out} ({time.perf_counter() - t0:.0f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (UsageError, UnknownArch, UnknownStudy, InvalidProblem, RunDirExists) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: no run directory was written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

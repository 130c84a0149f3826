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

from spec import InvalidProblem, detect, get_arch, known_archs
from spec.arch import MiB, UnknownArch

from .rundir import RunDirExists, atomic_run_dir, check_free, default_run_dir, write_manifest
from spec.case import Case

from .studies import STUDIES, UnknownStudy, describe_scale, get_study


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
    p.add_argument("--reps", type=int, help="timed repetitions per variant (measure; default: "
                   "the study's)")
    p.add_argument("--seed", type=int, default=0, help="input generator seed (measure)")
    p.add_argument("--metric-set", default="hopper", help="ncu metric set: paper, hopper")
    prof = p.add_mutually_exclusive_group()
    prof.add_argument("--no-profile", action="store_true", help="measure mode: time only, no ncu")
    prof.add_argument("--profile", action="store_true",
                      help="measure mode: run ncu even for a study that is timed only by default")
    return p


def _has_cuda_gpu() -> bool:
    return detect() is not None


def _resolve_mode(requested: str, study, has_gpu: bool) -> tuple[str, str]:
    """(mode, one-line reason)."""
    can_measure = study.measurable
    if requested == "simulate":
        return "simulate", "simulating (--mode simulate): predictions, not measurements"
    if requested == "measure":
        if not can_measure:
            raise UsageError(f"study {study.name!r} is simulator-only (nothing in it runs on a "
                             "GPU); use --mode simulate")
        if not has_gpu:
            raise UsageError("--mode measure needs a CUDA GPU and none was found "
                             "(torch.cuda.is_available() is False); use --mode simulate")
        return "measure", "measuring on the GPU (--mode measure)"
    if has_gpu and can_measure:
        return "measure", "auto: CUDA GPU found, measuring"
    why = "no CUDA GPU found" if not has_gpu else f"study {study.name!r} is simulator-only"
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


def _simulate(args, console, study, arch, cases, run_dir: Path) -> tuple[list, dict]:
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)
    from spec.records import write_csv
    from .simulate import rows_for, simulate_case

    capacity = int(args.capacity_mib * MiB) if args.capacity_mib else arch.l2_bytes
    rows = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=False) as progress:
        task = progress.add_task("simulating", total=len(cases))
        for c in cases:
            progress.update(task, description=f"simulating {c.id}")
            if study.simulate is not None:
                rows.extend(study.simulate(c, arch, capacity, run=run_dir.name, study=study.name))
            else:
                rows.extend(rows_for(simulate_case(c, arch, capacity), run=run_dir.name,
                                     study=study.name, arch=arch))
            progress.advance(task)
    write_csv(run_dir / "counters.csv", rows)
    return rows, {"source": "simulated", "capacity_bytes": capacity}


def _measure(args, console, study, arch, cases, run_dir: Path) -> tuple[list, dict]:
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)
    from spec.records import write_csv
    from . import measure

    live = detect()
    reps = args.reps if args.reps is not None else study.reps
    if reps < 1:
        raise UsageError(f"--reps {reps} must be at least 1")
    if live.name != arch.name:
        raise UsageError(f"--arch {arch.name} was asked for, but the GPU present is "
                         f"{live.marketing_name} ({live.name}); pass --arch {live.name}")
    console.print(f"compiling {len(cases)} variants in parallel ...")
    for err in measure.precompile(cases):
        console.print(f"[yellow]precompile[/] {err}")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("checking and timing", total=len(cases))
        outcome = measure.check_and_time(cases, live, run=run_dir.name, study=study.name,
                                         reps=reps, seed=args.seed, timed=study.timed,
                                         progress=lambda n: progress.advance(task, n))
    write_csv(run_dir / "timing.csv", outcome.rows)
    for case_id, why in outcome.failed.items():
        console.print(f"[red]FAILED[/] {case_id}: {why}")
    params = {"source": "measured", "device": measure.device_facts(), "seed": args.seed,
              "reps": reps if study.timed else 0, "l2_state": "cold", "failed": outcome.failed}
    rows = list(outcome.rows)
    if args.no_profile or not (study.profiled or args.profile):
        params["profiling"] = "skipped (--no-profile)" if args.no_profile else \
            f"not part of the {study.name} study (pass --profile)"
    elif outcome.passed:
        from profiles.ingest import IngestError
        from profiles.ncu import NcuError
        console.print(f"profiling {len(outcome.passed)} cases under ncu ...")
        try:
            counters, settings = measure.profile(outcome.passed, live, run_dir,
                                                 run=run_dir.name, study=study.name,
                                                 metric_set=args.metric_set, seed=args.seed)
        except (NcuError, IngestError) as e:
            console.print(f"[red]profiling failed[/]: {e}")
            params["profiling"] = f"failed: {e}"
        else:
            write_csv(run_dir / "counters.csv", counters)
            rows += counters
            params["profiling"] = settings
    return rows, params


def _summary(console, cases: list[Case], rows: list, title: str) -> None:
    """One line per case: misses, non-compulsory misses, time, and the change vs its linear twin."""
    import statistics
    from rich.table import Table
    from spec.records import Metric

    values: dict = {}
    for r in rows:
        values.setdefault((r.variant, r.B, r.S_q, r.causal, r.metric), []).append(r.value)

    def get(c: Case, metric: str, agg=statistics.median):
        v = values.get((c.variant.id(c.problem), c.problem.B, c.problem.S_q, c.problem.causal,
                        metric))
        return agg(v) if v else None

    def twin(c: Case) -> Case | None:
        return next((t for t in cases if t.panel == c.panel and t.problem == c.problem
                     and t.variant.schedule == c.variant.schedule
                     and t.variant.tiles == c.variant.tiles
                     and t.variant.order.label == "linear"), None)

    t = Table(title=title)
    for col in ("panel", "variant", "B", "S", "misses", "non-compulsory", "time ms", "TFLOPS",
                "vs linear"):
        t.add_column(col, justify="left" if col in ("panel", "variant") else "right")
    fmt = lambda x, f="{:,.0f}": "" if x is None else f.format(x)   # noqa: E731
    for c in cases:
        miss, nc = get(c, Metric.L2_TEX_MISSES), get(c, Metric.NONCOMPULSORY_MISSES)
        ms, tf = get(c, Metric.KERNEL_TIME_MS), get(c, Metric.TFLOPS)
        change = []
        base = twin(c)
        if base is not None and base is not c:
            for label, mine, theirs in (("misses", miss, get(base, Metric.L2_TEX_MISSES)),
                                        ("non-comp.", nc, get(base, Metric.NONCOMPULSORY_MISSES)),
                                        ("time", ms, get(base, Metric.KERNEL_TIME_MS))):
                if mine is not None and theirs:
                    change.append(f"{100 * (mine / theirs - 1):+.1f}% {label}")
        t.add_row(c.panel, c.variant.id(c.problem), str(c.problem.B), str(c.problem.S_q),
                  fmt(miss), fmt(nc), fmt(ms, "{:.3f}"), fmt(tf, "{:.1f}"), ", ".join(change))
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
        runner = _simulate if mode == "simulate" else _measure
        rows, params = runner(args, console, study, arch, cases, tmp)
        figures = []
        if not args.no_figures:
            from paper_figures import render_run
            figures = render_run(tmp, arch.name, tmp / "figures", console=console)
        write_manifest(tmp, study=study.name, mode=mode, arch=arch,
                       parameters={"seq_override": args.seq, "filter": args.filter,
                                   "cases": [c.id for c in cases], **params},
                       figures=figures, wall_seconds=round(time.perf_counter() - t0, 1))
    title = ("SIMULATED L2 (fully associative LRU, "
             f"{params['capacity_bytes'] / MiB:.1f} MiB): predictions, not measurements"
             if mode == "simulate" else f"MEASURED on {params['device']['gpu']}")
    _summary(console, cases, rows, title)
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

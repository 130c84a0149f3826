"""``python -m experiments.run <study> --arch <name>``: plan, run and record a study.

    python -m experiments.run --list
    python -m experiments.run sawtooth --arch gb10 --dry-run    # the plan and the work it means
    python -m experiments.run sawtooth --arch gb10              # no GPU here: simulates, says so

Modes: ``simulate`` runs the study's cases through the L2 simulator (CPU only); ``measure`` runs the
kernels on the GPU; ``auto`` measures when a CUDA GPU is present and the study can be measured, and
simulates otherwise, printing one line that says which and why. A study that is timed only (its
result is kernel time beside SDPA) has nothing to simulate: it needs a GPU.

Results go to a new run directory (``runs/<arch>/<study>/<stamp>-<mode>`` unless ``--out``),
reserved before the work starts and published only when complete (``experiments.rundir``): tidy
``counters.csv`` / the study's timing file, ``manifest.json`` (with the command that re-runs it)
and ``figures/``. Bad input exits with code 2 and one line naming the problem and the fix, before
anything is written; Ctrl-C and SIGTERM leave nothing behind.
"""
from __future__ import annotations

import argparse
import math
import re
import shlex
import signal
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from spec import InvalidProblem, TileGrid, detect, get_arch, known_archs
from spec.arch import MiB, UnknownArch
from spec.case import Case

from profiles.metrics import DEFAULT_GROUPS, get_groups

from . import shard
from .rundir import (BadRunDir, RunDirExists, command_line, default_run_dir, reserved_run_dir,
                     write_manifest)
from .studies import (STUDIES, UnknownStudy, at_length, describe_scale, get_study, lengths,
                      kv_bytes_per_head)

MODULE = "experiments.run"

# --capacity-mib bounds: at least one K and one V tile of the plan's largest tiles (the simulator
# caches whole tiles), at most this many times the largest registered L2 (beyond that every
# study's data fit and the cache is simply "infinite").
CAPACITY_MAX_L2S = 16

# Peak memory of simulate mode per tile access of the largest case: the trace (int32 keys) and
# the stack distances (the trace is built in one pass, spec.build_trace). Measured on the
# development machine as the growth of peak RSS over the process's baseline (numba kernels
# compiled): 12.1 B at 33.6 M accesses (sawtooth gb10, causal) and 12.1 B at 67.1 M
# (non-causal); rounded up. (43 B before the one-pass trace build.)
SIM_BYTES_PER_ACCESS = 13
SIM_BASE_BYTES = 250 * MiB        # the process before the first case (numpy, numba, rich)


class UsageError(ValueError):
    """A problem with the command line; printed as one line, exit code 2."""


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every cleanup runs (like KeyboardInterrupt)."""


_SIGNALLED: list[int] = []
"""Signals received during a run, first first. Recorded as well as raised because a raise can be
lost: one that lands in a C callback (numba's LLVM object-cache hook, while a kernel of the
simulator compiles) is printed and dropped, and the run would go on to publish its directory."""


def _on_signal(signum, frame):
    _SIGNALLED.append(signum)
    if len(_SIGNALLED) == 1:                               # one cleanup, not two
        raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated()


def _raise_if_signalled() -> None:
    """Raise the first signal's exception if one arrived and its raise was lost."""
    if _SIGNALLED:
        raise KeyboardInterrupt() if _SIGNALLED[0] == signal.SIGINT else Terminated()


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad argument reported in one line (no usage block) and exit 2."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m experiments.run",
                description="Run a study of the Sawtooth cache-locality framework.")
    p.add_argument("study", nargs="?", help="study name (see --list)")
    p.add_argument("--arch", help=f"target architecture: {', '.join(known_archs())}")
    p.add_argument("--list", action="store_true", help="list the studies and exit")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (cases × variants) and the estimated work only")
    p.add_argument("--mode", choices=("auto", "measure", "simulate"), default="auto")
    p.add_argument("--out", type=Path, help="run directory to create (must not exist)")
    p.add_argument("--model", choices=("timed", "lockstep"), default="timed",
                   help="simulate: the timed simulator with the arch's parameters (default) or "
                        "the lock-step LRU (see experiments/simulate.py)")
    p.add_argument("--capacity-mib", type=float,
                   help="simulated L2 capacity in MiB (an effective capacity; default: the arch's L2)")
    p.add_argument("--seq", type=lengths,
                   help="override every case's sequence length (quick runs); several lengths, "
                        "comma-separated, run the plan at each")
    p.add_argument("--filter", help="regular expression on case ids: run only the matching cases")
    p.add_argument("--no-figures", action="store_true", help="skip drawing figures")
    p.add_argument("--reps", type=int, help="timed repetitions per variant (measure; default: "
                   "the study's)")
    p.add_argument("--seed", type=int, default=0, help="input generator seed (measure)")
    p.add_argument("--groups", default=",".join(DEFAULT_GROUPS),
                   help="ncu metric groups, each meant for one replay pass (profiles/metrics.py; "
                   f"default {','.join(DEFAULT_GROUPS)})")
    p.add_argument("--repeats", type=int, default=3,
                   help="profiled launches per case and metric group (median, min..max)")
    p.add_argument("--sessions", type=int,
                   help="ncu sessions (fresh processes, fresh allocations) the repeats are split "
                   "over (default: one per repeat; fewer is faster but hides the between-session "
                   "spread, see profiles/collect.py)")
    prof = p.add_mutually_exclusive_group()
    prof.add_argument("--no-profile", action="store_true", help="measure mode: time only, no ncu")
    prof.add_argument("--profile", action="store_true",
                      help="measure mode: run ncu even for a study that is timed only by default")
    shard.add_arguments(p)
    return p


def _check_profiling(args) -> None:
    """The ncu options, checked before any work (one line naming the fix)."""
    try:
        get_groups(tuple(args.groups.split(",")))
    except ValueError as e:
        raise UsageError(f"--groups {args.groups!r}: {e}") from None
    if args.repeats < 1:
        raise UsageError(f"--repeats {args.repeats} must be at least 1")
    if args.sessions is None:
        args.sessions = args.repeats
    if not 1 <= args.sessions <= args.repeats:
        raise UsageError(f"--sessions {args.sessions} must be between 1 and --repeats "
                         f"({args.repeats})")


def _has_cuda_gpu() -> bool:
    return detect() is not None


def simulatable(study) -> bool:
    """Whether simulate mode has anything to predict: L2 counters (a profiled study) or the
    study's own simulate rows. A timed-only study (ladder, scaling, longseq, bench, ...) does not:
    the simulator predicts misses, not time."""
    return study.profiled or study.simulate is not None


def _resolve_mode(requested: str, study, has_gpu: bool) -> tuple[str, str]:
    """(mode, one-line reason)."""
    can_measure = study.measurable
    timed_only = (f"study {study.name!r} is GPU-only: it measures time, and the simulator "
                  "predicts L2 counters, not time")
    if requested == "simulate":
        if not simulatable(study):
            raise UsageError(f"{timed_only}: there is nothing to simulate; run it on a GPU with "
                             "--mode measure")
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
    if not simulatable(study):
        raise UsageError(f"{timed_only}; it needs a CUDA GPU and none was found: run it on a "
                         "GPU machine")
    why = "no CUDA GPU found" if not has_gpu else f"study {study.name!r} is simulator-only"
    return "simulate", f"auto: {why}, SIMULATING: every number below is a prediction of the L2 simulator"


def _plan(args, study, arch) -> list[Case]:
    cases = study.plan(arch)
    if args.seq is not None:
        try:
            cases = at_length(cases, args.seq)
        except ValueError as e:
            raise UsageError(str(e)) from None
    if args.filter:
        try:
            rx = re.compile(args.filter)
        except re.error as e:
            raise UsageError(f"--filter {args.filter!r} is not a valid regular expression: {e}")
        cases = [c for c in cases if rx.search(c.id) or rx.search(c.panel)]
        if not cases:
            raise UsageError(f"--filter {args.filter!r} matches no case; see --dry-run for ids")
    return cases


def capacity_bounds(arch, cases: list[Case]) -> tuple[int, int]:
    """(smallest, largest) capacity in bytes that ``--capacity-mib`` accepts for this plan."""
    lo = max(2 * c.variant.tiles.n * c.problem.D * c.problem.dtype.nbytes for c in cases)
    hi = CAPACITY_MAX_L2S * max(get_arch(a).l2_bytes for a in known_archs())
    return lo, hi


def _capacity(args, arch, cases: list[Case]) -> int:
    """The simulated capacity in bytes: ``--capacity-mib`` checked against ``capacity_bounds``,
    or the arch's L2."""
    if args.capacity_mib is None:
        return arch.l2_bytes
    mib = args.capacity_mib
    lo, hi = capacity_bounds(arch, cases)
    if not math.isfinite(mib) or mib <= 0:
        raise UsageError(f"--capacity-mib {mib} must be a positive finite number of MiB "
                         f"(e.g. {arch.l2_mib:.0f}, the L2 of {arch.name})")
    if not lo <= mib * MiB <= hi:
        raise UsageError(f"--capacity-mib {mib:g} is outside {lo / MiB:.4g} .. {hi / MiB:.0f} MiB "
                         f"(one K and one V tile of this plan .. {CAPACITY_MAX_L2S}x the largest "
                         f"registered L2); pass a capacity in that range")
    return int(mib * MiB)


# -- the work a plan means -------------------------------------------------------------------------

def tile_accesses(case: Case) -> int:
    """Tile accesses of the case's trace (``spec.build_trace``): every (Q tile, K/V tile) pair
    reads one K and one V tile, and every work item (one Q tile of one head) loads Q once and
    stores O once."""
    g = TileGrid(case.problem, case.variant.tiles)
    pairs = sum(g.kv_tiles_for(i) for i in range(g.n_q)) * g.n_bh
    return 2 * pairs + 2 * g.n_q * g.n_bh


@dataclass(frozen=True)
class Calibration:
    accesses: int
    seconds: float
    log_factor: int      # 1: cost grows as n log n (lock-step stack distances), 0: as n (timed)

    def seconds_for(self, n: int) -> float:
        """Stack distances cost O(n log n) (a Fenwick tree over the access stream); the timed
        event loop O(n)."""
        lg = (lambda x: math.log2(max(x, 2))) if self.log_factor else (lambda x: 1.0)
        return self.seconds / (self.accesses * lg(self.accesses)) * n * lg(n)


def calibrate(model: str = "lockstep") -> Calibration:
    """Simulate one fixed case of about 5 M accesses on this machine with ``model``, after a tiny
    warm-up that loads the JIT-compiled kernels; the faster of two runs (other load on the
    machine only slows a run down). The timed model runs it exactly, so its estimate is an upper
    bound for plans whose large cases are sampled."""
    from spec import Backend, CtaSchedule, Problem, ScanOrder, Tiles, Variant
    from .simulate import model_params, simulate_case
    arch = get_arch("gb10")
    v = Variant(Backend.CUDA, ScanOrder.sawtooth(), CtaSchedule.persistent(48), Tiles(80, 80))
    cases = [Case(Problem(1, 1, s, 64), v, 48, "calibration") for s in (2048, 131072, 131072)]
    if model == "lockstep":
        runs = [simulate_case(c, arch, arch.l2_bytes) for c in cases]
        return Calibration(runs[1].accesses, min(r.seconds for r in runs[1:]), 1)
    from analysis.cache import timesim
    tp = model_params(arch).time_params(arch)
    secs = []
    for c in cases:
        t0 = time.perf_counter()
        timesim.simulate_case(c, tp, arch.sector_bytes)
        secs.append(time.perf_counter() - t0)
    return Calibration(tile_accesses(cases[1]), min(secs[1:]), 0)


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def _print_plan(console, study, arch, cases: list[Case], capacity: int, model: str) -> None:
    from rich.table import Table
    t = Table(title=f"{study.name} on {arch.name}: {len(cases)} cases")
    for col in ("panel", "variant", "problem", "resident CTAs", "tile accesses"):
        t.add_column(col)
    acc = [tile_accesses(c) for c in cases]
    for c, n in zip(cases, acc):
        t.add_row(c.panel, c.variant.id(c.problem), c.problem.label, str(c.resident), f"{n:,}")
    console.print(t)
    probs = {c.problem.S_kv: c.problem for c in cases}
    for p in probs.values():
        console.print(f"  S={p.S_kv}: {describe_scale(arch, p)}")
    total, top = sum(acc), max(acc)
    console.print(f"work: {len(cases)} cases, {total / 1e6:,.1f} M tile accesses "
                  f"(largest case {top / 1e6:,.1f} M)")
    if simulatable(study):
        cal = calibrate(model)
        secs = sum(cal.seconds_for(n) for n in acc)
        calibrated = (f"calibrated now: {cal.accesses / 1e6:.1f} M accesses in "
                      f"{cal.seconds:.2f} s, scaled as {'n log n' if cal.log_factor else 'n'}")
        if model == "lockstep":
            peak = SIM_BASE_BYTES + SIM_BYTES_PER_ACCESS * top
            console.print(f"simulate (lockstep model, {capacity / MiB:g} MiB L2): about "
                          f"{_duration(secs)} on this machine ({calibrated}), peak memory about "
                          f"{peak / 2**30:.1f} GiB ({SIM_BYTES_PER_ACCESS} B per access of the "
                          "largest case)")
        else:
            console.print(f"simulate (timed model, {capacity / MiB:g} MiB L2): at most about "
                          f"{_duration(secs)} on this machine ({calibrated}; "
                          "cases past the SHARDS size rule are sampled and take less)")
    if study.measurable:
        console.print(f"measure: {len(cases)} variants to compile (in parallel) and run on a GPU")


# -- the two modes ---------------------------------------------------------------------------------

def _simulate(args, console, study, arch, cases, work: Path, run: str,
              capacity: int) -> tuple[list, dict]:
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)
    from spec.records import write_csv
    from .simulate import model_params, rows_for, simulate_case, timed_rows

    params = model_params(arch) if args.model == "timed" else None
    rows = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=False) as progress:
        task = progress.add_task("simulating", total=len(cases))
        for c in cases:
            progress.update(task, description=f"simulating {c.id}")
            if study.simulate is not None:
                rows.extend(study.simulate(c, arch, capacity, run=run, study=study.name))
            elif params is not None:
                rows.extend(timed_rows(c, arch, params, None if args.capacity_mib is None
                                       else capacity, run=run, study=study.name))
            else:
                rows.extend(rows_for(simulate_case(c, arch, capacity), run=run,
                                     study=study.name, arch=arch))
            progress.advance(task)
    write_csv(work / "counters.csv", rows)
    model = "lockstep" if params is None or study.simulate is not None else "timed"
    if model == "timed" and args.capacity_mib is None:
        capacity = params.time_params(arch).capacity_bytes
    return rows, {"source": "simulated", "capacity_bytes": capacity, "model": model,
                  **({"params": asdict(params)} if model == "timed" else {})}


def _measure(args, console, study, arch, cases, work: Path, run: str) -> tuple[list, dict]:
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
    hook = study.measure or measure.check_and_time
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("checking and timing", total=len(cases))
        outcome = hook(cases, live, run=run, study=study.name, reps=reps, seed=args.seed,
                       timed=study.timed, progress=lambda n: progress.advance(task, n))
    write_csv(work / study.rows_file, outcome.rows)
    for line in outcome.summary:
        console.print(f"  {line}")
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
            counters, every, settings = measure.profile(
                outcome.passed, live, work, run=run, study=study.name,
                groups=tuple(args.groups.split(",")), repeats=args.repeats,
                sessions=args.sessions, seed=args.seed)
        except (NcuError, IngestError) as e:
            console.print(f"[red]profiling failed[/]: {e}")
            params["profiling"] = f"failed: {e}"
        else:
            write_csv(work / "counters.csv", counters)
            write_csv(work / "counters_repeats.csv", every)
            rows += counters
            from profiles.counters import failing_checks, flagged
            kinds: dict[str, int] = {}
            for r in flagged(counters):
                for f in filter(None, r.flags.split(";")):
                    kinds[f.split("=")[0]] = kinds.get(f.split("=")[0], 0) + 1
            bad = failing_checks(counters)
            params["consistency_failures"] = [f"{r.variant} {r.metric}" for r in bad]
            if kinds:
                console.print("flagged summary rows (see the flags column of counters.csv): "
                              + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
            params["profiling"] = settings
    return rows, params


# -- what a user reads at the end ------------------------------------------------------------------

def _count(x: float) -> str:
    """Counts with an SI suffix (the full values are in the CSV)."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.1f}{suffix}"
    return f"{x:.0f}"


# (key, header, format); dropped from the right when the table is wider than the terminal
_COLUMNS = (("variant", "variant", str), ("problem", "problem", str), ("B", "B", str),
            ("S", "S", str),
            ("d_miss", "Δ misses", "{:+.1f}%".format), ("miss", "misses", _count),
            ("d_ms", "Δ time", "{:+.1f}%".format), ("ms", "time ms", "{:.3f}".format),
            ("d_nc", "Δ non-comp.", "{:+.1f}%".format), ("nc", "non-comp.", _count),
            ("tf", "TFLOPS", "{:.1f}".format))


def summary_table(cases: list[Case], rows: list, title: str, width: int):
    """The results as a rich Table that fits ``width`` columns, and the headers left out.

    One row per case under a heading line per panel (its B and S when the panel has one of
    each): misses, non-compulsory misses, time, TFLOPS and the change against the case's linear
    twin (same panel, problem, schedule and tiles). Variant ids and numbers are never cut: when
    the table is too wide, whole columns are left out, least important first (the full table is
    the run's CSV)."""
    from rich import box
    from rich.table import Table
    from spec.records import PROBLEM_COLUMNS as shape, Metric, case_fields

    values: dict = {}
    for r in rows:
        values.setdefault((r.variant, *(getattr(r, k) for k in shape), r.metric),
                          []).append(r.value)

    def get(c: Case, metric: str):
        p = case_fields(c.problem)
        v = values.get((c.variant.id(c.problem), *(p[k] for k in shape), metric))
        return statistics.median(v) if v else None

    def twin(c: Case) -> Case | None:
        return next((t for t in cases if t.panel == c.panel and t.problem == c.problem
                     and t.variant.schedule == c.variant.schedule
                     and t.variant.tiles == c.variant.tiles
                     and t.variant.order.label == "linear"), None)

    def change(mine, theirs):
        return None if mine is None or not theirs else 100 * (mine / theirs - 1)

    panels: dict[str, list[Case]] = {}
    for c in cases:
        panels.setdefault(c.panel, []).append(c)
    varies = {k for k, f in (("B", lambda c: c.problem.B), ("S", lambda c: c.problem.S_q))
              if any(len({f(c) for c in group}) > 1 for group in panels.values())}
    # problems that differ in more than B and S (heads, dtype, S_kv: the shapes study) are named
    # by their label, or two rows of one variant would look alike
    labelled = any(len({(c.variant.id(c.problem), c.problem.B, c.problem.S_q) for c in g})
                   < len({(c.variant.id(c.problem), c.problem) for c in g})
                   for g in panels.values())
    if labelled:
        varies = {"problem"}
    cells: list[dict | str] = []
    for panel, group in panels.items():
        head = panel
        if "B" not in varies and not labelled:
            head += f"  B={group[0].problem.B}"
        if "S" not in varies and not labelled:
            head += f" S={group[0].problem.S_q}"
        cells.append(head)
        for c in group:
            base = twin(c)
            base = None if base is c else base
            d = {"variant": c.variant.id(c.problem), "B": c.problem.B, "S": c.problem.S_q,
                 "problem": c.problem.label,
                 "miss": get(c, Metric.L2_TEX_MISSES), "nc": get(c, Metric.NONCOMPULSORY_MISSES),
                 "ms": get(c, Metric.KERNEL_TIME_MS), "tf": get(c, Metric.TFLOPS)}
            if base is not None:
                for key, src in (("d_miss", "miss"), ("d_nc", "nc"), ("d_ms", "ms")):
                    metric = {"miss": Metric.L2_TEX_MISSES, "nc": Metric.NONCOMPULSORY_MISSES,
                              "ms": Metric.KERNEL_TIME_MS}[src]
                    d[key] = change(d[src], get(base, metric))
            cells.append(d)
    data = [d for d in cells if isinstance(d, dict)]
    cols = [(k, h, f) for k, h, f in _COLUMNS
            if k == "variant" or (k in ("B", "S", "problem") and k in varies)
            or (k not in ("B", "S", "problem") and any(d.get(k) is not None for d in data))]
    text = lambda d, k, f: "" if d.get(k) is None else f(d[k])    # noqa: E731

    def widths(cols):
        w = [max([len(h)] + [len(text(d, k, f)) for d in data]) for k, h, f in cols]
        w[0] = max(w[0], *(len(c) for c in cells if isinstance(c, str)))
        return sum(w) + 3 * (len(cols) - 1)     # pad, rule, pad between columns

    left_out = []
    while len(cols) > 1 and widths(cols) > width:
        left_out.append(cols.pop()[1])
    t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=False,
              title_justify="left")
    for k, h, f in cols:
        t.add_column(h, justify="left" if k == "variant" else "right", no_wrap=True)
    for c in cells:
        if isinstance(c, str):
            t.add_row(f"[bold]{c}[/]", *[""] * (len(cols) - 1))
        else:
            t.add_row(*(text(c, k, f) for k, h, f in cols))
    return t, left_out[::-1]


def _model_label(params: dict) -> str:
    if params["model"] == "lockstep":
        return "lock-step fully associative LRU"
    p = params["params"]
    return (f"timed model, {p['partitions']} partition(s), r={p['miss_ratio']:g}, "
            f"{'fitted on ' + p['fit_study'] if p['fitted'] else 'default parameters, not fitted'}")


def _fits_notes(cases: list[Case], capacity: int) -> list[str]:
    """A line per sequence length whose K+V per head fits in the simulated capacity: there,
    after the first pass over a head, its K/V tiles can all stay cached, whatever the order."""
    out = {}
    for p in sorted({c.problem for c in cases}, key=lambda p: (p.S_kv, p.D)):
        kv = kv_bytes_per_head(p)
        if kv <= capacity and (p.S_kv, kv) not in out:
            s_max = capacity // (2 * p.D * p.dtype.nbytes)
            out[p.S_kv, kv] = (f"note: at S={p.S_kv} K+V per head ({kv / MiB:.3g} MiB) fits in the "
                       f"{capacity / MiB:g} MiB simulated L2, so the K/V order can save few "
                       f"misses; it exceeds it for S > {s_max}, or pass --capacity-mib below "
                       f"{kv / MiB:.3g}")
    return list(out.values())


def _figure_lines(study, report: list[dict], where: str) -> list[str]:
    """The study's figures (drawn, or skipped with the reason) and one line for all others."""
    mine = [r for r in report if r["figure"] in study.figures]
    drawn = [r["figure"] for r in report if "files" in r]
    lines = [f"figures: {', '.join(drawn)} in {where}" if drawn else "figures: none drawn"]
    lines += [f"  {r['figure']}: skipped ({r['skipped']})" for r in mine if "skipped" in r]
    others = [r for r in report if r["figure"] not in study.figures and "skipped" in r]
    if others:
        lines.append(f"  {len(others)} figures of other studies skipped (no rows for them in "
                     "this run)")
    return lines


def run(args, argv: list[str]) -> int:
    from rich.console import Console
    console = Console(width=None if sys.stdout.isatty() else 150)
    if args.list:
        for s in STUDIES.values():
            console.print(f"[bold]{s.name}[/]: {s.description} (figures {', '.join(s.figures)})")
        return 0
    if args.resume:
        args, argv = shard.resumed(args, build_parser())
    if not args.study:
        raise UsageError(f"name a study (known: {', '.join(STUDIES)}) or pass --list")
    study = get_study(args.study)
    if not args.arch:
        raise UsageError(f"--arch is required; known: {', '.join(known_archs())}")
    arch = get_arch(args.arch)
    cases = _plan(args, study, arch)
    capacity = _capacity(args, arch, cases)
    _check_profiling(args)
    if args.dry_run:
        _print_plan(console, study, arch, cases, capacity, args.model)
        if args.gpus is not None:
            shard.print_plan(console, args, study, cases)
        return 0
    gpus_elsewhere = args.executor == "slurm"        # the Slurm jobs have them, not this host
    mode, why = _resolve_mode(args.mode, study, args.mode != "simulate"
                              and (gpus_elsewhere or _has_cuda_gpu()))
    if shard.requested(args) and mode != "measure":
        raise UsageError("--gpus, --executor and --resume shard a measured run; simulate mode "
                         "runs on this CPU: leave them out")
    if mode == "measure" and args.capacity_mib is not None:
        raise UsageError("--capacity-mib sets the simulated L2 and means nothing when measuring; "
                         "add --mode simulate or leave it out")
    console.print(f"[bold yellow]{why}[/]")
    t0 = time.perf_counter()
    with reserved_run_dir(args.out, lambda: default_run_dir(arch.name, study.name, mode)) \
            as (out, work):
        if mode == "simulate":
            rows, params = _simulate(args, console, study, arch, cases, work, out.name, capacity)
        elif shard.requested(args):
            rows, params = shard.measure_sharded(args, argv, console, study, arch, cases, work,
                                                 out.name)
        else:
            rows, params = _measure(args, console, study, arch, cases, work, out.name)
        report = []
        if not args.no_figures:
            from paper_figures import render_run
            report = render_run(work, arch.name, work / "figures")
        write_manifest(work, command=command_line(MODULE, argv), study=study.name, mode=mode,
                       arch=arch, parameters={"seq_override": args.seq, "filter": args.filter,
                                              "cases": [c.id for c in cases], **params},
                       figures=report, wall_seconds=round(time.perf_counter() - t0, 1))
        _raise_if_signalled()                            # before the directory is published
    if args.resume:
        shard.retire(Path(args.resume))              # its successor is published
    title = (f"SIMULATED L2 ({_model_label(params)}, {params['capacity_bytes'] / MiB:g} MiB): "
             "predictions, not measurements"
             if mode == "simulate" else f"MEASURED on {params['device']['gpu']}")
    table, left_out = summary_table(cases, rows, title, console.width)
    console.print(table)
    files = sorted(p.name for p in out.iterdir() if p.is_file())
    console.print("counts in sectors (k, M, G = 10^3, 10^6, 10^9); Δ: change against the linear "
                  "twin" + (f"; left out at this width: {', '.join(left_out)}" if left_out else "")
                  + f"; every value is in {', '.join(f for f in files if f.endswith('.csv'))}")
    if mode == "simulate":
        for line in _fits_notes(cases, capacity):
            console.print(f"[yellow]{line}[/]")
    console.print(f"wrote {out} ({time.perf_counter() - t0:.0f} s): {', '.join(files)}")
    if not args.no_figures:
        for line in _figure_lines(study, report, str(out / "figures")):
            console.print(line)
    console.print(f"next: python -m paper_figures --arch {arch.name} --run {shlex.quote(str(out))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)

    _SIGNALLED.clear()
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _on_signal)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:   # not ignored (a `&` job)
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, _on_signal)
    try:
        return run(args, argv)
    except (UsageError, UnknownArch, UnknownStudy, InvalidProblem, RunDirExists, BadRunDir,
            shard.ShardError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except shard.IncompleteRun as e:
        print(e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: no run directory was written", file=sys.stderr)
        return 130
    except Terminated:
        print("terminated (SIGTERM): no run directory was written", file=sys.stderr)
        return 143
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    sys.exit(main())

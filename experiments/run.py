"""``python -m experiments.run <study> --arch <name>``: plan, run and record a study.

    python -m experiments.run --list
    python -m experiments.run sawtooth --arch gb10 --dry-run    # the plan and what it would cost
    python -m experiments.run sawtooth --arch gb10              # no GPU here: simulates, says so

Modes: ``simulate`` runs the study's cases through the L2 simulator (CPU only); ``measure`` runs the
kernels on the GPU; ``auto`` measures when a CUDA GPU is present and the study can be measured, and
simulates otherwise, printing one line that says which and why. A study that is timed only (its
result is kernel time beside SDPA) has nothing to simulate: it needs a GPU.

Before anything is printed every value of the command line is checked
(``experiments.runner.options``), and the run's time and peak memory are estimated in closed form
(``experiments.runner.costs``): a run over ``--time-limit`` or the free memory is refused unless
``--force``. ``--dry-run`` prints the plan and those estimates for each mode
(``experiments.runner.dryrun``). A run shows its progress phase by phase with an ETA
(``experiments.runner.progress``).

Results go to a new run directory (``runs/<arch>/<study>/<stamp>-<mode>`` unless ``--out``),
reserved before the work starts and published only when complete (``experiments.rundirs.rundir``):
tidy ``counters.csv`` / the study's timing file, ``manifest.json`` (with the command that re-runs
it and the seconds each phase took, beside their estimates) and ``figures/``. Bad input exits
with code 2 and one line naming the problem and the fix, before anything is written; so does a
full disk.

Ctrl-C, SIGTERM or a crash during a simulated run leave nothing behind (it is cheap to run
again). A measured run keeps every finished piece (the builds, each problem's check and timing,
each ncu session; ``experiments.rundirs.journal``) in ``<name>-incomplete/``, says so in one line,
and ``python -m experiments.run --resume <that directory>`` finishes it without measuring those
pieces again and publishes it as ``<name>`` (a sharded run resumes its missing shards the same
way, ``experiments.sharding.shard``).
"""
from __future__ import annotations

import errno
import os
import shlex
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

from analysis.data import DatasetError
from analysis.data.published import PAPER
from kernels.build.toolchain import scratch_dir
from spec import InvalidProblem, detect
from spec.arch import MiB, UnknownArch, no_gpu_reason

from .registry.studies import STUDIES, UnknownStudy
from .rundirs.journal import Journal
from .rundirs.rundir import (
    BadRunDir,
    RunDirExists,
    check_creatable,
    check_free,
    command_line,
    default_run_dir,
    reserved_run_dir,
    resume_line,
    write_incomplete,
    write_manifest,
)
from .runner import modes
from .runner.costs import tile_accesses  # noqa: F401 - re-exported
from .runner.dryrun import check_limits, print_plan
from .runner.options import (  # noqa: F401 - re-exported
    CAPACITY_MAX_L2S,
    UsageError,
    build_parser,
    capacity_bounds,
    checked,
    refuse_measure_only,
    resolve_mode,
)
from .runner.options import plan as _plan  # noqa: F401 - re-exported
from .runner.report import figure_lines as _figure_lines
from .runner.report import (  # noqa: F401 - re-exported
    fits_notes,
    model_label,
    published_misses,
    render_figures,
    summary_table,
)
from .sharding import shard

MODULE = "experiments.run"
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every cleanup runs (like KeyboardInterrupt)."""


class DiskFull(Exception):
    """No space left while the run was written: one line, exit 2 (nothing is left behind)."""


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


_KEPT: list[Path] = []
"""The incomplete run directory a stopped measured run left (its finished work kept)."""


def _worth_keeping(work: Path) -> bool:
    """Whether a stopped measured run finished anything: a journal entry or a sharded run's
    shards (finished ones, or the logs of failed ones)."""
    return bool(Journal(work).keys()) or (work / shard.SHARDS).is_dir()


def _kept_line(what: str) -> str:
    d = _KEPT[0]
    return (f"{what}: the finished work is kept in {d} (\"complete\": false in its manifest); "
            f"finish it with: {resume_line(d)}")


def _has_cuda_gpu() -> bool:
    return detect() is not None


def _write(args, argv, console, study, arch, cases, capacity, mode, out, work) -> tuple:
    if mode == "simulate":
        rows, params = modes.simulate(args, console, study, arch, cases, work, out.name,
                                      capacity, _raise_if_signalled)
    elif shard.requested(args):
        rows, params = shard.measure_sharded(args, argv, console, study, arch, cases, work,
                                             out.name)
    else:
        rows, params = modes.measure(args, console, study, arch, cases, work, out.name, detect())
    return rows, params


def run(args, argv: list[str]) -> int:
    from rich.console import Console
    # a terminal's width, or COLUMNS when set (a narrow log); else 150 for a pipe or file
    console = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 150)
    if args.list:
        for s in STUDIES.values():
            figs = (f"figures: {', '.join(s.figures)}" if s.figures else
                    "no figure: its rows are in the run's CSV")
            console.print(f"[bold]{s.name}[/]: {s.description} ({figs})")
        return 0
    own = STUDIES.get(args.study or "")
    if own is not None and own.entry is not None and not args.resume:
        from .registry.studies import hook
        return hook(own.entry)(args, argv, console)
    if args.resume:
        args, argv = shard.resumed(args, build_parser())
    study, arch, cases, capacity = checked(args)
    workers = modes.sim_workers(args, cases)
    elsewhere = args.executor == "slurm"             # the Slurm jobs have the GPUs, not this host
    has_gpu = args.mode != "simulate" and (elsewhere or _has_cuda_gpu())
    absent = "" if has_gpu or args.mode == "simulate" else no_gpu_reason()
    if args.dry_run:
        try:
            mode, _ = resolve_mode(args.mode, study, has_gpu, elsewhere, absent)
            why = (f"--mode {args.mode}: this command would {mode.upper()}"
                   + (f" ({absent})" if mode == "simulate" and not has_gpu
                      and args.mode == "auto" else ""))
        except UsageError as e:
            why = f"--mode {args.mode}: this command would stop: {e}"
        print_plan(console, args, study, arch, cases, capacity, why, workers)
        if args.gpus is not None:
            shard.print_plan(console, args, study, cases)
        return 0
    mode, why = resolve_mode(args.mode, study, has_gpu, elsewhere, absent)
    if shard.requested(args) and mode != "measure":
        raise UsageError("--gpus, --executor and --resume shard a measured run; simulate mode "
                         "runs on this CPU: leave them out")
    if mode == "simulate":
        refuse_measure_only(args, "--mode simulate" if args.mode == "simulate" else
                            absent.split(";")[0] if not has_gpu else
                            f"study {study.name!r} is simulator-only")
    if mode == "measure" and (args.exact or args.sample):
        flag = "--exact" if args.exact else "--sample"
        raise UsageError(f"{flag} sets how the simulator samples and means nothing when "
                         "measuring; add --mode simulate or leave it out")
    if mode == "simulate" and args.sample and modes.sim_model(args, study) != "timed":
        raise UsageError("--sample samples the timed simulator; the lock-step model and the reuse "
                         "study are exact: leave it out")
    if mode == "measure" and args.capacity_mib is not None:
        raise UsageError("--capacity-mib sets the simulated L2 and means nothing when measuring; "
                         "add --mode simulate or leave it out")
    if mode == "measure" and not shard.requested(args):
        modes.check_device(arch, detect())
    if not shard.requested(args) and not args.resume:
        check_limits(args, mode, study, arch, cases, capacity, workers,
                     _gpu_free() if mode == "measure" else None)
    if args.out is not None and not args.resume:    # before the first line: an --out taken or
        check_free(Path(args.out))                  # in the way is one line and nothing else
        check_creatable(Path(args.out))
    console.print(why, style="bold yellow", markup=False)
    t0 = time.perf_counter()
    measured = mode == "measure"
    with reserved_run_dir(args.out, lambda: default_run_dir(arch.name, study.name, mode),
                          on_debris=lambda line: console.print(f"[yellow]{line}[/]"),
                          keep=_worth_keeping if measured else None,
                          resume=Path(args.resume) if args.resume else None,
                          on_kept=_KEPT.append) as (out, work):
        try:
            given = {"seq_override": args.seq, "filter": args.filter,
                     "exact": mode == "simulate" and not args.sample,
                     "cases": [c.id for c in cases]}
            if measured and not args.resume:
                write_incomplete(work, command=command_line(MODULE, argv), study=study.name,
                                 mode=mode, arch=arch, parameters=given)
            rows, params = _write(args, argv, console, study, arch, cases, capacity, mode, out,
                                  work)
            fields = dict(command=command_line(MODULE, argv), study=study.name, mode=mode,
                          arch=arch, parameters=given | params)
            write_manifest(work, **fields, figures=[])        # the figures read the device
            report = [] if args.no_figures else render_figures(work, out, arch.name)
            write_manifest(work, **fields, figures=report,
                           wall_seconds=round(time.perf_counter() - t0, 1))
        except OSError as e:
            if e.errno in FULL_DISK:
                raise DiskFull(f"no space left on the device while writing "
                               f"{e.filename or work}; nothing was kept: free some space or "
                               "pass --out on another disk") from None
            raise
        _raise_if_signalled()                            # before the directory is published
    title = (f"SIMULATED L2 ({model_label(params)}, {params['capacity_bytes'] / MiB:g} MiB): "
             "predictions, not measurements"
             if mode == "simulate" else f"MEASURED on {params['device']['gpu']}")
    published = published_misses(arch.name)
    table, left_out = summary_table(cases, rows, title, console.width, published)
    console.print(table)
    files = sorted(p.name for p in out.iterdir() if p.is_file())
    console.print("counts in sectors (k, M, G = 10^3, 10^6, 10^9); Δ: change against the linear "
                  "twin" + (f"; left out at this width: {', '.join(left_out)}" if left_out else "")
                  + f"; every {mode}d value is in "
                  + ', '.join(f for f in files if f.endswith('.csv'))
                  + (f"; paper: the paper's published GB10 counts, never fitted (the "
                     f"registered dataset {PAPER}, file published.csv.xz; not in the run "
                     f"directory); err: the {mode}d count's error against them"
                     if published else ""))
    if mode == "simulate":
        for line in fits_notes(cases, capacity):
            console.print(f"[yellow]{line}[/]")
    console.print(f"wrote {out} ({time.perf_counter() - t0:.0f} s): {', '.join(files)}")
    if not args.no_figures:
        for line in _figure_lines(study, report, str(out / "figures")):
            console.print(line)
    hint = f"python -m paper_figures --arch {arch.name} --run {shlex.quote(str(out))}"
    console.print(f"next: {hint}", soft_wrap=True, markup=False)   # one line, however narrow
    return 0


def _gpu_free() -> int | None:
    try:
        import torch
        return int(torch.cuda.mem_get_info()[0]) if torch.cuda.is_available() else None
    except Exception:       # noqa: BLE001 - no usable device: the device check says so
        return None


_SCRATCH: list[Path] = []
"""cuda.tile's scratch directory of this command (``kernels.build.toolchain.scratch_dir``)."""


def _leave(code: int) -> int:
    """After an interrupt: exit at once even when a simulator thread is still inside a compiled
    kernel (it cannot be stopped, and its result is no longer wanted; the cleanup has run, and
    the scratch directory, whose context manager ``os._exit`` skips, is removed here)."""
    if any(t.name.startswith("simulate") and t.is_alive() for t in threading.enumerate()):
        for path in _SCRATCH:
            shutil.rmtree(path, ignore_errors=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)

    _SIGNALLED.clear()
    _KEPT.clear()
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _on_signal)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:   # not ignored (a `&` job)
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, _on_signal)
    try:
        with scratch_dir() as scratch:
            _SCRATCH[:] = [scratch] if scratch else []
            return run(args, argv)
    except (UsageError, UnknownArch, UnknownStudy, InvalidProblem, RunDirExists, BadRunDir,
            shard.ShardError, DiskFull, DatasetError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except shard.IncompleteRun as e:
        print(e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(_kept_line("interrupted") if _KEPT else "interrupted: no run directory was written",
              file=sys.stderr)
        return _leave(130)
    except Terminated:
        print(_kept_line("terminated (SIGTERM)") if _KEPT
              else "terminated (SIGTERM): no run directory was written", file=sys.stderr)
        return _leave(143)
    except Exception:
        if _KEPT:                       # the traceback first, then how to finish the run
            import traceback
            traceback.print_exc()
            print(_kept_line("stopped by the error above"), file=sys.stderr)
            return 1
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    sys.exit(main())

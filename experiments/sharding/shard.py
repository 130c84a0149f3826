"""Sweeps beyond one GPU: a measured study sharded over GPUs through submitit, merged into one run.

    python -m experiments.run l1l2 --arch h200 --gpus 2             # every GPU of this host: all
    python -m experiments.run l1l2 --arch h200 --gpus 8 --executor slurm --partition gpu --time 60
    python -m experiments.run --resume runs/h200/l1l2/<id>-incomplete --gpus 2

Why it is sound for a locality study. A case's L2 counters depend only on the GPU it runs on, so
cases measured on different GPUs of the same arch can share a table; a *speed* claim, however, is
a ratio against the SDPA peers timed beside it, launch by launch alternating on the same GPU. So
the unit of distribution is the problem group (all cases of one problem and its peers) when the
study is timed, and the single case when it is not; a problem is never split over two GPUs, and
every ratio stays a same-GPU ratio.

How. ``shard_plan`` cuts the units into shards by estimated cost, longest first onto the least
loaded shard (LPT), so the shards finish together; one submitit job per shard runs
``run_shard``, pinned to one GPU (``LocalExecutor`` sets ``CUDA_VISIBLE_DEVICES``; on Slurm,
``AutoExecutor`` asks for one GPU per job), which runs the plain one-GPU command
``python -m experiments.run <study> --filter <its case ids> ...`` (precompile, correctness gate,
timing, ncu in its own session) into ``shards/shard-<k>/`` of the run directory. ``shard.json`` is
written last, so a shard without it did not finish. ``merge`` concatenates the shards' rows (renamed
to the run) into one ``counters.csv`` / timing file and the manifest parameters: the devices, which
case ran where, every shard's log. Each shard's ncu has its own lock file (``run_shard``), so the
shards' profiling overlaps; without that, ncu would serialize every profiled launch across the host.

The jobs, their executors and the merge are ``experiments.sharding.shard_jobs``; this module is the
command line, the plan and the sharded measure mode.

A run with a failed shard is never published as complete: like every measured run it works in
``<name>-incomplete`` (``experiments.rundirs.rundir``), which then stays, with ``"complete": false``
and the missing cases in its manifest; the command exits 1, and ``--resume <that dir>`` measures
only the missing cases in the same directory and publishes the complete run under ``<name>``.
``--resume`` of a single-GPU run (no ``--gpus`` in its command) finishes it on this GPU
(``experiments.runner.modes.measure``).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
from pathlib import Path
from typing import Callable

from spec import TileGrid
from spec.case import Case
from spec.records import Row, write_csv

from ..rundirs.rundir import INCOMPLETE, command_line, write_incomplete
from .shard_jobs import (  # noqa: F401
    DEFAULT_TIME_MIN,
    DONE,
    EXECUTORS,
    POLL_S,
    SHARDS,
    ExecutorOptions,
    Gpu,
    Measure,
    Merged,
    ShardError,
    ShardJob,
    Submitted,
    finished,
    gpu_names,
    host_gpus,
    make_executor,
    measure_on_this_gpu,
    merge,
    merge_params,
    pick_count,
    pick_gpus,
    run_shard,
    single_gpu_argv,
    slurm_parameters,
    submit,
    wait,
)


class IncompleteRun(RuntimeError):
    """Shards failed: the run was written as ``<name>-incomplete``; the message says how to
    resume. ``experiments.run`` exits 1."""


# -- command line ----------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("several GPUs (measure mode; see experiments/sharding/shard.py)")
    g.add_argument("--gpus", help="shard the cases over N GPUs of this host (N or all), or over "
                   "N one-GPU Slurm jobs with --executor slurm")
    g.add_argument("--executor", choices=EXECUTORS, help="local (default with --gpus): one "
                   "process per GPU of this host; slurm: one job per shard")
    g.add_argument("--time", type=int, help=f"minutes each shard may run (default "
                   f"{DEFAULT_TIME_MIN})")
    g.add_argument("--partition", help="Slurm partition")
    g.add_argument("--slurm-account", help="Slurm account to charge")
    g.add_argument("--slurm-qos", help="Slurm quality of service")
    g.add_argument("--slurm-constraint", help="Slurm node constraint (pick the GPU type that "
                   "--arch names)")
    g.add_argument("--cpus-per-task", type=int, help="Slurm CPUs per job (compiles run in "
                   "parallel; default 8)")
    g.add_argument("--resume", metavar="RUN", help="finish an interrupted or incomplete "
                   "measured run (its <name>-incomplete directory): measure only what it has not "
                   "finished and publish it complete")


SLURM_ONLY = ("partition", "slurm_account", "slurm_qos", "slurm_constraint", "cpus_per_task")
RESUME_KEEPS = ("gpus", "executor", "time", *SLURM_ONLY, "resume", "out", "no_figures")
"""What a ``--resume`` command may set; the study, arch and case options come from the run."""


def requested(args) -> bool:
    """Whether the command asks for the sharded path (a resumed run: whether its own command
    did, ``resumed``)."""
    return args.gpus is not None or args.executor is not None


def executor_options(args) -> ExecutorOptions:
    kind = args.executor or "local"
    if args.time is not None and args.time < 1:
        raise ShardError(f"--time {args.time} must be a positive number of minutes")
    if args.cpus_per_task is not None and args.cpus_per_task < 1:
        raise ShardError(f"--cpus-per-task {args.cpus_per_task} must be at least 1")
    given = [o for o in SLURM_ONLY if getattr(args, o) is not None]
    if kind != "slurm" and given:
        raise ShardError(f"--{given[0].replace('_', '-')} is a Slurm option; add --executor slurm "
                         "or leave it out")
    return ExecutorOptions(kind, args.time or DEFAULT_TIME_MIN, args.partition, args.slurm_account,
                           args.slurm_qos, args.slurm_constraint, args.cpus_per_task)


def resumed(args, parser: argparse.ArgumentParser) -> tuple[argparse.Namespace, list[str]]:
    """The options of the run ``--resume RUN`` completes: RUN's own command line (from its
    manifest) with this command's executor options and ``--out``; and that command line."""
    run = Path(args.resume)
    if run.name == "manifest.json" and not run.is_dir():     # the run named by its manifest
        run = run.parent
        args.resume = str(run)
    m = _manifest(run)
    if (m.get("parameters") or {}).get("complete") is not False:
        raise ShardError(f"--resume {run}: not an incomplete run (its manifest has no "
                         "\"complete\": false among its parameters); nothing to resume")
    extra = [k for k, v in vars(args).items()
             if k not in RESUME_KEEPS and v != parser.get_default(k)]
    if extra:
        raise ShardError(f"--resume takes the study and its options from {run}/manifest.json; "
                         f"leave out {_flag(extra[0])}")
    argv = shlex.split(m["command"])[3:]            # python -m experiments.run ARGV
    orig = parser.parse_args(argv)
    for k in RESUME_KEEPS:
        if getattr(args, k) != parser.get_default(k):
            setattr(orig, k, getattr(args, k))
    if args.out is None:
        orig.out = run.with_name(complete_name(run.name))
    orig.resume = str(run)
    return orig, argv


def complete_name(name: str) -> str:
    """The name an incomplete run (``<name>-incomplete``, ``<name>-incomplete<attempt>``) is
    published under once complete."""
    return re.sub(rf"{INCOMPLETE}\d*$", "", name)


def _flag(dest: str) -> str:
    return "the study name" if dest == "study" else "--" + dest.replace("_", "-")


def _manifest(run: Path) -> dict:
    try:
        return json.loads((run / "manifest.json").read_text())
    except FileNotFoundError:
        raise ShardError(f"--resume {run}: no manifest.json there; pass the directory that the "
                         "failed run printed (…-incomplete)") from None
    except (OSError, ValueError) as e:
        raise ShardError(f"--resume {run}: manifest.json is unreadable ({type(e).__name__}); "
                         "start a new run") from None


# -- sharding --------------------------------------------------------------------------------------

def estimated_cost(case: Case) -> float:
    """Relative GPU time of a case: the (Q tile, K/V tile) pairs it visits (what the dry run's
    work estimate counts) divided by the CTAs that run at once (resident, at most one per work
    item). A persistent launch of P CTAs walks the same tiles as one of 132 but takes 132/P
    times as long, and ncu replays every kernel a fixed number of passes, so this is what the
    shards should balance."""
    g = TileGrid(case.problem, case.variant.tiles)
    pairs = sum(g.kv_tiles_for(i) for i in range(g.n_q)) * g.n_bh
    return pairs / max(1, min(case.resident, g.n_work))


def units(cases: list[Case], timed: bool) -> list[list[Case]]:
    """What may not be split: a problem and every case of it when the study is timed (its peers
    are timed beside them, on one GPU), otherwise each case alone."""
    if not timed:
        return [[c] for c in cases]
    groups: dict = {}
    for c in cases:
        groups.setdefault(c.problem, []).append(c)
    return list(groups.values())


def shard_plan(cases: list[Case], n: int, *, timed: bool,
               cost: Callable[[Case], float] = estimated_cost) -> list[list[Case]]:
    """Longest processing time first: units by falling cost, each onto the least loaded shard;
    at most ``n`` shards, none empty, each keeping plan order."""
    order = {c: i for i, c in enumerate(cases)}
    loads, shards = [0.0] * n, [[] for _ in range(n)]
    for u in sorted(units(cases, timed), key=lambda u: -sum(map(cost, u))):
        k = min(range(n), key=loads.__getitem__)
        shards[k] += u
        loads[k] += sum(map(cost, u))
    return [sorted(s, key=order.__getitem__) for s in shards if s]


# -- the sharded measure mode (called by experiments.run) ------------------------------------------

def _previous(run: Path, cases: list[Case], work: Path) -> int:
    """Bring the finished shards of the incomplete ``run`` into ``work`` (hard links where the
    filesystem allows; nothing to bring when the run is finished in place) and drop the
    unfinished ones; returns how many attempts it made."""
    m = _manifest(run)
    if m.get("parameters", {}).get("cases") != [c.id for c in cases]:
        raise ShardError(f"--resume {run}: the study's plan changed since that run (other cases); "
                         "start a new run")
    if run.resolve() != work.resolve() and (run / SHARDS).is_dir():
        shutil.copytree(run / SHARDS, work / SHARDS, copy_function=_link_or_copy)
    for d in (work / SHARDS).glob("shard-*"):
        if not (d / DONE).exists():
            shutil.rmtree(d)                   # its cases run again; its log stays in logs/
    return int(m["parameters"].get("attempts", 1))


def _link_or_copy(src, dst):
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def measure_sharded(args, argv: list[str], console, study, arch, cases: list[Case], work: Path,
                    run: str, *, measure: Measure | None = None) -> tuple[list[Row], dict]:
    """``experiments.run``'s measure mode over several GPUs: returns the merged rows and manifest
    parameters of a complete run (and has written its CSVs into ``work``), or publishes the
    run as ``<name>-incomplete`` and raises ``IncompleteRun``."""
    opts = executor_options(args)
    measure = measure or measure_on_this_gpu       # looked up now: tests swap the module's
    if args.reps is not None and args.reps < 1:
        raise ShardError(f"--reps {args.reps} must be at least 1")
    attempts = 0
    if args.resume:
        attempts = _previous(Path(args.resume), cases, work)
    done = {cid for rec, _ in finished(work) for cid in rec["cases"]}
    todo = [c for c in cases if c.id not in done]
    if args.gpus is None and todo:
        raise ShardError("pass --gpus N (local GPUs, or one-GPU Slurm jobs with --executor "
                         "slurm)")
    gpus = None
    if opts.kind == "local" and todo:
        gpus = pick_gpus(args.gpus, host_gpus(), arch.name)
        n = len(gpus)
    elif todo:
        if args.gpus == "all":
            raise ShardError("--gpus all means every GPU of this host; with --executor slurm pass "
                             "the number of one-GPU jobs")
        gpus = None
        n = pick_count(args.gpus)
    attempts += 1
    first = max((int(d.name.split("-")[1]) + 1 for d in (work / SHARDS).glob("shard-*")),
                default=0)
    plan = shard_plan(todo, n, timed=study.timed) if todo else []
    total = sum(map(estimated_cost, todo))
    jobs = [ShardJob(first + k, tuple(s), args, study.name, arch.name, run,
                     str(work / SHARDS / f"shard-{first + k}")) for k, s in enumerate(plan)]
    subs = []
    if jobs:
        logs = work / SHARDS / "logs" / f"attempt-{attempts}"
        for k, j in enumerate(jobs):
            where = f"GPU {gpus[k].token} ({gpus[k].name})" if gpus else "a Slurm job"
            console.print(f"shard {j.index} on {where}: {_share(j.cases, total)}")
        subs = submit(jobs, gpus[:len(jobs)] if gpus else None, opts, logs, measure)
        wait(subs, console)
    merged = merge(work, cases, run)
    names = gpu_names(merged.params["devices"])
    if len(names) > 1:
        raise ShardError(f"the shards ran on different GPUs ({', '.join(sorted(names))}); "
                         "a study's GPUs must all be the arch it names: pick one GPU type "
                         "(--slurm-constraint) and run again")
    params = merged.params | {
        "complete": not merged.missing, "executor": opts.kind, "attempts": attempts,
        "shards": _shard_records(subs, work) + _earlier_shards(args, work, subs)}
    if merged.missing:
        params["missing"] = merged.missing
        _publish_incomplete(args, argv, study, arch, cases, work, run, merged, params, subs)
    for name, rows in merged.rows.items():
        write_csv(work / name, rows)
    for case_id, why in merged.params.get("failed", {}).items():
        console.print(f"[red]FAILED[/] {case_id}: {why}")
    return [r for rows in merged.rows.values() for r in rows], params


def _share(cases, total: float) -> str:
    return (f"{len(cases)} case{'s' * (len(cases) != 1)}, "
            f"{100 * sum(map(estimated_cost, cases)) / (total or 1):.0f}% of the estimated work")


def print_plan(console, args, study, cases: list[Case]) -> None:
    """The dry run's view of ``--gpus N``: the shards and their share of the estimated work."""
    if args.gpus == "all":
        console.print("--gpus all: the split depends on the GPUs found; pass a number to see it")
        return
    n = pick_count(args.gpus)
    total = sum(map(estimated_cost, cases))
    why = ("one problem and its SDPA peers per unit" if study.timed else "one case per unit")
    console.print(f"shards over {n} GPUs ({why}, longest first onto the least loaded):")
    for k, s in enumerate(shard_plan(cases, n, timed=study.timed)):
        console.print(f"  shard {k}: {_share(s, total)}")


def _shard_records(subs: list[Submitted], work: Path) -> list[dict]:
    return [{"shard": s.job.index, "cases": len(s.job.cases), "job_id": str(s.handle.job_id),
             "gpu_index": s.gpu.index if s.gpu else None,
             "cuda_visible_devices": s.gpu.token if s.gpu else None,
             "gpu_uuid": s.gpu.uuid if s.gpu else None,
             "state": "failed" if s.error else "done", "error": s.error,
             "stdout": _rel(s.handle.paths.stdout, work),
             "stderr": _rel(s.handle.paths.stderr, work)} for s in subs]


def _earlier_shards(args, work: Path, subs: list[Submitted]) -> list[dict]:
    """On resume: the records of the previous attempt's finished shards."""
    if not args.resume:
        return []
    mine = {s.job.index for s in subs}
    old = _manifest(Path(args.resume)).get("parameters", {}).get("shards", [])
    kept = {int(d.name.split("-")[1]) for d in (work / SHARDS).glob("shard-*")}
    return [r for r in old if r["shard"] in kept and r["shard"] not in mine]


def _rel(path: Path, work: Path) -> str:
    try:
        return str(Path(path).relative_to(work))
    except ValueError:
        return str(path)


def _publish_incomplete(args, argv, study, arch, cases, work: Path, run: str, merged: Merged,
                        params: dict, subs: list[Submitted]):
    """Write what finished into the run's incomplete directory ``work`` (its rows, a manifest
    with ``"complete": false`` and the missing cases) and raise IncompleteRun;
    ``experiments.run`` then keeps the directory (``experiments.rundirs.rundir``)."""
    for name, rows in merged.rows.items():
        write_csv(work / name, rows)
    write_incomplete(work, command=command_line("experiments.run", argv), study=study.name,
                     mode="measure", arch=arch,
                     parameters={"seq_override": args.seq, "filter": args.filter,
                                 "cases": [c.id for c in cases], **params})
    lines = [f"INCOMPLETE: {len(merged.missing)} of {len(cases)} cases missing: "
             f"{', '.join(merged.missing[:3])}{', ...' if len(merged.missing) > 3 else ''}"]
    lines += [f"  shard {s.job.index} failed: {s.error}; "
              f"log {work / _rel(s.handle.paths.stderr, work)}"
              for s in subs if s.error]
    lines += [f"wrote {work} (\"complete\": false in its manifest); measure the missing cases and "
              f"publish the run complete with: python -m experiments.run --resume "
              f"{shlex.quote(str(work))} --gpus {args.gpus or 1}"]
    raise IncompleteRun("\n".join(lines))

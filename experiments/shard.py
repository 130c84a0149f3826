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
timing, ncu in its own session) into ``shards/shard-<k>/`` of the run directory. ``shard.json`` is written last, so a shard without
it did not finish. ``merge`` concatenates the shards' rows (renamed to the run) into one
``counters.csv`` / timing file and the manifest parameters: the devices, which case ran where,
every shard's log. Each shard's ncu has its own lock file (``run_shard``), so the shards'
profiling overlaps; without that, ncu would serialize every profiled launch across the host.

A run with a failed shard is never published as complete: it is written as
``<name>-incomplete`` with ``"complete": false`` and the missing cases in its manifest, the
command exits 1, and ``--resume <that dir>`` measures only the missing cases and publishes the
complete run under ``<name>``, then removes the incomplete one.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from spec import TileGrid
from spec.case import Case
from spec.records import COLUMNS, Row, read_csv, write_csv

from .rundir import ROOT, command_line, reserved_run_dir, write_manifest

EXECUTORS = ("local", "slurm")
DEFAULT_TIME_MIN = 240
"""Per-shard time limit in minutes (``--time``); submitit's own local default is 2 minutes."""
INCOMPLETE = "-incomplete"
SHARDS = "shards"
DONE = "shard.json"
POLL_S = 0.5


class ShardError(ValueError):
    """A problem with the sharding options: one line, exit code 2, before any work."""


class IncompleteRun(RuntimeError):
    """Shards failed: the run was written as ``<name>-incomplete``; the message says how to
    resume. ``experiments.run`` exits 1."""


# -- command line ----------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("several GPUs (measure mode; see experiments/shard.py)")
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
    g.add_argument("--resume", metavar="RUN", help="measure only the missing cases of an "
                   "incomplete run directory and publish it complete")


SLURM_ONLY = ("partition", "slurm_account", "slurm_qos", "slurm_constraint", "cpus_per_task")
RESUME_KEEPS = ("gpus", "executor", "time", *SLURM_ONLY, "resume", "out", "no_figures")
"""What a ``--resume`` command may set; the study, arch and case options come from the run."""


def requested(args) -> bool:
    """Whether the command asks for the sharded path."""
    return args.gpus is not None or args.executor is not None or args.resume is not None


@dataclass(frozen=True)
class ExecutorOptions:
    kind: str = "local"
    time_min: int = DEFAULT_TIME_MIN
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    cpus_per_task: int | None = None


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
        raise ShardError(f"--resume {run}: not an incomplete sharded run (its manifest has no "
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


def retire(run: Path) -> None:
    """Remove the incomplete run once its complete successor is published."""
    shutil.rmtree(run)


# -- the GPUs --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Gpu:
    index: int          # the device index (its position when CUDA_VISIBLE_DEVICES names UUIDs)
    name: str           # marketing name (torch)
    uuid: str
    arch: str | None    # spec.detect()'s arch name, None: not usable
    pin: str = ""       # the CUDA_VISIBLE_DEVICES entry that names it ("": str(index))

    @property
    def token(self) -> str:
        return self.pin or str(self.index)


_PROBE = ("import json, torch\nfrom spec import detect\na = detect()\n"
          "p = torch.cuda.get_device_properties(0) if a else None\n"
          "print(json.dumps(a and {'name': a.marketing_name, 'arch': a.name, "
          "'uuid': str(getattr(p, 'uuid', ''))}))\n")


def host_gpus() -> list[Gpu]:
    """The GPUs this process may use (those ``CUDA_VISIBLE_DEVICES`` lists, by index or UUID,
    else all), each probed as its worker will see it: a process pinned to it asks
    ``spec.detect`` (all probes run at once)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        tokens = [x.strip() for x in env.split(",") if x.strip()]
    else:
        import torch
        tokens = [str(i) for i in range(torch.cuda.device_count()
                                        if torch.cuda.is_available() else 0)]
    procs = [(k, t, subprocess.Popen([sys.executable, "-c", _PROBE], cwd=ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=os.environ | {"CUDA_VISIBLE_DEVICES": t}))
             for k, t in enumerate(tokens)]
    out = []
    for k, t, p in procs:
        text, _ = p.communicate(timeout=300)
        lines = text.strip().splitlines()
        d = json.loads(lines[-1]) if lines and p.returncode == 0 else None
        d = d or {"name": "?", "uuid": "", "arch": None}
        out.append(Gpu(int(t) if t.isdigit() else k, d["name"], d["uuid"], d["arch"],
                       "" if t.isdigit() else t))
    return out


def pick_gpus(request: str, gpus: list[Gpu], arch: str) -> list[Gpu]:
    """The GPUs ``--gpus N|all`` names among this host's: the first N, all of ``arch``."""
    n = len(gpus) if request == "all" else _gpu_count(request, " or all")
    if not gpus:
        raise ShardError(f"--gpus {request}: this host has no CUDA GPU; run on a GPU machine or "
                         "use --executor slurm")
    if n > len(gpus):
        raise ShardError(f"--gpus {request}: this host has {len(gpus)} GPU"
                         f"{'s' * (len(gpus) > 1)}; pass --gpus {len(gpus)} or all")
    picked = gpus[:n]
    wrong = [g for g in picked if g.arch != arch]
    if wrong:
        g, ok = wrong[0], [g.token for g in gpus if g.arch == arch]
        fix = (f"restrict them with CUDA_VISIBLE_DEVICES={','.join(ok)}" if ok else
               f"pass --arch {g.arch}" if g.arch else "check the driver")
        raise ShardError(f"--gpus {request} --arch {arch}: GPU {g.index} is {g.name} "
                         f"({g.arch or 'not usable'}), not {arch}; a study's GPUs must all be the "
                         f"arch it names: {fix}")
    return picked


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


# -- one shard (runs in the submitit job) ----------------------------------------------------------

@dataclass(frozen=True)
class ShardJob:
    """What one submitit job receives (pickled)."""
    index: int
    cases: tuple[Case, ...]
    args: argparse.Namespace     # the run's parsed command line
    study: str
    arch: str
    run: str                     # the run's name (rows carry it)
    out: str                     # the shard directory


Measure = Callable[[ShardJob, Path], dict]
"""Measure a shard's cases into a directory (the study's CSVs, anything else it keeps) and return
the manifest parameters of that measurement (``device``, ``failed``, ``profiling``, ...)."""


def single_gpu_argv(job: ShardJob, out: Path) -> list[str]:
    """The plain one-GPU ``experiments.run`` command of a shard: its cases exactly (``--filter``
    on their ids), the run's measure options, into ``out``. (A new measure option of
    ``experiments.run`` is passed on here.)"""
    a = job.args
    ids = "|".join(re.escape(c.id) for c in job.cases)
    argv = [job.study, "--arch", job.arch, "--mode", "measure", "--out", str(out),
            "--no-figures", "--filter", f"^(?:{ids})$", "--seed", str(a.seed),
            "--groups", a.groups, "--repeats", str(a.repeats)]
    argv += ["--sessions", str(a.sessions)] if a.sessions is not None else []
    argv += ["--seq", ",".join(map(str, a.seq))] if a.seq is not None else []
    argv += ["--reps", str(a.reps)] if a.reps is not None else []
    argv += ["--no-profile"] if a.no_profile else ["--profile"] if a.profile else []
    return argv


def measure_on_this_gpu(job: ShardJob, work: Path) -> dict:
    """The normal single-GPU path, literally: ``python -m experiments.run`` on this shard's
    cases (precompile, correctness gate, timing, ncu), on the GPU this job is pinned to; its
    output goes to the job's log, its run directory's files into ``work``. Returns that run's
    manifest parameters, the device's UUID added."""
    out = work / "run"
    cmd = [sys.executable, "-m", "experiments.run", *single_gpu_argv(job, out)]
    print("+", shlex.join(cmd), flush=True)
    r = subprocess.run(cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    sys.stderr.write(r.stderr)
    if r.returncode != 0:
        last = [x for x in r.stderr.splitlines() if x.strip()][-1:] or [""]
        raise RuntimeError(f"experiments.run exited {r.returncode}: {last[0]}")
    for p in out.iterdir():
        p.rename(work / p.name)
    out.rmdir()
    params = json.loads((work / "manifest.json").read_text())["parameters"]
    import torch                         # after the run: no second context during it
    params["device"] = dict(params["device"],
                            uuid=str(getattr(torch.cuda.get_device_properties(0), "uuid", "")))
    return params


def run_shard(job: ShardJob, measure: Measure | None = None) -> dict:
    """Measure one shard into ``job.out``; ``shard.json`` (what ran, where, how long) last.

    ncu serializes profiling over every process of a host that shares its lock file,
    ``$TMPDIR/nsight-compute-lock``; the shard gets a TMPDIR of its own, so shards profiling
    their own GPUs do not wait for each other (each ncu still serializes its own launches)."""
    t0 = time.perf_counter()
    out = Path(job.out)
    out.mkdir(parents=True, exist_ok=True)
    own_tmp = tempfile.mkdtemp(prefix=f"sawtooth-shard{job.index}-")
    os.environ["TMPDIR"], tempfile.tempdir = own_tmp, None
    try:
        params = (measure or measure_on_this_gpu)(job, out)
    finally:
        shutil.rmtree(own_tmp, ignore_errors=True)
    record = {"shard": job.index, "cases": [c.id for c in job.cases], "host": socket.gethostname(),
              "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
              "ncu_lock": f"per shard ({own_tmp}/nsight-compute-lock)",
              "wall_seconds": round(time.perf_counter() - t0, 1), "params": params}
    tmp = out / (DONE + ".tmp")
    tmp.write_text(json.dumps(record, indent=1, default=str) + "\n")
    tmp.rename(out / DONE)
    return record


# -- executors -------------------------------------------------------------------------------------

def slurm_parameters(opts: ExecutorOptions) -> dict:
    """submitit ``AutoExecutor`` parameters of one shard's Slurm job: one task, one GPU."""
    p = {"timeout_min": opts.time_min, "nodes": 1, "tasks_per_node": 1, "gpus_per_node": 1,
         "cpus_per_task": opts.cpus_per_task or 8,
         "slurm_setup": _setup()}
    for key, value in (("slurm_partition", opts.partition), ("slurm_account", opts.account),
                       ("slurm_qos", opts.qos), ("slurm_constraint", opts.constraint)):
        if value is not None:
            p[key] = value
    return p


def _setup() -> list[str]:
    """Shell lines before every job: the workers import this repository's packages."""
    return [f"cd {shlex.quote(str(ROOT))}"]


def make_executor(opts: ExecutorOptions, folder: Path):
    import submitit
    if opts.kind == "local":
        ex = submitit.LocalExecutor(folder)
        ex.update_parameters(timeout_min=opts.time_min, setup=_setup())
        return ex
    try:
        ex = submitit.AutoExecutor(folder, cluster="slurm")
    except RuntimeError as e:
        raise ShardError(f"--executor slurm: {e} (srun not found); submit from a Slurm login node "
                         "or use --gpus on a GPU host") from None
    ex.update_parameters(**slurm_parameters(opts))
    return ex


@dataclass
class Submitted:
    job: ShardJob
    handle: object               # the submitit job
    gpu: Gpu | None              # local: the pinned GPU
    error: str | None = None
    done: bool = False


def submit(jobs: list[ShardJob], gpus: list[Gpu] | None, opts: ExecutorOptions, folder: Path,
           measure: Measure | None) -> list[Submitted]:
    """One submitit job per shard (local: pinned to ``gpus[k]``)."""
    ex = make_executor(opts, folder)
    out = []
    for k, job in enumerate(jobs):
        gpu = gpus[k] if gpus else None
        if gpu is not None and not gpu.pin:
            ex.update_parameters(visible_gpus=[gpu.index], gpus_per_node=1, setup=_setup())
        elif gpu is not None:           # named by UUID / MIG id: submitit pins indices only
            ex.update_parameters(visible_gpus=(), gpus_per_node=0, setup=[
                *_setup(), f"export CUDA_VISIBLE_DEVICES={shlex.quote(gpu.pin)}"])
        else:
            ex.update_parameters(name=f"{job.study}-shard{job.index}")
        out.append(Submitted(job, ex.submit(run_shard, job, measure), gpu))
    return out


def wait(subs: list[Submitted], console, *, poll_s: float = POLL_S) -> None:
    """Wait for every job; a failure is recorded (first line of the error), never raised.
    Interrupted (Ctrl-C, SIGTERM), it cancels the jobs still running and re-raises."""
    try:
        while not all(s.done for s in subs):
            for s in subs:
                if s.done or not s.handle.done():
                    continue
                s.done = True
                try:
                    rec = s.handle.result()
                except Exception as e:     # noqa: BLE001 - a failed shard is reported, not fatal
                    s.error = _cause(e)
                    console.print(f"[red]shard {s.job.index} failed[/]: {s.error}")
                else:
                    console.print(f"shard {s.job.index} done{_where(s)}: {len(s.job.cases)} cases "
                                  f"in {rec['wall_seconds']:.0f} s")
            time.sleep(poll_s)
    except BaseException:
        for s in subs:
            if not s.done:
                s.handle.cancel(check=False)
        raise


def _cause(e: Exception) -> str:
    """One line for a failed job: the exception line of the job's traceback when submitit
    quotes it (between dashed rules), else the first line of the error."""
    from submitit.core.utils import FailedJobError, UncompletedJobError
    if isinstance(e, UncompletedJobError) and not isinstance(e, FailedJobError):
        return "the job ended without a result (killed, out of memory or out of time)"
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    rules = [i for i, x in enumerate(lines) if set(x) == {"-"}]
    line = lines[rules[-1] - 1] if len(rules) >= 2 else (lines[0] if lines else type(e).__name__)
    return line[:300]


def _where(s: Submitted) -> str:
    return f" on GPU {s.gpu.token}" if s.gpu is not None else f" (job {s.handle.job_id})"


# -- merge -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Merged:
    rows: dict[str, list[Row]]       # file name -> rows, renamed to the run
    params: dict                     # manifest parameters
    missing: list[str]               # case ids no finished shard measured


def finished(work: Path) -> list[tuple[dict, Path]]:
    """(``shard.json`` record, directory) of every finished shard under ``work/shards``."""
    return sorted(((json.loads((d / DONE).read_text()), d)
                   for d in (work / SHARDS).glob("shard-*") if (d / DONE).exists()),
                  key=lambda x: x[0]["shard"])


def _row_file(path: Path) -> bool:
    """Whether a CSV has the Row schema (the shard's ncu_raw.csv, for one, has not)."""
    with open(path, newline="") as f:
        return tuple(next(csv.reader(f), ())) == COLUMNS


def merge_params(per_shard: list[dict]) -> dict:
    """One manifest's parameters from the shards': a value all shards agree on is kept; lists
    (e.g. consistency failures) are concatenated, dicts (failed cases) joined; anything else
    that differs is kept per shard. ``device`` is the common GPU (its UUIDs are in
    ``devices``)."""
    out: dict = {}
    for k in dict.fromkeys(k for p in per_shard for k in p):
        vals = [p.get(k) for p in per_shard]
        if k == "device":
            out[k] = {f: v for f, v in (vals[0] or {}).items() if f != "uuid"}
        elif all(v == vals[0] for v in vals):
            out[k] = vals[0]
        elif all(isinstance(v, list) for v in vals):
            out[k] = [x for v in vals for x in v]
        elif all(isinstance(v, dict) for v in vals) and k != "profiling":
            out[k] = {f: x for v in vals for f, x in v.items()}
        else:
            out[k] = {"per_shard": vals}
    return out


def merge(work: Path, cases: list[Case], run: str) -> Merged:
    """Every finished shard: the rows of each of its Row-schema CSVs renamed to ``run`` (one
    file per name), the manifest parameters (``merge_params``), the devices and which case ran
    where; the cases no finished shard holds are missing."""
    shards = finished(work)
    rows: dict[str, list[Row]] = {}
    placement, devices = {}, []
    for rec, d in shards:
        for f in sorted(d.glob("*.csv")):
            if _row_file(f):
                rows.setdefault(f.name, []).extend(
                    dataclasses.replace(Row(**r), run=run) for r in read_csv(f))
        placement |= {cid: rec["shard"] for cid in rec["cases"]}
        devices.append({"shard": rec["shard"], "host": rec["host"],
                        "cuda_visible_devices": rec["cuda_visible_devices"],
                        "ncu_lock": rec.get("ncu_lock"), **(rec["params"].get("device") or {})})
    params = merge_params([rec["params"] for rec, _ in shards]) if shards else {}
    params |= {"devices": devices, "placement": placement}
    missing = [c.id for c in cases if c.id not in placement]
    return Merged(rows, params, missing)


def _gpu_names(devices: list[dict]) -> set[str]:
    return {d.get("gpu") for d in devices if d.get("gpu")}


# -- the sharded measure mode (called by experiments.run) -------------------------------------------

def _previous(run: Path, cases: list[Case], work: Path) -> int:
    """Bring the finished shards of the incomplete ``run`` into ``work`` (hard links where the
    filesystem allows); returns how many attempts it made."""
    m = _manifest(run)
    if m.get("parameters", {}).get("cases") != [c.id for c in cases]:
        raise ShardError(f"--resume {run}: the study's plan changed since that run (other cases); "
                         "start a new run")
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
    names = _gpu_names(merged.params["devices"])
    if len(names) > 1:
        raise ShardError(f"the shards ran on different GPUs ({', '.join(sorted(names))}); a study's "
                         "GPUs must all be the arch it names: pick one GPU type "
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


def _gpu_count(request: str, hint: str) -> int:
    """``--gpus`` as a positive count, or a ShardError naming the fix (``hint`` ends it)."""
    try:
        n = int(request)
    except ValueError:
        n = 0
    if n < 1:
        raise ShardError(f"--gpus {request}: pass a positive number of GPUs{hint}")
    return n


def pick_count(request: str) -> int:
    """The number of one-GPU Slurm jobs ``--gpus N`` asks for."""
    return _gpu_count(request, " (one-GPU jobs on Slurm)")


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
    """Write what finished as ``<name>-incomplete`` (``-incomplete<attempt>`` from the second
    attempt on, which then replaces the previous one) with rows renamed to it, and raise
    IncompleteRun; ``experiments.run``'s own reservation of ``<name>`` is then released."""
    attempt = params["attempts"]
    target = work.parent / f"{run}{INCOMPLETE}{attempt if attempt > 1 else ''}"
    with reserved_run_dir(target) as (inc, inc_work):
        for p in work.iterdir():
            p.rename(inc_work / p.name)
        for name, rows in merged.rows.items():
            write_csv(inc_work / name, [dataclasses.replace(r, run=inc.name) for r in rows])
        write_manifest(inc_work, command=command_line("experiments.run", argv), study=study.name,
                       mode="measure", arch=arch,
                       parameters={"seq_override": args.seq, "filter": args.filter,
                                   "cases": [c.id for c in cases], **params}, figures=[])
    if args.resume:
        retire(Path(args.resume))           # the new incomplete run holds all it had
    lines = [f"INCOMPLETE: {len(merged.missing)} of {len(cases)} cases missing: "
             f"{', '.join(merged.missing[:3])}{', ...' if len(merged.missing) > 3 else ''}"]
    lines += [f"  shard {s.job.index} failed: {s.error}; log {inc / _rel(s.handle.paths.stderr, work)}"
              for s in subs if s.error]
    lines += [f"wrote {inc} (\"complete\": false in its manifest); measure the missing cases and "
              f"publish the run complete with: python -m experiments.run --resume "
              f"{shlex.quote(str(inc))} --gpus {args.gpus or 1}"]
    raise IncompleteRun("\n".join(lines))

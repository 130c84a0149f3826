"""The jobs of a sharded run (``experiments.sharding.shard``): the GPUs of this host, one shard's
job, the executors that run the jobs (submitit: local processes or Slurm), and the merge of the
finished shards into one run.

A shard's job runs the plain one-GPU command (``single_gpu_argv``) pinned to its GPU, into
``shards/shard-<k>/`` of the run directory, and writes ``shard.json`` last, so a shard without it
did not finish.
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

from spec.case import Case
from spec.records import COLUMNS, Row, read_csv

from ..rundirs.rundir import ROOT

EXECUTORS = ("local", "slurm")
DEFAULT_TIME_MIN = 240
"""Per-shard time limit in minutes (``--time``); submitit's own local default is 2 minutes."""
SHARDS = "shards"
DONE = "shard.json"
POLL_S = 0.5


class ShardError(ValueError):
    """A problem with the sharding options: one line, exit code 2, before any work."""


@dataclass(frozen=True)
class ExecutorOptions:
    kind: str = "local"
    time_min: int = DEFAULT_TIME_MIN
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    cpus_per_task: int | None = None


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
            "--no-figures", "--filter", f"^(?:{ids})$"]
    for flag, value in (("--seed", a.seed), ("--groups", a.groups), ("--repeats", a.repeats)):
        argv += [flag, str(value)] if value is not None else []     # None: the run's default
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
    import torch  # after the run: no second context during it
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


def gpu_names(devices: list[dict]) -> set[str]:
    """The GPU names the devices of a sharded run's manifest report."""
    return {d.get("gpu") for d in devices if d.get("gpu")}



"""The command line of ``python -m experiments.run``: the parser, and every check of a value
that runs before anything is printed or written (bad input is one line and exit code 2).

The order of ``checked``: the study and the arch, the plan (``--seq``, ``--filter``), the
simulated capacity, the measure and ncu options, the sharding options, the limits; then the mode
(``resolve_mode``). Only then does the run print its first line.
"""
from __future__ import annotations

import argparse
import math
import os
import re
from pathlib import Path

from analysis.cache.sampling import SPREAD_SEEDS
from profiles.metrics import DEFAULT_GROUPS, get_groups
from spec import detect, get_arch, known_archs
from spec.arch import MiB
from spec.case import Case

from ..registry.lengths import at_length, lengths
from ..registry.studies import STUDIES, get_study
from ..sharding import shard

# --capacity-mib bounds: at least one K and one V tile of the plan's largest tiles (the simulator
# caches whole tiles), at most this many times the largest registered L2 (beyond that every
# study's data fit and the cache is simply "infinite").
CAPACITY_MAX_L2S = 16
DEFAULT_REPEATS = 3
DEFAULT_SESSIONS = 1
"""ncu sessions per metric group by default: the repeats are launches of one session (the
launch-to-launch spread). One session per repeat (``--sessions 3``) adds the spread between fresh
processes and allocations and makes the H100 main study about 10 min instead of about 7
(``experiments.runner.costs.measure_cost``)."""
DEFAULT_TIME_LIMIT_MIN = 24 * 60


class UsageError(ValueError):
    """A problem with the command line; printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad argument reported in one line (no usage block) and exit 2."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see --help)\n")


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                  # not Linux
        return os.cpu_count() or 1


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m experiments.run",
                description="Run a study of the Sawtooth cache-locality framework.")
    p.add_argument("study", nargs="?", help="study name (see --list)")
    p.add_argument("--arch", help=f"target architecture: {', '.join(known_archs())}")
    p.add_argument("--list", action="store_true", help="list the studies and exit")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (cases x variants), the work, the time and memory each "
                        "mode would take, and which mode auto picks; run nothing")
    p.add_argument("--mode", choices=("auto", "measure", "simulate"), default="auto",
                   help="measure: run the kernels on the GPU (needs one); simulate: predict the "
                        "L2 counters with the simulator on this CPU; auto (default): measure when "
                        "a CUDA GPU is present and the study can be measured, else simulate")
    p.add_argument("--out", type=Path, help="run directory to create (must not exist)")
    p.add_argument("--model", choices=("timed", "lockstep"), default="timed",
                   help="simulate: the timed simulator with the arch's parameters (default) or "
                        "the lock-step LRU (see experiments/simulation/simulate.py)")
    sampling = p.add_mutually_exclusive_group()
    sampling.add_argument("--exact", action="store_true",
                          help="simulate: the exact timed simulator (the default; kept for the "
                               "commands that name it)")
    sampling.add_argument("--sample", action="store_true",
                          help="simulate: SHARDS-sample the timed simulator's large cases (size "
                               f"rule), each at {SPREAD_SEEDS} seeds, whose spread its rows "
                               "state; faster on large arches, not exact")
    p.add_argument("--capacity-mib", type=float,
                   help="simulated L2 capacity in MiB (an effective capacity; default: the "
                        "arch's L2)")
    p.add_argument("--seq", type=lengths,
                   help="override every case's sequence length (quick runs); several lengths, "
                        "comma-separated, run the plan at each")
    p.add_argument("--filter", help="regular expression on case ids: run only the matching cases")
    p.add_argument("--no-figures", action="store_true", help="skip drawing figures")
    p.add_argument("--reps", type=int, help="timed repetitions per variant (measure; default: "
                   "the study's)")
    p.add_argument("--seed", type=int, help="input generator seed (measure; default 0)")
    p.add_argument("--jobs", type=int, help=f"simulate: cases simulated at once, one thread each "
                   f"(default: the CPUs this process may use, {cpus()} here)")
    p.add_argument("--time-limit", type=float, metavar="MIN", default=DEFAULT_TIME_LIMIT_MIN,
                   help="refuse a run estimated to take longer than this many minutes (default "
                        f"{DEFAULT_TIME_LIMIT_MIN}); --force runs it anyway")
    p.add_argument("--force", action="store_true",
                   help="run even when the estimate exceeds the time limit or the free memory")
    ncu = p.add_mutually_exclusive_group()
    ncu.add_argument("--groups", help="ncu metric groups, each meant for one replay pass "
                     "(profiles/metrics.py; default: the groups the study's figures and findings "
                     "read, see --list)")
    ncu.add_argument("--full-protocol", action="store_true",
                     help=f"every ncu metric group of the protocol ({','.join(DEFAULT_GROUPS)}: "
                     "the consistency checks across groups too) instead of the study's own; "
                     "--dry-run states what it costs")
    p.add_argument("--repeats", type=int,
                   help="profiled launches per case and metric group (measure; median, min..max; "
                        f"default {DEFAULT_REPEATS})")
    p.add_argument("--sessions", type=int,
                   help="ncu sessions (fresh processes, fresh allocations) the repeats are split "
                   f"over (default {DEFAULT_SESSIONS}: the repeats are launches of one session; "
                   "--sessions equal to --repeats adds the between-session spread and costs one "
                   "more session per group and repeat, see profiles/collect.py)")
    prof = p.add_mutually_exclusive_group()
    prof.add_argument("--no-profile", action="store_true", help="measure mode: time only, no ncu")
    prof.add_argument("--profile", action="store_true",
                      help="measure mode: run ncu even for a study that is timed only by default")
    shard.add_arguments(p)
    return p


def simulatable(study) -> bool:
    """Whether simulate mode has anything to predict: L2 counters (a profiled study) or the
    study's own simulate rows. A timed-only study (ladder, scaling, longseq, bench, ...) does not:
    the simulator predicts misses, not time."""
    return study.profiled or study.simulate is not None


def has_cuda_gpu() -> bool:
    return detect() is not None


def require_present(arch, what: str):
    """The GPU present, which must be ``arch``'s: else a one-line UsageError naming both and the
    way out (``what`` measures: "the sweep", "tuning", ...). Looked up on ``spec`` at call time,
    so a test's stand-in GPU is seen."""
    import spec
    present = spec.detect()
    if present is None or present.name != arch.name:
        raise UsageError(f"{what} measures on the {arch.name} GPU, and the GPU present is "
                         f"{present.name if present else 'none'}; run it on that machine "
                         "(or pass --dry-run)")
    return present


def resolve_mode(requested: str, study, has_gpu: bool, elsewhere: bool = False,
                 absent: str = "no CUDA GPU found") -> tuple[str, str]:
    """(mode, one-line reason). ``elsewhere``: the GPUs are those of Slurm jobs, not this host's;
    ``absent``: why there is no GPU (``spec.arch.no_gpu_reason``: torch missing or no device)."""
    can_measure = study.measurable
    timed_only = (f"study {study.name!r} is GPU-only: it measures time, and the simulator "
                  "predicts L2 counters, not time")
    if requested == "simulate":
        if not simulatable(study):
            raise UsageError(f"{timed_only}: there is nothing to simulate; run it on a GPU with "
                             "--mode measure")
        return "simulate", "simulating (--mode simulate): predictions, not measurements"
    where = ("on the Slurm jobs' GPUs (--executor slurm)" if elsewhere else "on the GPU")
    if requested == "measure":
        if not can_measure:
            raise UsageError(f"study {study.name!r} is simulator-only (nothing in it runs on a "
                             "GPU); use --mode simulate")
        if not has_gpu:
            fix = ("use --mode simulate" if simulatable(study) else
                   "run it on a GPU machine or with --executor slurm")
            raise UsageError(f"--mode measure needs a CUDA GPU: {absent}; {fix}")
        return "measure", f"measuring {where} (--mode measure)"
    if has_gpu and can_measure:
        return "measure", (f"auto: measuring {where}" if elsewhere
                           else "auto: CUDA GPU found, measuring")
    if not simulatable(study):
        raise UsageError(f"{timed_only}; it needs a CUDA GPU ({absent}): run it on a "
                         "GPU machine")
    why = absent if not has_gpu else f"study {study.name!r} is simulator-only"
    return "simulate", (f"auto: {why}, SIMULATING: every number below is a prediction of the L2 "
                        "simulator")


def plan(args, study, arch) -> list[Case]:
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


def capacity(args, arch, cases: list[Case]) -> int:
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


def study_groups(study) -> tuple[str, ...]:
    """The ncu metric groups a study collects by default."""
    return study.groups or DEFAULT_GROUPS


MEASURE_ONLY = ("--groups", "--full-protocol", "--repeats", "--sessions", "--reps", "--seed",
                "--no-profile", "--profile")
"""Options that set how the GPU is measured (timing, ncu, inputs): a simulated run refuses them
(``refuse_measure_only``) rather than ignore them."""


def refuse_measure_only(args, cause: str) -> None:
    """A simulated run given measure-only options: one line naming them, why this run simulates
    (``cause``) and the fix. ``args.measure_only`` is set by ``check_profiling``."""
    given = getattr(args, "measure_only", [])
    if given:
        one = len(given) == 1
        raise UsageError(f"{', '.join(given)} only appl{'ies' if one else 'y'} when measuring "
                         f"on a GPU, and this run simulates ({cause}); leave "
                         f"{'it' if one else 'them'} out (--dry-run shows the measured cost)")


def check_profiling(args, study) -> None:
    """The ncu options (one line naming the fix); ``args.groups`` becomes the groups to collect
    (``--groups``, every group with ``--full-protocol``, else the study's); the measure-only
    options given are noted in ``args.measure_only`` before their defaults are filled in."""
    args.measure_only = [f for f in MEASURE_ONLY
                         if getattr(args, f[2:].replace("-", "_")) not in (None, False)]
    args.seed = 0 if args.seed is None else args.seed
    args.repeats = DEFAULT_REPEATS if args.repeats is None else args.repeats
    if args.groups is None:
        args.groups = ",".join(DEFAULT_GROUPS if args.full_protocol else study_groups(study))
    try:
        get_groups(tuple(args.groups.split(",")))
    except ValueError as e:
        raise UsageError(f"--groups {args.groups!r}: {e}") from None
    if args.repeats < 1:
        raise UsageError(f"--repeats {args.repeats} must be at least 1")
    if args.sessions is None:
        args.sessions = min(DEFAULT_SESSIONS, args.repeats)
    if not 1 <= args.sessions <= args.repeats:
        raise UsageError(f"--sessions {args.sessions} must be between 1 and --repeats "
                         f"({args.repeats})")


def check_numbers(args) -> None:
    """``--reps``, ``--jobs``, ``--time-limit`` and ``--gpus``, whatever the mode."""
    if args.reps is not None and args.reps < 1:
        raise UsageError(f"--reps {args.reps} must be at least 1 (timed repetitions per variant)")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs} must be at least 1")
    if not (args.time_limit > 0 and math.isfinite(args.time_limit)):
        raise UsageError(f"--time-limit {args.time_limit:g} must be a positive number of minutes")
    if args.gpus is not None and args.gpus != "all":
        try:
            shard.pick_count(args.gpus)
        except shard.ShardError:
            raise UsageError(f"--gpus {args.gpus}: pass a positive number of GPUs or all") from None
    shard.executor_options(args)            # --time, --cpus-per-task, the Slurm-only options


def checked(args):
    """(study, arch, cases, capacity) of a command line whose every value is valid."""
    if not args.study:
        raise UsageError(f"name a study (known: {', '.join(STUDIES)}) or pass --list")
    study = get_study(args.study)
    if not args.arch:
        raise UsageError(f"--arch is required; known: {', '.join(known_archs())}")
    arch = get_arch(args.arch)
    cases = plan(args, study, arch)
    cap = capacity(args, arch, cases)
    check_profiling(args, study)
    check_numbers(args)
    return study, arch, cases, cap

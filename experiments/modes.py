"""The two modes of ``experiments.run``: simulate the plan on this CPU, or measure it on the GPU.

Both report their progress phase by phase (``experiments.progress``) with the estimates of
``experiments.costs`` and return ``(rows, manifest parameters)``; the parameters record what each
phase took (``phase_seconds``; per case in simulate mode), so that the cost model can be refitted
from committed runs.

Simulate mode runs the cases on ``--jobs`` threads: the simulators' numba kernels release the GIL,
each case seeds its own generator, and the rows are written in plan order, so the counts do not
depend on the number of threads.
"""
from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict
from pathlib import Path

from spec.case import Case

from . import costs
from .options import UsageError, cpus
from .progress import Reporter


def sim_model(args, study) -> str:
    """The simulator a simulate run uses: the study's own (the reuse study: lock-step stack
    distances), else ``--model``."""
    if study.simulate is not None:
        return "reuse"
    return args.model


def sim_workers(args, cases: list[Case]) -> int:
    return max(1, min(args.jobs or cpus(), len(cases)))


def simulate(args, console, study, arch, cases: list[Case], work: Path, run: str,
             capacity: int, stop) -> tuple[list, dict]:
    """Every case through the simulator (``stop()`` raises when the run was interrupted)."""
    from spec.records import write_csv

    from .simulate import model_params, rows_for, simulate_case, timed_rows

    model = sim_model(args, study)
    params = model_params(arch) if model == "timed" else None
    partitions = params.time_params(arch).partitions if params is not None else 1
    est = [costs.sim_case_cost(c, arch, model, partitions).seconds for c in cases]
    workers = sim_workers(args, cases)

    def one(c: Case) -> tuple[list, float]:
        t0 = time.perf_counter()
        if study.simulate is not None:
            rows = study.simulate(c, arch, capacity, run=run, study=study.name)
        elif params is not None:
            rows = timed_rows(c, arch, params, None if args.capacity_mib is None else capacity,
                              run=run, study=study.name)
        else:
            rows = rows_for(simulate_case(c, arch, capacity), run=run, study=study.name,
                            arch=arch)
        return rows, time.perf_counter() - t0

    if model == "timed":
        # the cubins that give a cuTile grid launch its resident CTAs, built one at a time here
        # (the threads below then find them in cuda.tile's disk cache)
        from .simulate import resident_of_build
        for c in cases:
            resident_of_build(c, arch)
    results: dict[int, tuple[list, float]] = {}
    reporter = Reporter(console)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="simulate")
    try:
        with reporter.phase("simulate", "cases", est, workers) as ph:
            # longest first: the plan's makespan is then close to the estimate's
            order = sorted(range(len(cases)), key=lambda i: -est[i])
            running = {pool.submit(one, cases[i]): i for i in order}
            while running:
                finished, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
                stop()
                for f in finished:
                    i = running.pop(f)
                    results[i] = f.result()
                    ph.done(i, note=cases[i].id)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    rows = [r for i in range(len(cases)) for r in results[i][0]]
    write_csv(work / "counters.csv", rows)
    label = "lockstep" if model != "timed" else "timed"
    if label == "timed" and args.capacity_mib is None:
        capacity = params.time_params(arch).capacity_bytes
    return rows, {"source": "simulated", "capacity_bytes": capacity, "model": label,
                  **({"params": asdict(params)} if label == "timed" else {}),
                  "threads": workers,
                  "case_seconds": {cases[i].id: round(results[i][1], 3)
                                   for i in range(len(cases))}}


def measure(args, console, study, arch, cases: list[Case], work: Path, run: str,
            live) -> tuple[list, dict]:
    """Compile, check and time, then ncu (``experiments.measure``), each phase with its bar."""
    from spec.records import write_csv

    from . import measure as m

    reps = args.reps if args.reps is not None else study.reps
    groups = tuple(args.groups.split(","))
    profiled = not args.no_profile and (study.profiled or args.profile)
    plan = costs.measure_cost(cases, arch, reps=reps, timed=study.timed, profiled=profiled,
                              groups=groups, repeats=args.repeats, sessions=args.sessions)
    parts = dict(plan.parts)
    reporter = Reporter(console)
    phases: dict = {}
    t = time.perf_counter()
    with reporter.phase("compile", "builds", [parts["start and compile"]]) as ph:
        ph.start(0, f"{len(cases)} variants in parallel worker processes")
        errors = m.precompile(cases)
        ph.done(0)
    phases["compile"] = round(time.perf_counter() - t, 1)
    for err in errors:
        console.print(f"[yellow]precompile[/] {err}")
    hook = study.measure or m.check_and_time
    # the hook's order (check_and_time: problem by problem) and each case's share of the phase:
    # its kernel time and its share of its problem's SDPA peers
    order = ([c for g in m.by_problem(cases).values() for c in g] if hook is m.check_and_time
             else list(cases))
    n_of = {p: len(g) for p, g in m.by_problem(cases).items()}
    weight = [costs.kernel_seconds(c, arch)
              + (costs.peer_seconds(c.problem, arch) / n_of[c.problem] if study.timed else 0)
              for c in order]
    per_case = [parts["check and time"] * w / sum(weight) for w in weight]
    t = time.perf_counter()
    with reporter.phase("check + time", "cases", per_case) as ph:
        ph.start(0, order[0].id)

        def advance(n: int) -> None:
            ph.done(n=n)
            if ph.done_n < ph.n:
                ph.start(ph.done_n, order[ph.done_n].id)

        outcome = hook(cases, live, run=run, study=study.name, reps=reps, seed=args.seed,
                       timed=study.timed, progress=advance)
    phases["check_and_time"] = round(time.perf_counter() - t, 1)
    write_csv(work / study.rows_file, outcome.rows)
    for line in outcome.summary:
        console.print(f"  {line}")
    for case_id, why in outcome.failed.items():
        console.print(f"[red]FAILED[/] {case_id}: {why}")
    params = {"source": "measured", "device": m.device_facts(), "seed": args.seed,
              "reps": reps if study.timed else 0, "l2_state": "cold", "failed": outcome.failed,
              "estimate_seconds": round(plan.seconds, 1), "phase_seconds": phases}
    rows = list(outcome.rows)
    if not profiled:
        params["profiling"] = "skipped (--no-profile)" if args.no_profile else \
            f"not part of the {study.name} study (pass --profile)"
        return rows, params
    if not outcome.passed:
        return rows, params
    rows += _profile(args, console, reporter, study, arch, outcome.passed, work, run, live,
                     groups, params, reps)
    return rows, params


def _profile(args, console, reporter, study, arch, passed, work, run, live, groups, params,
             reps) -> list:
    from profiles.counters import failing_checks, flagged
    from profiles.ingest import IngestError
    from profiles.ncu import NcuError
    from spec.records import write_csv

    from . import measure as m
    sessions = costs.measure_cost(passed, arch, reps=reps, timed=study.timed, profiled=True,
                                  groups=groups, repeats=args.repeats, sessions=args.sessions)
    est = [s for name, s in sessions.parts if name.startswith("ncu ")]
    names = [name for name, _ in sessions.parts if name.startswith("ncu ")]
    spent: dict[str, float] = {}
    t = time.perf_counter()
    with reporter.phase("ncu", "sessions", est) as ph:
        marks = []

        def session_starts(text: str) -> None:
            now = time.perf_counter()
            if marks:
                spent[names[len(marks) - 1]] = round(now - marks[-1], 1)
                ph.done(len(marks) - 1)
            marks.append(now)
            ph.start(len(marks) - 1, f"{text} of {len(passed)} cases")

        try:
            counters, every, settings = m.profile(
                passed, live, work, run=run, study=study.name, groups=groups,
                repeats=args.repeats, sessions=args.sessions, seed=args.seed,
                progress=session_starts)
        except (NcuError, IngestError) as e:
            console.print(f"[red]profiling failed[/]: {e}")
            params["profiling"] = f"failed: {e}"
            return []
        if marks:
            spent[names[len(marks) - 1]] = round(time.perf_counter() - marks[-1], 1)
            ph.done(len(marks) - 1)
    params["phase_seconds"]["ncu"] = round(time.perf_counter() - t, 1)
    params["phase_seconds"]["ncu_sessions"] = spent
    write_csv(work / "counters.csv", counters)
    write_csv(work / "counters_repeats.csv", every)
    kinds: dict[str, int] = {}
    for r in flagged(counters):
        for f in filter(None, r.flags.split(";")):
            kinds[f.split("=")[0]] = kinds.get(f.split("=")[0], 0) + 1
    params["consistency_failures"] = [f"{r.variant} {r.metric}" for r in failing_checks(counters)]
    if kinds:
        console.print("flagged summary rows (see the flags column of counters.csv): "
                      + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    params["profiling"] = settings
    return counters


def check_device(arch, live) -> None:
    """The GPU present must be the arch the study names."""
    if live is None:
        raise UsageError("--mode measure needs a CUDA GPU and none was found")
    if live.name != arch.name:
        raise UsageError(f"--arch {arch.name} was asked for, but the GPU present is "
                         f"{live.marketing_name} ({live.name}); pass --arch {live.name}")

"""The two modes of ``experiments.run``: simulate the plan on this CPU, or measure it on the GPU.

Both report their progress phase by phase (``experiments.runner.progress``) with the estimates of
``experiments.runner.costs`` and return ``(rows, manifest parameters)``; the parameters record what
each phase took (``phase_seconds``; per case in simulate mode), so that the cost model can be
refitted from committed runs.

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

from ..registry.studies import hook
from ..rundirs.journal import Journal
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

    from ..simulation.simulate import model_params, rows_for, simulate_case, timed_rows

    model = sim_model(args, study)
    params = model_params(arch) if model == "timed" else None
    partitions = params.time_params(arch).partitions if params is not None else 1
    est = [costs.sim_case_cost(c, arch, model, partitions, sample=args.sample).seconds
           for c in cases]
    workers = sim_workers(args, cases)

    def one(c: Case) -> tuple[list, float]:
        t0 = time.perf_counter()
        if study.simulate is not None:
            rows = hook(study.simulate)(c, arch, capacity, run=run, study=study.name)
        elif params is not None:
            rows = timed_rows(c, arch, params, None if args.capacity_mib is None else capacity,
                              run=run, study=study.name, sample=args.sample)
        else:
            rows = rows_for(simulate_case(c, arch, capacity), run=run, study=study.name,
                            arch=arch)
        return rows, time.perf_counter() - t0

    if model == "timed":
        # the cubins that give a cuTile grid launch its resident CTAs, built one at a time here
        # (the threads below then find them in cuda.tile's disk cache)
        from ..simulation.simulate import resident_of_build
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
    from analysis.cache.timesim import MODEL_VERSION
    return rows, {"source": "simulated", "capacity_bytes": capacity, "model": label,
                  **({"model_version": MODEL_VERSION, "sampled": bool(args.sample),
                      "params": asdict(params)} if label == "timed" else {}),
                  "threads": workers,
                  "case_seconds": {cases[i].id: round(results[i][1], 3)
                                   for i in range(len(cases))}}


def measure(args, console, study, arch, cases: list[Case], work: Path, run: str,
            live) -> tuple[list, dict]:
    """Compile, check and time, then ncu (``experiments.measurement.measure``), each phase with its
    bar and each finished piece kept in ``work``'s journal (``experiments.rundirs.journal``): the
    builds, each problem's gate and timing (each case alone for a study's own measure hook, which
    gets the whole plan in one piece), each ncu session. A resumed run (``--resume``) reads the
    pieces an interrupted attempt finished instead of measuring them again."""
    from spec.records import write_csv

    from ..measurement import measure as m
    journal = Journal(work)
    reps = args.reps if args.reps is not None else study.reps
    groups = tuple(args.groups.split(","))
    profiled = not args.no_profile and (study.profiled or args.profile)
    plan = costs.measure_cost(cases, arch, reps=reps, timed=study.timed, profiled=profiled,
                              groups=groups, repeats=args.repeats, sessions=args.sessions,
                              eager=study.eager)
    parts = dict(plan.parts)
    reporter = Reporter(console)
    phases: dict = {}
    kept: list[str] = []
    ids = [c.id for c in cases]
    done = journal.get("compile", ids)
    if done is None:
        t = time.perf_counter()
        with reporter.phase("compile", "builds", [parts["start and compile"]]) as ph:
            ph.start(0, f"{len(cases)} variants in parallel worker processes")
            errors = m.precompile(cases)
            ph.done(0)
        phases["compile"] = round(time.perf_counter() - t, 1)
        journal.put("compile", {"cases": ids, "errors": errors, "seconds": phases["compile"]})
    else:
        errors, phases["compile"] = done[0]["errors"], done[0]["seconds"]
        kept.append("compile")
    for err in errors:
        console.print(f"[yellow]precompile[/] {err}")
    outcome, phases["check_and_time"] = _check_and_time(args, console, reporter, study, arch,
                                                        cases, run, live, reps, parts, journal,
                                                        kept)
    write_csv(work / study.rows_file, outcome.rows)
    for line in outcome.summary:
        console.print(f"  {line}")
    for case_id, why in outcome.failed.items():
        console.print(f"[red]FAILED[/] {case_id}: {why}")
    params = {"source": "measured", "device": m.device_facts(), "seed": args.seed,
              "reps": reps if study.timed else 0, "l2_state": "cold", "failed": outcome.failed,
              "estimate_seconds": round(plan.seconds, 1),
              "estimate_phase_seconds": _phase_estimates(plan.parts), "phase_seconds": phases}
    rows = list(outcome.rows)
    if not profiled:
        params["profiling"] = "skipped (--no-profile)" if args.no_profile else \
            f"not part of the {study.name} study (pass --profile)"
    elif outcome.passed:
        rows += _profile(args, console, reporter, study, arch, outcome.passed, work, run, live,
                         groups, params, reps, kept)
    if args.resume:
        params["resumed"] = {"kept": kept}
    return rows, params


def _phase_estimates(parts) -> dict:
    """The estimate of each phase, keyed like ``phase_seconds`` (what a run's manifest compares
    the measured wall times with)."""
    out: dict = {"compile": 0.0, "check_and_time": 0.0}
    sessions = {}
    for name, secs in parts:
        if name.startswith("ncu "):
            sessions[name] = round(secs, 1)
        else:
            key = "compile" if name == "start and compile" else "check_and_time"
            out[key] = round(out[key] + secs, 1)
    if sessions:
        out["ncu"] = round(sum(sessions.values()), 1)
        out["ncu_sessions"] = sessions
    return out


def measure_units(study, cases: list[Case]) -> list[list[Case]]:
    """The pieces the check-and-time phase is measured and kept in: one problem and its cases
    for the default hook (``check_and_time`` times them beside the problem's peers and nothing
    else), the whole plan for a study's own hook (which may share work over the plan: a
    partition check, summary lines over every case)."""
    from ..measurement import measure as m
    if study.measure is not None:
        return [list(cases)]
    return list(m.by_problem(cases).values())


def _check_and_time(args, console, reporter, study, arch, cases, run, live, reps, parts,
                    journal: Journal, kept: list[str]):
    from ..measurement import measure as m
    measure_unit = hook(study.measure) if study.measure else m.check_and_time
    units = measure_units(study, cases)
    order = [c for u in units for c in u]
    # each case's share of the phase: its kernel time and its share of its problem's SDPA peers
    n_of = {p: len(g) for p, g in m.by_problem(cases).items()}
    weight = [costs.kernel_seconds(c, arch)
              + (costs.peer_seconds(c.problem, arch) / n_of[c.problem] if study.timed else 0)
              for c in order]
    per_case = [parts["check and time"] * w / sum(weight) for w in weight]
    res = m.Outcome()
    seconds = 0.0
    families: dict = {}
    extra = {"families": families} if study.measure is None else {}
    with reporter.phase("check + time", "cases", per_case) as ph:

        def advance(n: int) -> None:
            ph.done(n=n)
            if ph.done_n < ph.n:
                ph.start(ph.done_n, order[ph.done_n].id)

        for k, unit in enumerate(units):
            key, ids = f"check-{k:04d}", [c.id for c in unit]
            done = journal.get(key, ids)
            if done is None:
                ph.start(ph.done_n, unit[0].id)
                t = time.perf_counter()
                part = measure_unit(unit, live, run=run, study=study.name, reps=reps,
                                    seed=args.seed, timed=study.timed, progress=advance, **extra)
                took = round(time.perf_counter() - t, 3)
                journal.put(key, {"cases": ids, "passed": [c.id for c in part.passed],
                                  "failed": part.failed, "summary": part.summary,
                                  "seconds": took}, part.rows)
            else:
                record, rows = done
                by_id = {c.id: c for c in unit}
                part = m.Outcome(passed=[by_id[i] for i in record["passed"]],
                                 failed=record["failed"], rows=rows, summary=record["summary"])
                took = record["seconds"]
                kept.append(key)
                advance(len(unit))
            seconds += took
            res.passed += part.passed
            res.failed |= part.failed
            res.rows += part.rows
            res.summary += part.summary
    return res, round(seconds, 1)


def _profile(args, console, reporter, study, arch, passed, work, run, live, groups, params,
             reps, kept: list[str]) -> list:
    from profiles.collect import KEPT
    from profiles.counters import failing_checks, flagged
    from profiles.ingest import IngestError
    from profiles.ncu import NcuError
    from spec.records import write_csv

    from ..measurement import measure as m
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
            if KEPT in text:
                kept.append(names[len(marks)])
            marks.append(now)
            ph.start(len(marks) - 1, f"{text} of {len(passed)} cases")

        try:
            counters, every, settings = m.profile(
                passed, live, work, run=run, study=study.name, groups=groups,
                repeats=args.repeats, sessions=args.sessions, seed=args.seed,
                progress=session_starts, resume=bool(args.resume))
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

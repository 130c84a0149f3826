"""``--dry-run``: the plan, the work, what each mode would cost; and the limits every run checks.

The estimates are closed-form (``experiments.runner.costs``; nothing is simulated or calibrated
here), so a dry run answers at once for any ``--seq``. A run whose estimate exceeds ``--time-limit``
or the memory free on this machine (simulate mode) or on the GPU (measure mode) is refused before it
starts, with one line naming the estimate and ``--force``.
"""
from __future__ import annotations

from paper_figures.catalogue import drawn_with
from profiles.metrics import DEFAULT_GROUPS
from spec.arch import MiB
from spec.case import Case

from ..registry.lengths import describe_scale
from . import costs
from .costs import duration, size
from .options import UsageError, simulatable
from .report import fit_table, heading, panels, shape_columns, si_count


def available_memory() -> int | None:
    """Bytes this machine can still give a process (``MemAvailable``); None when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def plan_table(cases: list[Case], width: int, title: str):
    groups, varies = panels(cases)
    cells: list = []
    for panel, group in groups.items():
        cells.append(heading(panel, group, varies))
        for c in group:
            cells.append({"variant": c.variant.id(c.problem), "B": c.problem.B,
                          "S": c.problem.S_q, "problem": c.problem.label,
                          "ctas": c.resident, "acc": costs.tile_accesses(c)})
    cols = shape_columns(varies) + [("ctas", "resident CTAs", str),
                                    ("acc", "tile accesses", si_count)]
    return fit_table(cells, cols, width, title)


def measure_peak_bytes(cases: list[Case], arch) -> int:
    """GPU memory of the largest problem in measure mode: q, k, v and an output per case and per
    SDPA peer at the input precision, their fp32 copies, the fp32 reference and two fp32
    temporaries of the check, and the 2 x L2 flush buffer."""
    out = 0
    for prob in {c.problem for c in cases}:
        q = prob.B * prob.H * prob.S_q * prob.D
        kv = 2 * prob.B * prob.H_kv * prob.S_kv * prob.D
        n = sum(1 for c in cases if c.problem == prob)
        nb = prob.dtype.nbytes
        out = max(out, nb * (q + kv) + nb * q * (n + 2) + 4 * (q + kv) + 12 * q)
    return out + 2 * arch.l2_bytes


def simulate_estimate(args, study, arch, cases, capacity, workers: int):
    from .modes import sim_model
    model = sim_model(args, study)
    partitions = 1
    if model == "timed":
        from ..simulation.simulate import model_params
        partitions = model_params(arch).time_params(arch).partitions
    figures = 0 if args.no_figures else len(drawn_with(study.name))
    return model, costs.sim_plan_cost(cases, arch, model, workers, figures, partitions,
                                      sample=model == "timed" and args.sample)


def _measure_estimate(args, study, arch, cases, sessions=None, groups=None):
    reps = args.reps if args.reps is not None else study.reps
    return costs.measure_cost(cases, arch, reps=reps, timed=study.timed,
                              profiled=not args.no_profile and (study.profiled or args.profile),
                              groups=groups or tuple(args.groups.split(",")),
                              repeats=args.repeats, sessions=sessions or args.sessions,
                              eager=study.eager)


def _ncu_parts(est) -> str:
    """Each ncu session's estimate, by group (sessions of one group summed)."""
    by: dict[str, float] = {}
    for name, secs in est.parts:
        if name.startswith("ncu "):
            g = name.split()[1]
            by[g] = by.get(g, 0.0) + secs
    return ", ".join(f"{g} {duration(s)}" for g, s in by.items())


def _measure_lines(args, study, arch, cases) -> list[str]:
    """The measured run's estimate phase by phase (the manifest of a run records the same
    phases' wall times beside these estimates), and what the fuller protocols would cost."""
    est = _measure_estimate(args, study, arch, cases)
    parts = dict(est.parts)
    ncu = [s for n, s in est.parts if n.startswith("ncu ")]
    _, where = costs.rate_of(arch, cases[0].variant.backend.value, None, None)
    line = (f"measure (one {arch.marketing_name or arch.name}): about {duration(est.seconds)} = "
            f"start and compile {duration(parts['start and compile'])} + check and time "
            f"{duration(parts['check and time'])}")
    if ncu:
        line += (f" + ncu {duration(sum(ncu))} ({_ncu_parts(est)}; {args.sessions} session(s) "
                 f"per metric group, {args.repeats} launches per case and group)")
    line += f"; peak GPU memory about {size(measure_peak_bytes(cases, arch))}"
    lines = [line]
    groups = tuple(args.groups.split(","))
    if ncu and set(DEFAULT_GROUPS) - set(groups):
        full = _measure_estimate(args, study, arch, cases, groups=DEFAULT_GROUPS)
        lines.append(f"  with --full-protocol (every metric group: {', '.join(DEFAULT_GROUPS)}; "
                     f"the study reads {', '.join(groups)}): about {duration(full.seconds)}, "
                     f"ncu {_ncu_parts(full)}")
    if ncu and args.sessions < args.repeats:
        full = _measure_estimate(args, study, arch, cases, sessions=args.repeats)
        lines.append(f"  with --sessions {args.repeats} (one fresh process per repeat, the "
                     f"between-session spread too): about {duration(full.seconds)}")
    lines.append(f"  (costs fitted on {costs.measure_fit_runs()} committed measured runs, "
                 f"experiments/runner/costs.py; kernel times from each family's throughput: "
                 f"{where})")
    return lines


def print_plan(console, args, study, arch, cases: list[Case], capacity: int, mode_line: str,
               workers: int) -> None:
    table, left = plan_table(cases, console.width, f"{study.name} on {arch.name}: "
                                                   f"{len(cases)} cases")
    console.print(table)
    if left:
        console.print(f"(left out at this width: {', '.join(left)})")
    for p in {c.problem.S_kv: c.problem for c in cases}.values():
        console.print(f"  S={p.S_kv}: {describe_scale(arch, p)}")
    acc = [costs.tile_accesses(c) for c in cases]
    console.print(f"work: {len(cases)} cases, {sum(acc) / 1e6:,.1f} M tile accesses (largest "
                  f"case {max(acc) / 1e6:,.1f} M)")
    console.print(mode_line, markup=False)
    if simulatable(study):
        model, est = simulate_estimate(args, study, arch, cases, capacity, workers)
        name = {"timed": "timed model", "lockstep": "lock-step model",
                "reuse": "lock-step model, reuse distances"}[model]
        console.print(f"simulate ({name}, {capacity / MiB:g} MiB L2): about "
                      f"{duration(est.seconds)} on {workers} thread(s), peak memory about "
                      f"{size(est.peak_bytes)} (closed-form costs fitted on this 2-core "
                      "machine's committed timings, experiments/runner/costs.py)")
    if study.measurable:
        for line in _measure_lines(args, study, arch, cases):
            console.print(line)


def check_limits(args, mode: str, study, arch, cases, capacity, workers: int,
                 gpu_free: int | None = None) -> None:
    """Refuse (UsageError) a run whose estimate exceeds ``--time-limit`` or the free memory,
    unless ``--force``."""
    if args.force:
        return
    if mode == "simulate":
        _, est = simulate_estimate(args, study, arch, cases, capacity, workers)
        free, what, peak = available_memory(), "this machine has", est.peak_bytes
    else:
        est = _measure_estimate(args, study, arch, cases)
        free, what, peak = gpu_free, "the GPU has", measure_peak_bytes(cases, arch)
    top = max(cases, key=costs.tile_accesses)
    why = (f"{mode} is estimated at about {duration(est.seconds)} and {size(peak)} of memory at "
           f"peak (largest case {top.id}: {si_count(costs.tile_accesses(top))} tile accesses)")
    fix = "pass a smaller --seq or a --filter, or --force to run it anyway"
    if free is not None and peak > free:
        raise UsageError(f"{why}, and {what} {size(free)} free; {fix}")
    if est.seconds > 60 * args.time_limit:
        raise UsageError(f"{why}, over --time-limit {args.time_limit:g} min; {fix} (or raise "
                         "--time-limit)")

"""``python -m experiments.run decode --arch <name>``: the decode locality study.

A decode step reads a layer's whole K/V cache; the next step of the layer reads it again. Scanning
each split's chunk the same way every step (``linear``) starts on the tiles an LRU L2 evicted
first; the opposite way (``alternate``, the sawtooth across steps) on those read last
(``experiments.simulation.decode`` has the argument). Its cases are pairs of split-K/V launches,
not split-Q cases, so it runs through its own entry (``Study.entry``) with every study's run
directory protocol (published only when complete, ``manifest.json``, figures, one line and exit
2 on bad input):

- ``simulate`` (any arch, this CPU): step 2's DRAM read bytes by the timed two-partition
  simulator (``experiments.simulation.decode.simulated_rows``) into ``counters.csv``;
- ``measure`` (a GPU of the arch): ncu ``dram__bytes_read.sum`` of step 2 after an L2 flush and
  an untimed step 1, ``--repeats`` times, into ``counters.csv``; step 2's time beside SDPA flash
  and cuDNN into ``timing.csv`` (``experiments.instruments.decode_steps.measure_rows``).

Figure: ``decode`` (``paper_figures.decode``).
"""
from __future__ import annotations

import time
from pathlib import Path

from spec import detect, get_arch
from spec.arch import no_gpu_reason

from .options import UsageError
from .report import render_figures

MODULE = "experiments.run"
NOT_HERE = ("seq", "filter", "capacity_mib", "sample", "exact", "groups", "full_protocol",
            "sessions", "profile", "no_profile", "gpus", "executor", "jobs", "seed")
"""Options of ``experiments.run`` that say nothing to this study (its grid is fixed, its inputs
seeded by their shape, its ncu metric one)."""
REPEATS = 3
REPS = 10


def _refuse_options(args) -> None:
    given = [n for n in NOT_HERE if getattr(args, n, None) not in (None, False)]
    if args.model != "timed":
        given.append("model")
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise UsageError(f"{flag} does not apply to the decode study (a fixed grid of decode "
                         f"step pairs, one ncu metric); leave it out")
    for name in ("repeats", "reps"):
        n = getattr(args, name)
        if n is not None and n < 1:
            raise UsageError(f"--{name} {n}: give at least 1")


def _mode(args, arch) -> tuple[str, str]:
    gpu = detect() if args.mode != "simulate" else None
    if args.mode == "measure" and gpu is None:
        raise UsageError(f"--mode measure needs a CUDA GPU and none was found "
                         f"({no_gpu_reason()}); add --mode simulate")
    if gpu is not None and args.mode != "simulate":
        if gpu.name != arch.name:
            raise UsageError(f"--arch {arch.name} but this GPU is a {gpu.name}; pass --arch "
                             f"{gpu.name} or --mode simulate")
        return "measure", f"measuring on this {gpu.name}"
    if args.mode == "simulate":
        return "simulate", "--mode simulate: SIMULATING on this CPU"
    return "simulate", f"no GPU here ({no_gpu_reason()}): SIMULATING on this CPU"


def _plan_lines(arch, mode: str, repeats: int, reps: int) -> list[str]:
    from experiments.simulation.decode import STUDY_SHAPES, study_cases
    cases = study_cases(arch.name)
    lines = [f"decode study on {arch.name}: {len(cases)} cases ({len(STUDY_SHAPES)} shapes x "
             f"K+V of 0.5, 1, 2 x the simulated L2 x linear/alternate x group/none packing)"]
    for c in cases:
        lines.append(f"  {c['shape']:9} B{c['B']} H{c['H']}/{c['H_kv']} q{c['S_q']} d{c['D']} "
                     f"S_kv={c['S_kv']:>6} ({c['size']:g}x L2) {c['order']:9} {c['packing']}")
    if mode == "measure":
        kernels = len(cases) * (repeats + 1) * 4
        lines.append(f"measure: ncu on about {kernels} decode kernels ({repeats} repeats), then "
                     f"step 2 timed {reps} times beside SDPA flash and cuDNN: about "
                     f"{kernels * 0.3 / 60 + 1:.0f} min")
    else:
        lines.append("simulate: the timed two-partition simulator, a few seconds")
    return lines


def run(args, argv: list[str], console) -> int:
    """The study's entry, called by ``experiments.run`` (options already parsed)."""
    from experiments.rundirs.rundir import (
        check_creatable,
        check_free,
        command_line,
        default_run_dir,
        reserved_run_dir,
        write_manifest,
    )
    _refuse_options(args)
    if not args.arch:
        raise UsageError("--arch is required (the decode study simulates any arch and measures "
                         "the GPU present)")
    arch = get_arch(args.arch)
    repeats = args.repeats or REPEATS
    reps = args.reps or REPS
    mode, why = _mode(args, arch)
    if mode == "simulate" and (args.repeats is not None or args.reps is not None):
        raise UsageError("--repeats and --reps set how the GPU is measured and mean nothing "
                         "when simulating; leave them out")
    if args.dry_run:
        for line in [f"this command would {mode.upper()}: {why}"] + _plan_lines(
                arch, mode, repeats, reps):
            console.print(line, markup=False, highlight=False)
        return 0
    if args.out is not None:
        check_free(Path(args.out))
        check_creatable(Path(args.out))
    console.print(why, style="bold yellow", markup=False)
    t0 = time.perf_counter()
    command = command_line(MODULE, argv)
    with reserved_run_dir(args.out, lambda: default_run_dir(arch.name, "decode", mode),
                          on_debris=lambda line: console.print(line, markup=False)) as (out, work):
        if mode == "simulate":
            from experiments.simulation.decode import simulated_rows
            counters, timing = simulated_rows(arch.name, out.name), []
            params = {"source": "simulated", "model": "timed"}
        else:
            from experiments.instruments.decode_steps import measure_rows
            from experiments.measurement.measure import device_facts
            counters, timing = measure_rows(arch.name, run=out.name, repeats=repeats,
                                            reps=reps, work=work)
            params = {"source": "measured", "device": device_facts(), "repeats": repeats,
                      "reps": reps, "l2_state": "flushed before step 1"}
        from spec.records import write_csv
        write_csv(work / "counters.csv", counters)
        if timing:
            write_csv(work / "timing.csv", timing)
        fields = dict(command=command, study="decode", mode=mode, arch=arch, parameters=params)
        write_manifest(work, **fields, figures=[])
        report = [] if args.no_figures else render_figures(work, out, arch.name, ("decode",))
        write_manifest(work, **fields, figures=report,
                       wall_seconds=round(time.perf_counter() - t0, 1))
    for line in summary(counters, timing, mode):
        console.print(line, markup=False, highlight=False)
    console.print(f"wrote {out} ({time.perf_counter() - t0:.0f} s)", markup=False)
    return 0


def summary(counters, timing, mode: str) -> list[str]:
    """One line per shape and cache size: step 2's DRAM reads over the K/V bytes per variant
    (median over repeats), and, measured, the best SDPA backend's median step-2 time over ours."""
    import statistics

    from spec.decode import cache_bytes
    label = "MEASURED" if mode == "measure" else "SIMULATED (a prediction, not a measurement)"
    out = [f"{label}: DRAM reads of step 2 / its K+V bytes"
           + ("; best SDPA step 2 / ours (> 1: faster)" if timing else "")]
    cells: dict = {}
    for r in counters:
        kv = cache_bytes(r.B, r.H_kv, r.S_kv, r.D)
        cells.setdefault((r.B, r.H, r.H_kv, r.S_q, r.D, r.x), {}).setdefault(
            r.variant, []).append(r.value / kv)
    times: dict = {}
    for r in timing:
        times.setdefault((r.B, r.H, r.H_kv, r.S_q, r.D, r.x), {}).setdefault(
            r.variant, []).append(r.value)
    for key, by in cells.items():
        B, H, H_kv, S_q, D, size = key
        text = " ".join(f"{v.removeprefix('decode.')}={statistics.median(x):.3f}"
                        for v, x in sorted(by.items()))
        t = {v: statistics.median(x) for v, x in times.get(key, {}).items()}
        peers = [t[p] for p in ("sdpa-flash", "sdpa-cudnn") if p in t]
        if peers:
            text += " | " + " ".join(f"{v.removeprefix('decode.')}={min(peers) / ms:.2f}x"
                                     for v, ms in sorted(t.items()) if v.startswith("decode."))
        out.append(f"  B{B} H{H}/{H_kv} q{S_q} d{D} {size:g}x L2: {text}")
    return out

"""Measure mode: correctness gate, CUDA-event timing beside the SDPA peers, then ncu counters.

For every problem of a plan (cases sharing a problem share inputs and the fp32 reference):

1. each variant is prepared (compiled; its resources become rows: registers, local bytes per
   thread, shared memory, CTAs per SM, so every run records spills) and run once on a NaN-poisoned
   output and checked against the fp32 reference (``experiments.measurement.correctness``); a
   variant that fails to build or to pass is reported and the sweep goes on without it;
2. the passing variants and PyTorch SDPA's flash and cuDNN backends are timed together, launch by
   launch alternating, cold L2 (``experiments.measurement.timing``); every sample becomes a row;
3. the passing cases are profiled with ncu (``profiles.collect``): one session per metric group
   and session, each case launched ``repeats / sessions`` times inside an NVTX range named by its
   case id; the reports are converted to rows by metric name, and non-compulsory misses are
   derived from the exact cold-miss count of ``analysis.models.traffic``.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from analysis.launch.drift import drift, sample_steps, step_time_by_gap
from analysis.models.traffic import cold_misses
from spec import Arch, Backend, TileGrid
from spec.case import Case, case_to_dict
from spec.records import UNITS, Metric, Row, Source, case_fields

from .correctness import check, poisoned_like, random_inputs, reference
from .families import family
from .timing import sdpa_peers, time_interleaved

RESOURCES = (("registers", "registers", "register"), ("local_bytes", "local_bytes", "byte"),
             ("smem_bytes", "smem_bytes", "byte"), ("threads", "threads", "thread"),
             (Metric.CTAS_PER_SM, "ctas_per_sm", "CTA"))
"""(metric, ``Prepared`` field, unit) of the resource rows: the names and units of the first
committed CUDA bench (retired into git history; see profiles/README.md). ``threads`` (the
launch's CTA size, at which ``ctas_per_sm`` is the driver's occupancy) is recorded with it:
without it (older runs), cuTile builds were asked at their register-limited maximum CTA size
(``kernels.build.resources.required_threads``)."""
DRIFT_POINTS = 300
"""Spread samples kept per drift case (the first and last step always among them)."""
DRIFT_EVERY = 64
"""The drift study stamps every 64th step of each CTA, not every step: thread 0's timer read and
24-byte record per step slowed the CTAs unevenly and made them drift apart (few-CTA linear
launches of the every-step trace build miss 1.4-5.7x the plain build's sectors,
profiles/h100/tracecost-20261125). 64 steps are 1.3 MiB of K/V at 80x80 D=64, well below the
spreads that matter (a partition holds 1280 steps)."""


@dataclass
class Outcome:
    passed: list[Case] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)     # case id -> reason
    rows: list[Row] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)         # one line per case, for the log


def case_row(case_or_peer, problem, metric, value, *, run, study, arch, sample=0, note="",
         source=Source.MEASURED.value, unit=None, x=None) -> Row:
    if isinstance(case_or_peer, Case):
        fields = case_fields(problem, case_or_peer.variant)
    else:   # an SDPA peer: no tiles, order or schedule of ours
        fields = case_fields(problem) | dict(variant=case_or_peer, backend=case_or_peer, order="",
                                             schedule="", occupancy=None, tile_m=0, tile_n=0)
    return Row(run=run, study=study, arch=arch, metric=metric, value=float(value),
               unit=UNITS.get(metric, "") if unit is None else unit, source=source,
               sample=sample, note=note, x=x, **fields)


def resource_rows(case: Case, prepared, *, run: str, study: str, arch: str) -> list[Row]:
    """Registers, local bytes per thread, shared memory per CTA and CTAs per SM of a prepared
    build (either family: ``spec.family.PREPARED_FIELDS``); the note names the build."""
    return [case_row(case, case.problem, metric, getattr(prepared, attr), run=run, study=study,
                 arch=arch, unit=unit, note=prepared.build)
            for metric, attr, unit in RESOURCES]


def by_problem(cases: list[Case]) -> dict:
    groups: dict = {}
    for c in cases:
        groups.setdefault(c.problem, []).append(c)
    return groups


def precompile(cases: list[Case]) -> list[str]:
    """Build every variant of a plan in parallel worker processes before anything is timed (both
    families keep compiled kernels in a disk cache, so the timed process then only loads them).
    Returns error strings; a variant that fails here fails again, with its full message, in
    ``check_and_time``."""
    from cuda_baseline.host.backend import instance_for
    from cuda_baseline.host.backend import precompile as cuda_precompile
    from kernels.host.warm import Job, warm
    jobs = [Job(B=c.problem.B, H=c.problem.H, H_kv=c.problem.H_kv, S_q=c.problem.S_q,
                S_kv=c.problem.S_kv, D=c.problem.D, dtype=c.problem.dtype.value,
                causal=c.problem.causal, order=c.variant.order.label,
                schedule=c.variant.schedule.label, tile_m=c.variant.tiles.m,
                tile_n=c.variant.tiles.n, occupancy=c.variant.occupancy,
                level=c.variant.level or 6)
            for c in cases if c.variant.backend == Backend.CUTILE and c.variant.bwd is None]
    errors = warm(jobs)
    cuda = [instance_for(c.variant, c.problem) for c in cases if c.variant.backend == Backend.CUDA]
    try:
        cuda_precompile(cuda)
    except Exception as e:  # noqa: BLE001 - reported per case by check_and_time
        errors.append(f"CUDA precompile: {type(e).__name__}: {str(e)[:300]}")
    return errors


def gate(fam, case: Case, q, k, v, res: Outcome, *, run: str, study: str, arch: Arch,
         ref=None, launch=None, what: str = ""):
    """The correctness gate every measured case passes before it is timed, traced or profiled:
    prepare it (its resource rows recorded), launch it once on a NaN-poisoned output
    (``launch(prepared, out)``, default the family's ``run``) and compare with the fp32
    reference (``ref``, computed here when None). The verdict is a ``max_abs_err`` row; a case
    that fails to build or to pass goes to ``res.failed`` (``what`` prefixes the verdict) and the
    sweep goes on. Returns ``(prepared, out, verdict)`` of a passing case (appended to
    ``res.passed``), else None."""
    import torch
    problem = case.problem
    out = poisoned_like(q)
    try:
        prepared = fam.prepare(case.variant, problem)
        res.rows += resource_rows(case, prepared, run=run, study=study, arch=arch.name)
        if launch is None:
            fam.run(prepared, q, k, v, out)
        else:
            launch(prepared, out)
        torch.cuda.synchronize()
        verdict = check(out, q, k, v, problem.causal, ref)
    except Exception as e:              # a failed variant is reported; the sweep goes on
        res.failed[case.id] = f"{type(e).__name__}: {e}"
        return None
    res.rows.append(case_row(case, problem, Metric.MAX_ABS_ERR, verdict.max_err, run=run,
                             study=study, arch=arch.name, note=str(verdict)))
    if not verdict.passed:
        res.failed[case.id] = f"{what}{verdict}"
        return None
    res.passed.append(case)
    return prepared, out, verdict


def check_and_time(cases: list[Case], arch: Arch, *, run: str, study: str, reps: int, seed: int,
                   timed: bool = True, progress=None, families: dict | None = None) -> Outcome:
    """Gate and time the cases problem by problem (each problem's inputs, reference and SDPA
    peers are shared by its cases and nothing else, so a problem's rows are the same whether it
    is measured alone or in a plan). ``families``: the loaded kernel families by backend, shared
    between calls that measure a plan piece by piece."""
    import torch
    res = Outcome()
    families = {} if families is None else families
    for problem, group in by_problem(cases).items():
        q, k, v = random_inputs(problem, seed)
        ref = reference(q, k, v, problem.causal)
        launchers = {}
        for case in group:
            try:
                fam = families.get(case.variant.backend) or families.setdefault(
                    case.variant.backend, family(case.variant.backend, arch.name))
            except Exception as e:          # a family that cannot load fails its cases only
                res.failed[case.id] = f"{type(e).__name__}: {e}"
                continue
            passed = gate(fam, case, q, k, v, res, run=run, study=study, arch=arch, ref=ref)
            if passed is not None:
                prepared, out, _ = passed
                launchers[case] = (lambda f=fam, p=prepared, o=out, q=q, k=k, v=v:
                                   f.run(p, q, k, v, o))
        peers = sdpa_peers(q, k, v, problem.causal) if timed else {}
        named = {c.id: fn for c, fn in launchers.items()} | peers
        samples = (time_interleaved(named, reps=reps, l2="cold", l2_bytes=arch.l2_bytes)
                   if timed and named else {})
        for who, s in samples.items():
            subject = next((c for c in launchers if c.id == who), who)
            for i, ms in enumerate(s.ms):
                res.rows.append(case_row(subject, problem, Metric.KERNEL_TIME_MS, ms, run=run,
                                     study=study, arch=arch.name, sample=i, note="l2=cold"))
            res.rows.append(case_row(subject, problem, Metric.TFLOPS, s.tflops(problem.flops),
                                 run=run, study=study, arch=arch.name,
                                 note=f"median of {len(s.ms)}, spread ±{100 * s.spread:.1f}%"))
            res.rows.append(case_row(subject, problem, Metric.HOST_LAUNCH_MS, s.host_median,
                                 run=run, study=study, arch=arch.name,
                                 note=f"median of {len(s.host_ms)} launch calls, host wall time"))
        del q, k, v, ref
        torch.cuda.empty_cache()
        if progress is not None:
            progress(len(group))
    return res


def drift_rows(case: Case, time_ns, arch: Arch, *, run: str, study: str, points: int,
               note: str, every: int = 1) -> tuple[list[Row], str]:
    """The drift rows of one trace build (``time_ns`` int64 [n_ctas, records], -1 padded; record
    ``r`` is step ``r * every``): the
    median step time (``median_step_ns``, with ``note``), the spread of step start times
    over the CTAs at ``points`` sampled steps (``cta_start_spread_ns``, x = step), the mean step
    duration by distance behind the leading CTA (``step_ns_by_gap``, x = the bin's lower edge
    in steps, ``analysis.launch.drift.step_time_by_gap``; the note counts its steps); and a summary
    line: the spread after one work item and at most, in steps and in MiB of K/V."""
    problem, variant = case.problem, case.variant
    d = drift(time_ns, every)
    rows = [case_row(case, problem, Metric.STEP_NS, d.median_step_ns, run=run, study=study,
                 arch=arch.name, note=note)]
    rows += [case_row(case, problem, Metric.CTA_START_SPREAD_NS, d.spread_ns[i], run=run,
                  study=study, arch=arch.name, x=float(d.step[i]))
             for i in sample_steps(len(d.step), points)]
    gt = step_time_by_gap(time_ns, every=every, d=d)
    rows += [case_row(case, problem, Metric.STEP_NS_BY_GAP, float(m), run=run, study=study,
                      arch=arch.name, x=float(e), note=f"{int(n)} steps")
             for e, m, n in zip(gt.edges, gt.mean_ns, gt.count) if n > 0]
    g = TileGrid(problem, variant.tiles)
    steps = d.spread_steps
    after_one = steps[min(int(np.searchsorted(d.step, g.n_kv)), len(steps) - 1)]
    span_mib = steps.max() * g.kv_step_bytes / 2**20
    return rows, (f"{case.id}: step {d.median_step_ns / 1e3:.2f} us, spread {after_one:.1f} "
                  f"steps after one work item ({g.n_kv} steps), max {steps.max():.1f} steps = "
                  f"{span_mib:.1f} MiB of K/V (L2 {arch.l2_bytes / 2**20:.0f} MiB)")


def _drift_case(fam, case: Case, arch: Arch, res: Outcome, *, run: str, study: str, seed: int,
                points: int) -> None:
    problem = case.problem
    q, k, v = random_inputs(problem, seed)
    tr: dict = {}
    passed = gate(fam, case, q, k, v, res, run=run, study=study, arch=arch,
                  launch=lambda p, o: tr.update(fam.trace(p, q, k, v, o, every=DRIFT_EVERY)),
                  what="trace build output ")
    if passed is None:
        return
    verdict = passed[2]
    rows, line = drift_rows(case, tr["time_ns"], arch, run=run, study=study, points=points,
                            every=tr["every"],
                            note=f"trace build {tr['build']}, %globaltimer at the start of every "
                                 f"{tr['every']}th step; output {verdict}")
    res.rows += rows
    res.summary.append(line)


def measure_drift(cases: list[Case], arch: Arch, *, run: str, study: str, reps: int = 0,
                  seed: int, timed: bool = False, progress=None,
                  points: int = DRIFT_POINTS) -> Outcome:
    """The drift study's measure hook (check_and_time's signature; ``reps`` and ``timed`` are
    unused): the trace build of every case, its output through the correctness gate, then its
    ``drift_rows`` (the rows of a committed drift run's ``drift.csv.gz``) and resource rows.

    Why: the wavefront argument assumes CTAs running together advance in lock-step, so one CTA's
    miss is the others' hit; a spread of ``k`` steps puts shared K/V tiles ``k`` tiles apart."""
    import torch

    from cuda_baseline.host.backend import instance_for
    from cuda_baseline.host.backend import precompile as cuda_precompile
    if any(c.variant.backend != Backend.CUDA for c in cases):
        raise ValueError("the drift measurement reads %globaltimer stamps, which only the CUDA "
                         "family's trace build records")
    cuda_precompile([instance_for(c.variant, c.problem, trace=t) for c in cases
                     for t in (False, True)])
    res = Outcome()
    fam = family(Backend.CUDA, arch.name)
    for case in cases:
        try:
            _drift_case(fam, case, arch, res, run=run, study=study, seed=seed, points=points)
        finally:
            torch.cuda.empty_cache()
            if progress is not None:
                progress(1)
    return res


def profile(cases: list[Case], arch: Arch, run_dir: Path, *, run: str, study: str,
            groups: tuple[str, ...], repeats: int, sessions: int,
            seed: int, progress=None, resume: bool = False) -> tuple[list[Row], list[Row], dict]:
    """ncu counters of every case: ``repeats`` profiled launches per case and metric group,
    spread over ``sessions`` ncu sessions per group (``profiles.collect``; each group is meant to
    be one replay pass, and ``profiler__replayer_passes`` proves it per launch).

    Returns (summary rows, every row, ncu settings). Summary rows are one per case and metric,
    as a single-launch run had them: the median over the repeats from the metric's home group
    (``lo``..``hi`` = min..max, ``flags`` = failed repeats, multi-pass groups, failed checks),
    plus the consistency checks, the DRAM fills and the derived miss rows; they go to
    ``counters.csv``. Every row (each launch of each group) goes to ``counters_repeats.csv``.
    ``progress(text)`` is called as each ncu session starts (``profiles.collect``). With
    ``resume``, the sessions whose reports an interrupted run finished are read, not run again."""
    from profiles import collect, counters, metrics, ncu
    tool = ncu.find()
    chosen = metrics.get_groups(tuple(groups))
    plan = run_dir / "profile_plan.json"
    plan.write_text(json.dumps({"arch": arch.name, "seed": seed,
                                "cases": [case_to_dict(c) for c in cases]}, indent=1))
    target = [sys.executable, "-m", "experiments.measurement.target", str(plan)]
    col = collect.profile_cases(tool, target, [c.id for c in cases], run_dir / "ncu",
                                tuple(groups), repeats, sessions=sessions, progress=progress,
                                keep_finished=resume)
    every = collect.to_rows(col, cases, run=run, study=study, arch=arch)
    summary = counters.home_summaries(every, chosen)
    summary += derived_miss_rows(summary, cases, arch, run=run, study=study)
    return summary, every, col.settings


def _same_case(row: Row, case: Case) -> bool:
    return row.variant == case.variant.id(case.problem) and all(
        getattr(row, k) == v for k, v in case_fields(case.problem).items())


def derived_miss_rows(rows: list[Row], cases: list[Case], arch: Arch, *, run: str,
                      study: str) -> list[Row]:
    """Per case: the exact cold-miss count (``source=model``) and measured misses minus it
    (nothing for a case whose misses were not collected)."""
    out = []
    for c in cases:
        if c.variant.bwd is not None:     # the exact count is the forward's; a pass's is its
            continue                      # trace's (spec.backward_trace, simulated rows)
        cold = cold_misses(c.problem, c.variant.tiles, arch.sector_bytes)
        miss = next((r.value for r in rows
                     if r.metric == Metric.L2_TEX_MISSES and _same_case(r, c)), None)
        if miss is None:
            continue
        out.append(case_row(c, c.problem, Metric.COLD_MISSES, cold, run=run, study=study,
                        arch=arch.name, source=Source.MODEL.value, note="exact cold-miss count"))
        out.append(case_row(c, c.problem, Metric.NONCOMPULSORY_MISSES, miss - cold, run=run,
                        study=study, arch=arch.name, note="measured misses - exact cold misses"))
    return out


def device_facts() -> dict:
    """What every measured run records about the device it ran on (goes into the manifest).

    ``uuid`` names the physical GPU: lent machines differ from call to call, and which SMs (and
    so which L2 partition) a launch of a few CTAs lands on is a property of the chip (its
    floor-swept SMs), not of the model (REPORT.md section 7d)."""
    import subprocess

    import torch
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                 "--format=csv,noheader"], capture_output=True, text=True,
                                timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        driver = None
    return {"gpu": props.name, "sms": props.multi_processor_count,
            "l2_bytes": props.L2_cache_size, "driver": driver,
            "uuid": str(getattr(props, "uuid", "")) or None,
            "cuda_runtime": torch.version.cuda, "torch": torch.__version__}

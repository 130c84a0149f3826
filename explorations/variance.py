"""Where does the L2 miss counter's run-to-run spread come from? A GPU-only diagnosis driver.

``python -m explorations.variance --arch h100 --out DIR [--n 5] [--sessions 1] [--cases REGEX]
[--conditions a,b,...]`` (default: the conditions up to ``order_last``; ``placement`` by name)

A miss count is a property of the access order and the cache, so a spread between runs of one
build comes from the kernel's execution (placement, timing), the profiler (replay passes, cache
control) or the session. Each condition changes one of these and measures the miss counter ``n``
times per case (``sessions`` processes x ``n`` launches, each launch profiled on its own):

* ``miss_alone``   the miss counter alone (one replay pass): ncu flushes the caches before the
                   launch (``--cache-control all``), kernel replay, cases in plan order. Baseline.
* ``hopper_set``   (a) the old ``hopper`` metric set (4 passes on an H100): does the spread grow
                   when the counter shares a launch with other passes?
* ``hopper_app``   (b) the same set under ``--replay-mode application --app-replay-match grid``:
                   each pass is a fresh run of the whole (deterministic) target.
* ``flush_own``    (c) ``--cache-control none`` with our own L2 flush (a write of 2x L2 bytes)
                   before each launch: ncu's flush vs ours.
* ``order_last``   (d) the cases launched in reverse order in every round: first vs last.
* ``placement``    (e) the CUDA *trace build* of CUDA cases (default: linear B=1 and B=4, 80x80,
                   132 persistent CTAs), profiled with local tex misses, DRAM read bytes and
                   read-only tex misses (the figure compared: the trace's stamps are stores) in
                   one pass (``profiler__replayer_passes`` recorded, multi-pass flagged). Per launch
                   the trace records where each CTA ran (``%smid``) and when it started, stepped and
                   ended (``%globaltimer``); ``DIR/placement/<case>.npz`` keeps that compactly
                   (``analysis.launch.placement``), and ``DIR/placement.csv`` holds per launch the
                   placement and drift statistics (SMs used, most CTAs on one SM, SMs shared, SM-id
                   pairs, start spread, drift after one work item, span, ...) and per statistic its
                   Spearman correlation with the read-only misses over the launches
                   (``stat = spearman``, ``lo`` = p-value). Only ``flash_fwd`` kernels are profiled.
                   Question: do launches that miss more run with a different placement or drift?

Launches go round-robin over the cases (round l launches every case once), so a drift over the
session shows up as a trend in ``sample`` rather than as a difference between cases. Every
profiled launch is one row per metric (``group`` = the condition, ``sample`` = session x n +
launch, note ``session=s launch=l``), plus the median / min..max summary and the consistency
checks of ``profiles.counters``; ``DIR/counters.csv`` and ``DIR/manifest.json`` are written
atomically (``experiments.rundirs.rundir``), and a table (condition, case, median, min..max,
spread %) is printed last. About 5-6 minutes on an H100; the target is
``experiments.measurement.target``, with the plan keys ``launches``, ``reverse``, ``flush_bytes``,
``trace_dir``.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from analysis.launch import placement as placement_mod
from experiments.registry.lengths import at_length, lengths
from experiments.registry.studies import UnknownStudy, get_study
from profiles import metrics as metric_sets
from profiles import ncu as ncu_mod
from profiles.counters import Observation
from profiles.counters import rows as observation_rows
from profiles.ingest import IngestError
from profiles.metrics import Group
from profiles.report import read_kernels
from spec import UnknownArch, get_arch
from spec.case import case_to_dict
from spec.problem import TileGrid
from spec.records import Metric, Row, Source, case_fields, write_csv

TARGET = [sys.executable, "-m", "experiments.measurement.target"]
STUDY = "sawtooth"
DEFAULT_CASES = (r"^cutile\.(linear|sawtooth)\.static\d+\..* b8h1s\d+d64\.fp16\.full$",
                 r"^cuda\.linear\.static\d+\..* b1h1s\d+d64\.fp16\.full$")
PLACEMENT_CASES = (r"^cuda\.linear\.static\d+\..* b[14]h1s\d+d64\.fp16\.full$",)
TRACE_KERNELS = "regex:flash_fwd"   # ncu --kernel-name: the CUDA kernel, not torch's fills
PLACEMENT_MISSES = Metric.L2_TEX_READ_MISSES   # what the placement statistics are ranked against


@dataclass(frozen=True)
class Condition:
    name: str
    question: str
    metrics: tuple[str, ...]
    cache_control: str = "all"
    replay_mode: str = "kernel"
    flush: bool = False
    reverse: bool = False
    trace: bool = False               # launch the CUDA trace build, keep per launch its placement
    cases: tuple[str, ...] = ()       # default case patterns (else DEFAULT_CASES)

    @property
    def group(self) -> Group:
        """The condition as a metric group of the rows (``Row.group`` names the condition)."""
        return Group(self.name, self.metrics, self.question)


MISS = (Metric.L2_TEX_MISSES,)
CONDITIONS = {c.name: c for c in (
    Condition("miss_alone", "baseline: miss counter alone, one pass, ncu flush, plan order",
              MISS),
    Condition("hopper_set", "(a) the old hopper set, several passes", metric_sets.HOPPER),
    Condition("hopper_app", "(b) hopper set, application replay", metric_sets.HOPPER,
              replay_mode="application"),
    Condition("flush_own", "(c) --cache-control none, our 2x-L2 flush before each launch", MISS,
              cache_control="none", flush=True),
    Condition("order_last", "(d) cases launched in reverse order", MISS, reverse=True),
    Condition("placement", "(e) CUDA trace build: CTA -> SM placement, start order and drift "
              "per launch beside its misses", (Metric.L2_TEX_MISSES, Metric.DRAM_READ_BYTES,
                                               PLACEMENT_MISSES),
              trace=True, cases=PLACEMENT_CASES),
)}
DEFAULT_CONDITIONS = ("miss_alone", "hopper_set", "hopper_app", "flush_own", "order_last")


class UsageError(ValueError):
    pass


def pick_cases(arch, patterns: list[str], study: str = STUDY,
               seq: tuple[int, ...] | None = None) -> list:
    """The cases of ``study`` (default: the sawtooth study) at ``arch``'s preset whose ids match
    any pattern; ``seq`` overrides every case's sequence length (as ``experiments.run --seq``)."""
    try:
        plan = get_study(study).plan(arch)
        plan = plan if seq is None else at_length(plan, seq)
    except (UnknownStudy, ValueError) as e:
        raise UsageError(str(e)) from None
    chosen = [c for c in plan if any(re.search(p, c.id) for p in patterns)]
    if not chosen:
        raise UsageError(f"no case of the {study} study matches {patterns}; ids look like "
                         f"{plan[0].id!r}")
    return chosen


def cases_for(arch, cond: Condition, patterns: list[str] | None, study: str = STUDY,
              seq: tuple[int, ...] | None = None) -> list:
    """The cases ``cond`` measures: those of ``study`` matching ``patterns`` (--cases) or the
    condition's own default; a trace condition takes only CUDA cases (the CUDA trace build
    records %smid)."""
    cases = pick_cases(arch, patterns or list(cond.cases or DEFAULT_CASES), study, seq)
    if cond.trace:
        cases = [c for c in cases if c.variant.backend.value == "cuda"]
        if not cases:
            raise UsageError(f"condition {cond.name} needs CUDA cases (the CUDA trace build "
                             "records the SM of each CTA); pass --cases matching cuda.* ids")
    return cases


def observations_of(kernels, cases, condition: str, session: int, n: int) -> list[Observation]:
    """Per case, its kernels in launch order as repeats ``session * n + launch``; launches the
    report lacks are failed observations."""
    by_case = {c.id: [] for c in cases}
    for k in kernels:
        if k.nvtx_range not in by_case:
            raise IngestError(f"kernel {k.index} ran in NVTX range {k.nvtx_range!r}, not a case")
        by_case[k.nvtx_range].append(k)
    out = []
    for cid, ks in by_case.items():
        for launch in range(n):
            r = session * n + launch
            if launch < len(ks):
                out.append(Observation(cid, condition, r, dict(ks[launch].values),
                                       kernel=f"session={session} launch={launch} "
                                              f"{ks[launch].kernel}"))
            else:
                out.append(Observation(cid, condition, r, {}, error=f"session={session}: "
                                       f"{len(ks)} of {n} launches profiled"))
        if len(ks) > n:
            raise IngestError(f"case {cid}: {len(ks)} kernels for {n} launches")
    return out


def run_condition(tool, cond: Condition, cases, arch, work: Path, *, n: int, sessions: int,
                  seed: int, trace_every: int = 1, log=print) -> list[Observation]:
    plan = work / f"{cond.name}.plan.json"
    traces = work / f"{cond.name}-traces"
    plan.write_text(json.dumps({
        "arch": arch.name, "seed": seed, "launches": n, "reverse": cond.reverse,
        "flush_bytes": 2 * arch.l2_bytes if cond.flush else 0,
        "trace_dir": str(traces) if cond.trace else None, "trace_every": trace_every,
        "cases": [case_to_dict(c) for c in cases]}, indent=1))
    tool = replace(tool, cache_control=cond.cache_control)
    wanted = cond.group.collect
    out = []
    for s in range(sessions):
        report = work / f"{cond.name}-s{s}.ncu-rep"
        log(f"{cond.name} session {s + 1}/{sessions}: {cond.question}")
        if cond.trace:
            traces.mkdir()
        try:
            ncu_mod.profile(tool, TARGET + [str(plan)], report, wanted,
                            nvtx_ranges=[c.id for c in cases], log=report.with_suffix(".log"),
                            replay_mode=cond.replay_mode, timeout=900,
                            extra=("--kernel-name", TRACE_KERNELS) if cond.trace else ())
            kernels, _ = read_kernels(report, wanted, ncu_path=str(tool.path),
                                      export_csv=lambda p: ncu_mod.export_raw_csv(tool, p))
            out += observations_of(kernels, cases, cond.name, s, n)
        except ncu_mod.NcuRunFailed as e:
            out += [Observation(c.id, cond.name, s * n + i, {}, error=str(e))
                    for c in cases for i in range(n)]
        if cond.trace:
            traces.rename(trace_session_dir(work, cond, s))
    return out


def trace_session_dir(work: Path, cond: Condition, session: int) -> Path:
    """Where session ``session``'s target left one compact trace per launch
    (c<case>-l<launch>.npz)."""
    return work / f"{cond.name}-traces-s{session}"


def case_file(case) -> str:
    """The npz name of a case in ``DIR/placement/``: its id with the space as ``_``."""
    return case.id.replace(" ", "_") + ".npz"


def placement_rows(cond: Condition, cases, observations: list[Observation], work: Path, *, n: int,
                   sessions: int, run: str, arch: str) -> tuple[list[Row], list[str]]:
    """Gather the per-launch traces of a trace condition into ``work/placement/<case>.npz`` (the
    launches stacked, with their ``launch`` = repeat index and ``case`` id), and return the rows
    of ``placement.csv`` and the table printed last: per launch the misses and the placement
    statistics (``analysis.launch.placement``), per case the Spearman correlations with
    ``PLACEMENT_MISSES``. A launch without a trace (the target failed) or without counters is
    left out of the correlations and shown as such."""
    import numpy as np
    obs = {(o.case_id, o.repeat): o for o in observations if o.group == cond.name}
    (work / "placement").mkdir(exist_ok=True)
    rows: list[Row] = []
    lines = [f"{cond.name}: misses in G sectors; start spread in us; drift after one work item "
             "in steps; span in ms"]

    def row(case, metric, value, unit, **kw) -> Row:
        return Row(run=run, study="variance", arch=arch, metric=metric, value=value, unit=unit,
                   source=Source.MEASURED.value, group=cond.name,
                   **case_fields(case.problem, case.variant), **kw)

    for ci, case in enumerate(cases):
        n_kv = TileGrid(case.problem, case.variant.tiles).n_kv
        repeats, traces = [], []
        for r in range(n * sessions):
            f = trace_session_dir(work, cond, r // n) / f"c{ci}-l{r % n}.npz"
            if f.is_file():
                with np.load(f) as z:
                    traces += placement_mod.from_arrays(z)
                repeats.append(r)
        lines.append(f"{case.id}")
        lines.append(f"{'launch':>6} {'read miss':>10} {'tex miss':>9} {'DRAM fill':>9} "
                     f"{'SMs':>4} {'max/SM':>6} {'shared':>6} {'start':>7} {'drift':>6} "
                     f"{'span':>7}  flags")
        if not traces:
            lines.append("  no launch left a trace (see the ncu log of this condition)")
            continue
        np.savez(work / "placement" / case_file(case), **placement_mod.to_arrays(traces),
                 launch=np.array(repeats), case=np.array(case.id), n_kv=np.array(n_kv))
        stats = [placement_mod.placement(t, n_kv) for t in traces]
        misses = []
        for r, st in zip(repeats, stats):
            o = obs.get((case.id, r))
            v = {} if o is None or o.error else {m: x for m, (x, _) in o.values.items()}
            misses.append(v.get(PLACEMENT_MISSES, float("nan")))
            flags = ("no counters" if not v else
                     f"multipass={o.passes}" if o.passes and o.passes > 1 else "")
            for name, value in vars(st).items():
                rows.append(row(case, name, float(value), placement_mod.UNITS[name], sample=r,
                                flags=flags, note="analysis.launch.placement of the trace build"))
            g = 1e9
            lines.append(
                f"{r:>6} {v.get(PLACEMENT_MISSES, float('nan')) / g:>10.4f} "
                f"{v.get(Metric.L2_TEX_MISSES, float('nan')) / g:>9.4f} "
                f"{v.get(Metric.DRAM_READ_BYTES, float('nan')) / 32 / g:>9.4f} "
                f"{st.sms_used:>4} {st.max_ctas_per_sm:>6} {st.shared_sms:>6} "
                f"{st.start_spread_ns / 1e3:>7.2f} {st.drift_one_item_steps:>6.1f} "
                f"{st.span_ns / 1e6:>7.2f}  {flags}")
        corr = placement_mod.correlations(misses, stats)
        for c in corr.values():
            rows.append(row(case, c.statistic, c.rho, "rho", stat="spearman", lo=c.p,
                            note=f"Spearman rho vs {PLACEMENT_MISSES} over {c.n} launches; "
                                 "lo = two-sided p-value"))
        shown = [f"{k} {corr[k].rho:+.2f} (p {corr[k].p:.2f})" for k in
                 ("shared_sms", "max_ctas_per_sm", "start_spread_ns", "start_order_rho",
                  "drift_one_item_steps", "max_drift_steps", "span_ns", "median_step_ns")]
        n_ok = next(iter(corr.values())).n
        lines.append(f"  Spearman rho vs read misses over {n_ok} launches: " + ", ".join(shown[:4]))
        lines.append("    " + ", ".join(shown[4:]))
    for s in range(sessions):
        shutil.rmtree(trace_session_dir(work, cond, s), ignore_errors=True)
    return rows, lines


def table(rows) -> list[str]:
    """The summary lines: condition, case, median, min..max, spread, passes, flags."""
    lines = [f"{'condition':<12} {'case':<58} {'median':>12} {'min..max':>25} {'spread':>7} "
             f"{'n':>3}  flags"]
    for r in rows:
        if r.stat != "median" or r.metric != Metric.L2_TEX_MISSES:
            continue
        spread = (r.hi - r.lo) / r.value * 100 if r.value else float("nan")
        case = f"{r.variant} b{r.B}h{r.H}s{r.S_q}"
        lines.append(f"{r.group:<12} {case:<58} {r.value:12.4g} {r.lo:12.4g}..{r.hi:<12.4g} "
                     f"{spread:6.1f}% {r.note.split(',')[0].removeprefix('n='):>3}  {r.flags}")
    return lines


def parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m explorations.variance",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="h100")
    ap.add_argument("--out", type=Path, required=True, help="new run directory (never reused)")
    ap.add_argument("--n", type=int, default=5, help="profiled launches per case and session")
    ap.add_argument("--sessions", type=int, default=1, help="ncu sessions per condition")
    ap.add_argument("--cases", action="append", help="regex on case ids (repeatable); default: "
                    "the cuTile Static linear/sawtooth B=8 non-causal twins and CUDA linear B=1")
    ap.add_argument("--conditions", default=",".join(DEFAULT_CONDITIONS),
                    help=f"comma-separated subset of {', '.join(CONDITIONS)} (default: all but "
                         "placement)")
    ap.add_argument("--trace-every", type=int, default=1,
                    help="the placement condition's trace build stamps every k-th step (default "
                         "1: every step; the stamps perturb the timing, see "
                         "experiments.measurement.measure.DRIFT_EVERY)")
    ap.add_argument("--study", default=STUDY,
                    help=f"the study whose plan --cases picks from (default: {STUDY}; e.g. "
                         "active-sms for the few-CTA launches)")
    ap.add_argument("--seq", type=lengths, help="override every case's sequence length (several: "
                                                 "comma-separated)")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from experiments.measurement.measure import device_facts
    from experiments.rundirs.rundir import (
        BadRunDir,
        RunDirExists,
        command_line,
        reserved_run_dir,
        write_manifest,
    )
    a = parse(argv)
    try:
        if a.n < 1 or a.sessions < 1 or a.trace_every < 1:
            raise UsageError("--n, --sessions and --trace-every must be >= 1")
        unknown = [c for c in a.conditions.split(",") if c not in CONDITIONS]
        if unknown:
            raise UsageError(f"unknown condition(s) {', '.join(unknown)}; known: "
                             f"{', '.join(CONDITIONS)}")
        conditions = [CONDITIONS[c] for c in a.conditions.split(",")]
        arch = get_arch(a.arch)
        cases_of = {c.name: cases_for(arch, c, a.cases, a.study, a.seq)
                    for c in conditions}
        cases = list({c.id: c for cs in cases_of.values() for c in cs}.values())
        try:
            import torch
            gpu = torch.cuda.is_available()
        except ImportError:
            gpu = False
        if not gpu:
            raise UsageError("no CUDA GPU (or no torch) here: run this diagnosis on the GPU "
                             "machine")
        tool = ncu_mod.find()
        with reserved_run_dir(a.out) as (final, work):
            observations = []
            for cond in conditions:
                observations += run_condition(tool, cond, cases_of[cond.name], arch, work,
                                              n=a.n, sessions=a.sessions, seed=a.seed,
                                              trace_every=a.trace_every)
            rows = observation_rows(observations, cases, tuple(c.group for c in conditions),
                                    repeats=a.n * a.sessions, run=final.name, study="variance",
                                    arch=arch.name, sector_bytes=arch.sector_bytes)
            write_csv(work / "counters.csv", rows)
            placed, last = [], []
            for cond in (c for c in conditions if c.trace):
                r, lines = placement_rows(cond, cases_of[cond.name], observations, work, n=a.n,
                                          sessions=a.sessions, run=final.name, arch=arch.name)
                placed += r
                last += lines
            if placed:
                write_csv(work / "placement.csv", placed)
            write_manifest(work, command=command_line("explorations.variance", argv),
                           mode="measure", study="variance", arch=arch, device=device_facts(),
                           ncu=tool.settings(), n=a.n, sessions=a.sessions, seed=a.seed,
                           conditions={c.name: {"question": c.question,
                                                "metrics": list(c.metrics),
                                                "cache_control": c.cache_control,
                                                "replay_mode": c.replay_mode,
                                                "flush_bytes": 2 * arch.l2_bytes if c.flush
                                                else 0, "reverse": c.reverse,
                                                "trace": c.trace,
                                                "trace_every": a.trace_every,
                                                "cases": [x.id for x in cases_of[c.name]]}
                                       for c in conditions},
                           cases=[case_to_dict(c) for c in cases])
    except (UsageError, UnknownArch, ncu_mod.NcuError, IngestError, RunDirExists,
            BadRunDir) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {final}/counters.csv ({len(rows)} rows)"
          + (f", placement.csv ({len(placed)} rows) and placement/*.npz" if placed else ""))
    print("\n".join(table(rows) + last))
    return 0


if __name__ == "__main__":
    sys.exit(main())

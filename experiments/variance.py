"""Where does the L2 miss counter's run-to-run spread come from? A GPU-only diagnosis driver.

``python -m experiments.variance --arch h100 --out DIR [--n 5] [--sessions 1] [--cases REGEX]
[--conditions a,b,...]``

The committed H100 data measured the *same* build of the cuTile Static linear case (B=8, H=1,
S=256K, D=64, non-causal) at 20.7 / 21.7 / 12.7 G local tex miss sectors in three runs. A miss
count is a property of the access order and the cache, so a 1.7x spread must come from the
kernel's execution (CTA placement and timing decide which K/V tiles meet in L2), from the
profiler (several replay passes of a kernel that does not replay identically, cache control), or
from the session (what ran before). Each condition below changes one of these and measures the
miss counter ``n`` times per case (``sessions`` processes x ``n`` launches each, every launch
profiled on its own):

* ``miss_alone``   the miss counter alone (one replay pass): ncu flushes the caches before the
                   launch (``--cache-control all``), kernel replay, cases in plan order. Baseline.
* ``hopper_set``   (a) the old ``hopper`` metric set (4 passes on an H100): does the spread grow
                   when the counter shares a launch with other passes?
* ``hopper_app``   (b) the same set under ``--replay-mode application --app-replay-match grid``:
                   each pass is a fresh run of the whole (deterministic) target.
* ``flush_own``    (c) ``--cache-control none`` with our own L2 flush (a write of 2x L2 bytes)
                   before each launch: ncu's flush vs ours.
* ``order_last``   (d) the cases launched in reverse order in every round: first vs last.

Launches go round-robin over the cases (round l launches every case once), so a drift over the
session shows up as a trend in ``sample`` rather than as a difference between cases. Every
profiled launch is one row per metric (``group`` = the condition, ``sample`` = session x n +
launch, note ``session=s launch=l``), plus the median / min..max summary and the consistency
checks of ``profiles.counters``; ``DIR/counters.csv`` and ``DIR/manifest.json`` are written
atomically (``experiments.rundir``), and a table (condition, case, median, min..max, spread %)
is printed last.

Cost on an H100, defaults (3 cases, n=5, 1 session, 5 conditions): 5 target processes (start-up
and kernel builds, ~20-40 s each, twice more for the application-replay condition, whose target
runs once per pass) and 75 profiled launches (~1 s each in one pass, a few s with 4 passes):
about 5-6 minutes. ``--n``, ``--cases`` and ``--conditions`` trim it.

The profiling target is this module's own (``TARGET``): ``experiments.target`` launches each case
once, while this needs ``n`` launches, a reversed order and an optional flush before each launch.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from profiles import metrics as metric_sets
from profiles import ncu as ncu_mod
from profiles.counters import Observation, rows as observation_rows
from profiles.ingest import IngestError
from profiles.metrics import Group
from profiles.report import read_kernels
from spec import UnknownArch, get_arch
from spec.case import case_from_dict, case_to_dict
from spec.records import Metric, write_csv

TARGET = [sys.executable, "-m", "experiments.variance", "--target"]
STUDY = "sawtooth"
DEFAULT_CASES = (r"^cutile\.(linear|sawtooth)\.static\d+\..* b8h1s\d+d64\.fp16\.full$",
                 r"^cuda\.linear\.static\d+\..* b1h1s\d+d64\.fp16\.full$")


@dataclass(frozen=True)
class Condition:
    name: str
    question: str
    metrics: tuple[str, ...]
    cache_control: str = "all"
    replay_mode: str = "kernel"
    flush: bool = False
    reverse: bool = False

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
)}


class UsageError(ValueError):
    pass


def pick_cases(arch, patterns: list[str]) -> list:
    """The sawtooth study's cases at ``arch``'s preset whose ids match any pattern."""
    from .studies import get_study
    plan = get_study(STUDY).plan(arch)
    chosen = [c for c in plan if any(re.search(p, c.id) for p in patterns)]
    if not chosen:
        raise UsageError(f"no case of the {STUDY} study matches {patterns}; ids look like "
                         f"{plan[0].id!r}")
    return chosen


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
                  seed: int, log=print) -> list[Observation]:
    plan = work / f"{cond.name}.plan.json"
    plan.write_text(json.dumps({
        "arch": arch.name, "seed": seed, "launches": n, "reverse": cond.reverse,
        "flush_bytes": 2 * arch.l2_bytes if cond.flush else 0,
        "cases": [case_to_dict(c) for c in cases]}, indent=1))
    tool = replace(tool, cache_control=cond.cache_control)
    wanted = cond.group.collect
    out = []
    for s in range(sessions):
        report = work / f"{cond.name}-s{s}.ncu-rep"
        log(f"{cond.name} session {s + 1}/{sessions}: {cond.question}")
        try:
            ncu_mod.profile(tool, TARGET + [str(plan)], report, wanted,
                            nvtx_ranges=[c.id for c in cases], log=report.with_suffix(".log"),
                            replay_mode=cond.replay_mode, timeout=900)
            kernels, _ = read_kernels(report, wanted, ncu_path=str(tool.path),
                                      export_csv=lambda p: ncu_mod.export_raw_csv(tool, p))
            out += observations_of(kernels, cases, cond.name, s, n)
        except ncu_mod.NcuRunFailed as e:
            out += [Observation(c.id, cond.name, s * n + i, {}, error=str(e))
                    for c in cases for i in range(n)]
    return out


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


def target(plan_path: str) -> int:
    """The profiling target: build every case, warm it up outside any NVTX range, then ``launches``
    rounds over the cases (reversed if asked), each launch inside its case's range, after an
    optional flush (a write of ``flush_bytes``) outside the range."""
    import torch
    from .correctness import poisoned_like, random_inputs
    from .families import family
    plan = json.loads(Path(plan_path).read_text())
    cases = [case_from_dict(d) for d in plan["cases"]]
    fams, launches, inputs = {}, [], {}
    for case in cases:
        fam = fams.get(case.variant.backend) or fams.setdefault(
            case.variant.backend, family(case.variant.backend, plan["arch"]))
        if case.problem not in inputs:
            q, k, v = random_inputs(case.problem, plan["seed"])
            inputs[case.problem] = (q, k, v, poisoned_like(q))
        prepared = fam.prepare(case.variant, case.problem)
        fam.run(prepared, *inputs[case.problem])
        launches.append((case, fam, prepared))
    flush = (torch.empty(plan["flush_bytes"] // 4, dtype=torch.int32, device="cuda")
             if plan["flush_bytes"] else None)
    order = launches[::-1] if plan["reverse"] else launches
    torch.cuda.synchronize()
    for launch in range(plan["launches"]):
        for case, fam, prepared in order:
            if flush is not None:
                flush.fill_(launch + 1)
                torch.cuda.synchronize()
            torch.cuda.nvtx.range_push(case.id)
            fam.run(prepared, *inputs[case.problem])
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
    return 0


def parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m experiments.variance",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="h100")
    ap.add_argument("--out", type=Path, required=True, help="new run directory (never reused)")
    ap.add_argument("--n", type=int, default=5, help="profiled launches per case and session")
    ap.add_argument("--sessions", type=int, default=1, help="ncu sessions per condition")
    ap.add_argument("--cases", action="append", help="regex on case ids (repeatable); default: "
                    "the cuTile Static linear/sawtooth B=8 non-causal twins and CUDA linear B=1")
    ap.add_argument("--conditions", default=",".join(CONDITIONS),
                    help=f"comma-separated subset of {', '.join(CONDITIONS)}")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--target"]:
        return target(argv[1])
    from .measure import device_facts
    from .rundir import (BadRunDir, RunDirExists, command_line, reserved_run_dir,
                         write_manifest)
    a = parse(argv)
    try:
        if a.n < 1 or a.sessions < 1:
            raise UsageError("--n and --sessions must be >= 1")
        unknown = [c for c in a.conditions.split(",") if c not in CONDITIONS]
        if unknown:
            raise UsageError(f"unknown condition(s) {', '.join(unknown)}; known: "
                             f"{', '.join(CONDITIONS)}")
        conditions = [CONDITIONS[c] for c in a.conditions.split(",")]
        arch = get_arch(a.arch)
        cases = pick_cases(arch, a.cases or list(DEFAULT_CASES))
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
                observations += run_condition(tool, cond, cases, arch, work, n=a.n,
                                              sessions=a.sessions, seed=a.seed)
            rows = observation_rows(observations, cases, tuple(c.group for c in conditions),
                                    repeats=a.n * a.sessions, run=final.name, study="variance",
                                    arch=arch.name, sector_bytes=arch.sector_bytes)
            write_csv(work / "counters.csv", rows)
            write_manifest(work, command=command_line("experiments.variance", argv),
                           mode="measure", study="variance", arch=arch, device=device_facts(),
                           ncu=tool.settings(), n=a.n, sessions=a.sessions, seed=a.seed,
                           conditions={c.name: {"question": c.question,
                                                "metrics": list(c.metrics),
                                                "cache_control": c.cache_control,
                                                "replay_mode": c.replay_mode,
                                                "flush_bytes": 2 * arch.l2_bytes if c.flush
                                                else 0, "reverse": c.reverse}
                                       for c in conditions},
                           cases=[case_to_dict(c) for c in cases])
    except (UsageError, UnknownArch, ncu_mod.NcuError, IngestError, RunDirExists,
            BadRunDir) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {final}/counters.csv ({len(rows)} rows)")
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

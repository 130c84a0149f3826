"""Repeated, pass-aware ncu collection: one ncu session per (repeat, metric group).

Why one session per group, not one ``--metrics`` list or a custom section: ncu splits whatever
metric list it is given into replay passes by counter domain, and sections do not change that
(a section is only a named metric list). The one way to *intend* a set of metrics for a single
pass is to ask for nothing else in that profiling session, so each group of ``profiles.metrics``
gets its own session, and ``profiler__replayer_passes`` is collected in every session to prove it
(a group that still needed more passes is flagged, never silently merged).

Repeats are launches, and sessions are processes: ``repeats`` launches of every case per group are
split over ``sessions`` ncu sessions (each a fresh process and a fresh allocation of the inputs),
launched round-robin inside a session (round l launches every case once). Both kinds of spread
exist, so the orchestrator's default is one session per repeat: the H100 diagnosis
(docs/history.md, section 0) found the large cuTile cases' misses spread as much between
launches of one session as anywhere (the timing of the CTAs' progress), while on the H200 some
CUDA cases were tight inside each session and 8% apart between two sessions on the same GPU
(docs/history.md, section 0: S=122880, 12.02 vs 12.96 M misses; our untested hypothesis: a
fresh allocation puts K/V at other physical addresses, which the L2 hashes onto other slices and
partitions). Fewer sessions than repeats is cheaper and measures the
launch-to-launch spread only. Sessions run group by group inside a session index, so slow
drift of the GPU (clocks, temperature) spreads over all groups.

Cost: ``sessions x groups`` target processes (Python start-up, the build of every case), plus ncu's
replay of each profiled launch (about a second per pass on an H100).

Failures: a setup problem (:class:`profiles.ncu.NcuError`: no permission, unknown metric) stops the
collection with its one-line fix; a failed session (:class:`profiles.ncu.NcuRunFailed`: the target
crashed, a timeout) or a case without its kernel in a session's report is recorded and becomes
rows flagged ``failed`` (``profiles.counters``). If no session succeeds at all, that is an error.

API for the orchestrator::

    col = profile_cases(tool, [python, "-m", "experiments.measurement.target", plan],
                        [c.id for c in cases], run_dir / "ncu",
                        groups=metrics.DEFAULT_GROUPS, repeats=3)
    rows = to_rows(col, cases, run=run, study=study, arch=arch)   # arch: spec.Arch
    manifest["ncu"] = col.settings
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import metrics as metric_groups
from . import ncu as ncu_mod
from .counters import Observation
from .counters import rows as observation_rows
from .ingest import IngestError, KernelResult
from .metrics import Group
from .report import read_kernels


@dataclass(frozen=True)
class Session:
    """One ncu session: one metric group; every case launched ``launches`` times, round-robin;
    its kernels are repeats ``first_repeat .. first_repeat + launches - 1``."""
    group: str
    first_repeat: int
    launches: int
    report: str
    kernels: tuple[KernelResult, ...] = ()
    error: str = ""
    reader: str = ""


@dataclass(frozen=True)
class Collected:
    case_ids: tuple[str, ...]
    groups: tuple[Group, ...]
    repeats: int
    sessions: tuple[Session, ...]
    settings: dict = field(default_factory=dict)

    def observations(self) -> list[Observation]:
        """One observation per (session, case): the case's kernel, or why there is none."""
        out = []
        for s in self.sessions:
            if s.error:
                out += [Observation(c, s.group, s.first_repeat + i, {}, error=s.error)
                        for c in self.case_ids for i in range(s.launches)]
                continue
            by_case: dict[str, list[KernelResult]] = {c: [] for c in self.case_ids}
            for k in s.kernels:
                if k.nvtx_range not in by_case:
                    raise IngestError(f"{s.report}: kernel {k.index} ({k.kernel[:60]}) ran in "
                                      f"NVTX range {k.nvtx_range!r}, which is not a case of "
                                      "this plan")
                by_case[k.nvtx_range].append(k)
            for c, ks in by_case.items():
                if len(ks) == s.launches:     # kernels of a range come round by round
                    out += [Observation(c, s.group, s.first_repeat + i, dict(k.values),
                                        kernel=k.kernel) for i, k in enumerate(ks)]
                else:
                    why = (f"{len(ks)} kernels in its NVTX range, {s.launches} launched (each "
                           "launch of a case must run exactly one kernel)")
                    out += [Observation(c, s.group, s.first_repeat + i, {}, error=why)
                            for i in range(s.launches)]
        return out


KEPT = "kept from the interrupted run"
"""How ``progress`` names a session whose report an interrupted run finished."""


def report_path(out_dir: Path, group: str, session: int) -> Path:
    return out_dir / f"{group}-s{session}.ncu-rep"


def partial_report_path(out_dir: Path, group: str, session: int) -> Path:
    """Where ncu writes a session's report until the session has finished."""
    return out_dir / f"{group}-s{session}.partial.ncu-rep"


def unavailable_metrics(kernels, metrics: tuple[str, ...]) -> list[str]:
    """Metrics ncu reported as n/a for every kernel: ncu does not fail on a metric the GPU lacks,
    it prints ``(!) n/a`` (seen with ncu 2025.3 on an H100), which reads as NaN."""
    import math
    return [m for m in metrics if kernels and all(math.isnan(k.values[m][0]) for k in kernels)]


def profile_cases(tool: ncu_mod.Ncu, target_cmd: list[str], case_ids: list[str],
                  out_dir: Path, groups: tuple[str, ...] = metric_groups.DEFAULT_GROUPS,
                  repeats: int = 3, *, sessions: int = 1, replay_mode: str = "kernel",
                  extra: tuple[str, ...] = (), env: dict | None = None, timeout: int = 3600,
                  progress: Callable[[str], None] | None = None,
                  keep_finished: bool = False) -> Collected:
    """Profile every case ``repeats`` times per metric group, in ``sessions`` ncu sessions per
    group (the launches split as evenly as they go; the last argument of ``target_cmd`` is the
    plan JSON, and each session gets a copy with its ``launches``, see :func:`launches_cmd`).
    Reports and logs go to ``out_dir``, which must not hold reports of these names already
    (nothing is overwritten), unless ``keep_finished``: then a report already there is a session
    an interrupted run finished, read back instead of profiled again.

    Each session's report is written as ``<group>-s<i>.partial.ncu-rep`` and renamed to its
    final name once ncu has finished it, so a final name always holds a whole session: a run
    stopped in the middle of a session loses that session only."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if not 1 <= sessions <= repeats:
        raise ValueError(f"sessions must be 1..repeats ({repeats}), got {sessions}")
    if not case_ids or len(set(case_ids)) != len(case_ids):
        raise ValueError("case ids must be distinct and at least one")
    chosen = metric_groups.get_groups(tuple(groups))
    out_dir = Path(out_dir)
    split = [repeats // sessions + (i < repeats % sessions) for i in range(sessions)]
    taken = [str(report_path(out_dir, g.name, i)) for i in range(sessions) for g in chosen
             if report_path(out_dir, g.name, i).exists()]
    if taken and not keep_finished:
        raise ncu_mod.NcuError(f"{taken[0]} exists; reports are never overwritten: choose a "
                               "new output folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    done: list[Session] = []
    for i, launches in enumerate(split):
        first = sum(split[:i])
        for g in chosen:
            report = report_path(out_dir, g.name, i)
            kept = keep_finished and report.exists()
            if progress is not None:
                progress(f"ncu {g.name} session {i + 1}/{sessions} ({launches} launches per case"
                         + (f", {KEPT})" if kept else ")"))
            try:
                if not kept:
                    partial = partial_report_path(out_dir, g.name, i)
                    partial.unlink(missing_ok=True)          # what a stopped session left
                    cmd = launches_cmd(target_cmd, launches, out_dir / f"plan-s{i}.json")
                    ncu_mod.profile(tool, cmd, partial, g.collect, nvtx_ranges=list(case_ids),
                                    log=report.with_suffix(".log"), env=env, timeout=timeout,
                                    replay_mode=replay_mode, extra=extra)
                    os.replace(partial, report)              # the session is whole
                kernels, reader = read_kernels(
                    report, g.collect, ncu_path=str(tool.path),
                    export_csv=lambda p: ncu_mod.export_raw_csv(tool, p))
            except ncu_mod.NcuRunFailed as e:
                done.append(Session(g.name, first, launches, str(report), error=str(e)))
                continue
            missing = unavailable_metrics(kernels, g.collect)
            if missing:
                raise ncu_mod.NcuError(
                    f"ncu reports n/a for {', '.join(missing)} on this GPU (metric group "
                    f"{g.name!r}): the GPU or this ncu lacks it; choose other groups with "
                    "--groups, or see `ncu --query-metrics`")
            done.append(Session(g.name, first, launches, str(report), tuple(kernels),
                                reader=reader))
    if all(s.error for s in done):
        raise ncu_mod.NcuRunFailed(f"every ncu session failed; the first: {done[0].error} "
                                   f"(logs in {out_dir})")
    readers = sorted({s.reader for s in done if s.reader})
    settings = tool.settings() | {
        "replay_mode": replay_mode, "extra_args": list(extra), "repeats": repeats,
        "sessions": sessions, "launches_per_session": split,
        "groups": {g.name: list(g.collect) for g in chosen}, "reader": ",".join(readers),
        "sessions_failed": sum(1 for s in done if s.error)}
    return Collected(tuple(case_ids), chosen, repeats, tuple(done), settings)


def launches_cmd(target_cmd: list[str], launches: int, plan_out: Path) -> list[str]:
    """``target_cmd`` with its plan (the last argument, a JSON file) copied to ``plan_out`` with
    ``launches`` set: the target launches every case that many times, round-robin."""
    import json
    plan = json.loads(Path(target_cmd[-1]).read_text())
    plan_out.write_text(json.dumps(plan | {"launches": launches}, indent=1))
    return [*target_cmd[:-1], str(plan_out)]


def to_rows(collected: Collected, cases: list, *, run: str, study: str, arch,
            tolerance: float = 0.02) -> list:
    """Rows of a collection (measured per repeat, summaries, derived and check rows;
    ``profiles.counters``); ``arch`` is a :class:`spec.Arch` (its name and sector size)."""
    wanted = set(collected.case_ids)
    return observation_rows(collected.observations(), [c for c in cases if c.id in wanted],
                            collected.groups, repeats=collected.repeats, run=run, study=study,
                            arch=arch.name, sector_bytes=arch.sector_bytes, tolerance=tolerance)

"""Repeated, pass-aware ncu collection: one ncu session per (repeat, metric group).

Why one session per group, not one ``--metrics`` list or a custom section: ncu splits whatever
metric list it is given into replay passes by counter domain, and sections do not change that
(a section is only a named metric list). The one way to *intend* a set of metrics for a single
pass is to ask for nothing else in that profiling session, so each group of ``profiles.metrics``
gets its own session, and ``profiler__replayer_passes`` is collected in every session to prove it
(a group that still needed more passes is flagged, never silently merged).

Why one session per repeat: a repeat is a fresh process, a fresh allocation of the inputs and a
fresh CTA placement, i.e. the variation a re-run of the study would see; repeating launches inside
one process would hide the allocation and placement effects. Sessions run repeat by repeat and
group by group inside a repeat (r0: tex, fabric, ...; r1: tex, ...), so slow drift of the GPU
(clocks, temperature) spreads over all groups instead of biasing one.

Cost: ``repeats x groups`` sessions, each launching the profiling target (Python start-up, the
build of every case, then one profiled launch per case); ncu's replay of one launch adds about a
second per pass.

Failures: a setup problem (:class:`profiles.ncu.NcuError`: no permission, unknown metric) stops the
collection with its one-line fix; a failed session (:class:`profiles.ncu.NcuRunFailed`: the target
crashed, a timeout) or a case without its kernel in a session's report is recorded and becomes
rows flagged ``failed`` (``profiles.counters``). If no session succeeds at all, that is an error.

API for the orchestrator::

    col = profile_cases(tool, [python, "-m", "experiments.target", plan], [c.id for c in cases],
                        run_dir / "ncu", groups=metrics.DEFAULT_GROUPS, repeats=3)
    rows = to_rows(col, cases, run=run, study=study, arch=arch)   # arch: spec.Arch
    manifest["ncu"] = col.settings
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import metrics as metric_groups
from . import ncu as ncu_mod
from .counters import Observation, rows as observation_rows
from .ingest import IngestError, KernelResult
from .metrics import Group
from .report import read_kernels


@dataclass(frozen=True)
class Session:
    """One ncu session: one metric group, one repeat, every case launched once."""
    group: str
    repeat: int
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
                out += [Observation(c, s.group, s.repeat, {}, error=s.error)
                        for c in self.case_ids]
                continue
            by_case: dict[str, list[KernelResult]] = {c: [] for c in self.case_ids}
            for k in s.kernels:
                if k.nvtx_range not in by_case:
                    raise IngestError(f"{s.report}: kernel {k.index} ({k.kernel[:60]}) ran in "
                                      f"NVTX range {k.nvtx_range!r}, which is not a case of "
                                      "this plan")
                by_case[k.nvtx_range].append(k)
            for c, ks in by_case.items():
                if len(ks) == 1:
                    out.append(Observation(c, s.group, s.repeat, dict(ks[0].values),
                                           kernel=ks[0].kernel))
                else:
                    why = ("no kernel profiled in its NVTX range" if not ks else
                           f"{len(ks)} kernels in its NVTX range (each case must launch one)")
                    out.append(Observation(c, s.group, s.repeat, {}, error=why))
        return out


def report_path(out_dir: Path, group: str, repeat: int) -> Path:
    return out_dir / f"{group}-r{repeat}.ncu-rep"


def profile_cases(tool: ncu_mod.Ncu, target_cmd: list[str], case_ids: list[str],
                  out_dir: Path, groups: tuple[str, ...] = metric_groups.DEFAULT_GROUPS,
                  repeats: int = 3, *, replay_mode: str = "kernel",
                  extra: tuple[str, ...] = (), env: dict | None = None, timeout: int = 3600,
                  progress: Callable[[str], None] | None = None) -> Collected:
    """Run ``repeats x len(groups)`` ncu sessions of ``target_cmd`` (which launches each case
    once inside an NVTX range named by its id); reports and logs go to ``out_dir``, which must
    not hold reports of these names already (nothing is overwritten)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if not case_ids or len(set(case_ids)) != len(case_ids):
        raise ValueError("case ids must be distinct and at least one")
    chosen = metric_groups.get_groups(tuple(groups))
    out_dir = Path(out_dir)
    taken = [str(report_path(out_dir, g.name, r)) for r in range(repeats) for g in chosen
             if report_path(out_dir, g.name, r).exists()]
    if taken:
        raise ncu_mod.NcuError(f"{taken[0]} exists; reports are never overwritten: choose a "
                               "new output folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    sessions = []
    for r in range(repeats):
        for g in chosen:
            report = report_path(out_dir, g.name, r)
            if progress is not None:
                progress(f"ncu {g.name} repeat {r + 1}/{repeats}")
            try:
                ncu_mod.profile(tool, target_cmd, report, g.collect, nvtx_ranges=list(case_ids),
                                log=report.with_suffix(".log"), env=env, timeout=timeout,
                                replay_mode=replay_mode, extra=extra)
                kernels, reader = read_kernels(
                    report, g.collect, ncu_path=str(tool.path),
                    export_csv=lambda p: ncu_mod.export_raw_csv(tool, p))
                sessions.append(Session(g.name, r, str(report), tuple(kernels), reader=reader))
            except ncu_mod.NcuRunFailed as e:
                sessions.append(Session(g.name, r, str(report), error=str(e)))
    if all(s.error for s in sessions):
        raise ncu_mod.NcuRunFailed(f"every ncu session failed; the first: {sessions[0].error} "
                                   f"(logs in {out_dir})")
    readers = sorted({s.reader for s in sessions if s.reader})
    settings = tool.settings() | {
        "replay_mode": replay_mode, "extra_args": list(extra), "repeats": repeats,
        "groups": {g.name: list(g.collect) for g in chosen}, "reader": ",".join(readers),
        "sessions_failed": sum(1 for s in sessions if s.error)}
    return Collected(tuple(case_ids), chosen, repeats, tuple(sessions), settings)


def to_rows(collected: Collected, cases: list, *, run: str, study: str, arch,
            tolerance: float = 0.02) -> list:
    """Rows of a collection (measured per repeat, summaries, derived and check rows;
    ``profiles.counters``); ``arch`` is a :class:`spec.Arch` (its name and sector size)."""
    wanted = set(collected.case_ids)
    return observation_rows(collected.observations(), [c for c in cases if c.id in wanted],
                            collected.groups, repeats=collected.repeats, run=run, study=study,
                            arch=arch.name, sector_bytes=arch.sector_bytes, tolerance=tolerance)

"""The measured cases a calibration fits and validates against: every case of a study in the run
directories under a root (``load_measured``), with the median and spread of its launches, only
launches whose counters came from one ncu replay pass (``one_pass``), read through the data door."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from analysis.data import DatasetError, csv_rows, read_manifest, registry, stored
from spec.arch import Arch
from spec.case import Case
from spec.orders import ScanOrder
from spec.problem import Problem, Tiles
from spec.records import Metric, case_key
from spec.schedules import CtaSchedule
from spec.variant import Backend, Variant

MISSES = Metric.L2_TEX_MISSES


@dataclass(frozen=True)
class MeasuredCase:
    """One measured case of one study: its L2 tex misses in every run that measured it."""

    study: str
    case: Case
    runs: tuple[str, ...]
    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return float(np.median(self.values))

    @property
    def lo(self) -> float:
        return float(min(self.values))

    @property
    def hi(self) -> float:
        return float(max(self.values))

    @property
    def spread(self) -> float:
        """Run-to-run range over the median (0 for a single run)."""
        return (self.hi - self.lo) / self.median if self.median else float("nan")

    @property
    def key(self) -> str:
        return self.case.id


def case_of_row(r: dict, arch: Arch, panel: str = "measured",
                ctas_per_sm: int | None = None) -> Case:
    """The case a measured row stands for, from its variant and problem columns.

    Resident CTAs, the number of K/V scans that share the L2 at once, are what the compiled kernel
    really gets: the persistent schedule's P, otherwise SM count × ``ctas_per_sm``, the driver's
    occupancy of the build the run measured (``measured_ctas_per_sm``). The occupancy *hint* of
    the variant is only a request (the longseq CUDA 128x64 D=64 builds get 2 CTAs per SM where
    the family default is 1), so it is used only for runs that did not record the build's
    occupancy at its launch size, and then the family's default stands in for a missing hint."""
    level = Variant.parse(r["variant"])[0].level
    variant = Variant(Backend(r["backend"]), ScanOrder.parse(r["order"]),
                      CtaSchedule.parse(r["schedule"]), Tiles(r["tile_m"], r["tile_n"]),
                      r["occupancy"], level)
    problem = Problem(B=r["B"], H=r["H"], S_q=r["S_q"], D=r["D"], S_kv=r["S_kv"], H_kv=r["H_kv"],
                      dtype=r["dtype"], causal=r["causal"])
    if variant.id(problem) != r["variant"]:
        raise ValueError(f"row variant {r['variant']!r} does not match its columns "
                         f"({variant.id(problem)}); the run's rows are inconsistent")
    if variant.schedule.is_persistent:
        resident = variant.schedule.num_ctas
    else:
        default = (arch.cutile_occupancy if variant.backend == Backend.CUTILE
                   else arch.cuda_occupancy)
        resident = arch.resident_ctas(ctas_per_sm or variant.occupancy or default)
    return Case(problem, variant, resident, panel)


def measured_ctas_per_sm(d: Path) -> dict[tuple, int]:
    """The driver's CTAs per SM of every build run directory ``d`` measured (its ``timing.csv``
    resource rows, ``cuOccupancyMaxActiveBlocksPerMultiprocessor`` of the loaded kernel at its
    launch CTA size), by case key; empty for runs that recorded none.

    A cuTile build's value counts only where the run also recorded its ``threads``: runs without
    it asked the driver at the build's register-limited maximum CTA size (512 threads for
    the sawtooth study's 128-register ``occ2`` builds, answer 1), not the 256 they launch with
    (ncu: 2 CTAs per SM, ``profiles/h100/occupancy-20261125``); their cases fall back to the
    occupancy hint (``case_of_row``). CUDA builds always recorded their launch size."""
    path = stored(d, "timing.csv")
    if path is None:
        return {}
    rows = [r for r in csv_rows(path) if r["source"] == "measured"]
    sized = {case_key(r) for r in rows if r["metric"] == "threads"}
    return {case_key(r): int(r["value"]) for r in rows if r["metric"] == Metric.CTAS_PER_SM
            and (r["backend"] != Backend.CUTILE.value or case_key(r) in sized)}


def run_device(d: Path) -> str | None:
    """The UUID of the GPU run directory ``d`` was measured on: its manifest's
    ``parameters.device.uuid`` (a study run) or ``device.uuid`` (``experiments.instruments.smmap``,
    ``explorations.variance``); None for runs that did not record it."""
    try:
        m = read_manifest(d)
    except DatasetError:
        return None
    device = m.get("device") or (m.get("parameters") or {}).get("device") or {}
    return device.get("uuid")


def study_dirs(root: Path, study: str, device: str | None = None) -> list[Path]:
    """The run directories of ``study`` in ``root`` (``<study>[-profile]-YYYYMMDD[x][-rN]``) that
    hold counters, through the data door (``analysis.data.registry.children``)."""
    pat = re.compile(rf"^{re.escape(study)}(-profile)?-\d{{8}}[a-z]?(-r\d+)?$")
    return sorted(d for d in registry.children(root) if pat.match(d.name)
                  and stored(d, "counters.csv") is not None
                  and (device is None or (run_device(d) or "").startswith(device)))


def load_measured(root: Path, arch: Arch, study: str, metric: str = MISSES,
                  device: str | None = None) -> list[MeasuredCase]:
    """Every measured case of ``study`` under ``root`` (e.g. ``profiles/h100``) with its
    ``metric`` (default the tex misses) in each run directory (``<study>-YYYYMMDD[-rN]``; a
    ``longseq-profile-...`` directory counts for longseq); with ``device``, only the runs
    measured on the GPU whose UUID starts with it. Why per GPU: lent H100s differ in where a
    launch's first CTAs sit relative to the two L2 partitions (their floor-swept SMs), so a
    few-CTA case can miss 1.5x more on one chip than on another (REPORT.md section 7d); pooled,
    the runs of several chips give a case's spread across chips. A build's occupancy recorded
    by any of the study's runs stands for all of them: the older runs (2026-11-21) did not
    record it, and their builds are taken to be those of the newer runs of the same variant."""
    per: dict[str, tuple[Case, list[str], list[float]]] = {}
    dirs = study_dirs(Path(root), study, device)
    per_sm = {k: v for d in dirs for k, v in measured_ctas_per_sm(d).items()}   # any run's build
    for d in dirs:
        for run, r in _metric_rows(d, metric):
            c = case_of_row(r, arch, ctas_per_sm=per_sm.get(case_key(r)))
            _, runs, vals = per.setdefault(c.id, (c, [], []))
            runs.append(run)
            vals.append(r["value"])
    return [MeasuredCase(study, c, tuple(runs), tuple(vals)) for c, runs, vals in per.values()]


def _metric_rows(d: Path, metric: str) -> list[tuple[str, dict]]:
    """(run, row) of ``metric`` in run directory ``d``: every launch of ``counters_repeats.csv``
    as a run of its own (``<dir>#<i>``; the file's ``stat=median`` rows are summaries, not
    launches), so that a case's median and spread are those of its launches.

    Only launches whose metric group recorded ``profiler__replayer_passes`` = 1 for that case
    count (``one_pass``). A count collected over several replay passes comes from a different
    execution than its neighbours and was biased: the 4-pass ``hopper`` set of the 2026-11-21
    runs read CUDA B=1 linear at S=256K as 90.3 M misses where five one-pass launches read 79.7 M
    each, and cuTile Static sawtooth 3.2 G where one pass reads 5.9 G (REPORT.md section 0). Runs
    without a repeats file (before the one-pass groups of 2026-11-23) recorded no passes and
    give none."""
    repeats = stored(d, "counters_repeats.csv")
    launches = [r for r in csv_rows(repeats) if not r.get("stat")] if repeats else []
    single = one_pass(launches)
    seen: dict[tuple, int] = {}
    out = []
    for r in launches:
        if (r["metric"] == metric and r["source"] == "measured"
                and (case_key(r), r.get("group")) in single):
            i = seen[case_key(r)] = seen.get(case_key(r), 0) + 1
            out.append((f"{d.name}#{i}", r))
    return out


def one_pass(rows: Sequence[dict]) -> set[tuple]:
    """The (case, metric group) pairs of ``rows`` whose every recorded
    ``profiler__replayer_passes`` is 1: counters collected from one execution of the kernel.
    A run without the record (the metric sets before the one-pass groups of 2026-11-23) has
    none."""
    passes: dict[tuple, set] = {}
    for r in rows:
        if r["metric"] == Metric.REPLAY_PASSES and r.get("group"):
            passes.setdefault((case_key(r), r["group"]), set()).add(float(r["value"]))
    return {k for k, v in passes.items() if v == {1.0}}

"""Repeated ncu counters → tidy rows: repeat statistics, consistency checks, what a miss is.

Input: one :class:`Observation` per (case, metric group, repeat), i.e. the values one ncu session
collected for one kernel, or the reason it failed. Output (``rows``):

* one row per observation and metric (``sample`` = repeat, ``group`` = the metric group, so the
  pass the value came from is known); a failed repeat gives rows with value NaN and flag
  ``failed`` and its reason in the note, so it is never dropped from the statistics unseen;
* one summary row per (case, group, metric): ``stat = "median"``, ``lo``..``hi`` = min..max over
  the repeats that succeeded, note ``n=k of R``;
* derived and check rows (below), flagged where a check fails.

What a miss is on Hopper. The L2 is two partitions. An SM looks a sector up in its *local*
partition (counted under ``srcunit_tex``); a miss there for a line whose home is the *other*
partition is forwarded over the L2 fabric and looked up again at home (``srcunit_ltcfabric``),
where it may hit. So ``lts__t_sectors_srcunit_tex_lookup_miss`` counts *local tex misses*, and
the sectors actually filled from DRAM are fewer. Worked example (notes §6, one cuDNN SDPA kernel
on an H100): 3.15 M local tex misses but 67.1 MB of DRAM reads = 2.10 M sectors. Two figures are
therefore reported per case:

* ``dram_fill_sectors`` = ``dram__bytes_read.sum`` / 32 B (measured fills);
* ``dram_fill_estimate_sectors`` = local tex misses − fabric lookup hits. Every fabric lookup is a
  local tex miss of a remote-home line, so local-home misses = tex misses − fabric sectors, and
  fills = local-home misses + fabric misses = tex misses − fabric hits. This is an inference
  from the counter definitions (notes §1 [I]), NOT a confirmed identity: on the committed H100
  report (tests/fixtures/ncu_small_h100.*, B=1 S=32K CUDA, whose DRAM reads equal the
  compulsory Q+K+V bytes) the estimate is 0.70x the measured fills. The check below tests it on
  every case and flags it where it fails; the measured fills are the figure to compare.

Consistency checks (ratios that should be 1; ``tolerance`` default 2%):

* ``check_tex_lookups`` = (tex hits + misses) / tex sectors, per repeat, all three from one ncu
  session of group ``tex``; likewise ``check_fabric_lookups`` for group ``fabric``. On an H100
  both sessions take 4 passes (rows flagged ``multipass=4``), so a failure there measures how
  much the replays of one kernel differ; where the group fits one pass, a failure means the
  lookups do not cover the sectors within one execution.
* ``check_dram_per_tex_miss`` = DRAM fills / local tex misses of one pass (group ``dram``).
  Below 1 is expected on a partitioned L2 (fabric hits), so only a ratio *above* 1 + tolerance is
  flagged: DRAM reads no tex miss explains (another engine, or fetches wider than a sector).
* ``check_dram_per_estimate`` = DRAM fills / fill estimate, from the medians of three groups
  (different passes; the note says so), with the min..max interval the group ranges allow.

A failed check flags the check row and every row of that case's group (``inconsistent=<check>``);
:func:`flagged` lists the flagged summary rows for a summary table. A metric group that ncu still
split into several passes flags its rows ``multipass=N``.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from spec.records import UNITS, Metric, Row, Source, case_fields

from .metrics import Group, home_group

DERIVED_GROUP = "derived"


@dataclass(frozen=True)
class Observation:
    """What one ncu session measured for one case (values empty and ``error`` set on failure)."""
    case_id: str
    group: str
    repeat: int
    values: dict[str, tuple[float, str]]    # metric -> (value, unit)
    kernel: str = ""
    error: str = ""

    @property
    def passes(self) -> int | None:
        v = self.values.get(Metric.REPLAY_PASSES)
        return None if v is None or math.isnan(v[0]) else int(v[0])


@dataclass(frozen=True)
class Summary:
    median: float
    lo: float
    hi: float
    n: int                  # repeats with a value

    @property
    def spread(self) -> float:
        """(max - min) / median, the repeat spread the issue's 5% bar is stated in."""
        return (self.hi - self.lo) / abs(self.median) if self.median else math.nan


def summarize(values: list[float]) -> Summary:
    """Median and min..max of the values that are numbers (NaN = a failed repeat, skipped)."""
    ok = [v for v in values if not math.isnan(v)]
    if not ok:
        return Summary(math.nan, math.nan, math.nan, 0)
    return Summary(statistics.median(ok), min(ok), max(ok), len(ok))


@dataclass(frozen=True)
class Check:
    metric: str
    parts: tuple[str, ...]    # summed into the numerator
    whole: str                # denominator
    upper_only: bool = False  # flag only ratios above 1 + tolerance

    def ratio(self, values: dict[str, float]) -> float | None:
        """None when an input is missing or the denominator is zero (nothing to compare)."""
        if self.whole not in values or any(p not in values for p in self.parts):
            return None
        whole = values[self.whole]
        if not whole or math.isnan(whole):
            return None
        return sum(values[p] for p in self.parts) / whole

    def fails(self, ratio: float, tolerance: float) -> bool:
        if math.isnan(ratio):
            return False
        return ratio > 1 + tolerance if self.upper_only else abs(ratio - 1) > tolerance


SAME_PASS_CHECKS = (
    Check(Metric.CHECK_TEX_LOOKUPS, (Metric.L2_TEX_HITS, Metric.L2_TEX_MISSES),
          Metric.L2_TEX_SECTORS),
    Check(Metric.CHECK_FABRIC_LOOKUPS, (Metric.L2_FABRIC_HITS, Metric.L2_FABRIC_MISSES),
          Metric.L2_FABRIC_SECTORS),
    Check(Metric.CHECK_DRAM_PER_TEX_MISS, (Metric.DRAM_FILL_SECTORS,), Metric.L2_TEX_MISSES,
          upper_only=True),
)
ESTIMATE_CHECK = Check(Metric.CHECK_DRAM_PER_ESTIMATE, (Metric.DRAM_FILL_SECTORS,),
                       Metric.DRAM_FILL_ESTIMATE_SECTORS)


def derive(values: dict[str, float], sector_bytes: int) -> dict[str, float]:
    """Quantities one observation implies: DRAM fills in sectors and the same-pass check ratios
    whose inputs it holds."""
    out = {}
    if Metric.DRAM_READ_BYTES in values:
        out[Metric.DRAM_FILL_SECTORS] = values[Metric.DRAM_READ_BYTES] / sector_bytes
    both = values | out
    for check in SAME_PASS_CHECKS:
        r = check.ratio(both)
        if r is not None:
            out[check.metric] = r
    return out


def _join(flags) -> str:
    return ";".join(dict.fromkeys(f for f in flags if f))


def rows(observations: list[Observation], cases: list, groups: tuple[Group, ...], *,
         repeats: int, run: str, study: str, arch: str, sector_bytes: int,
         tolerance: float = 0.02) -> list[Row]:
    """Tidy rows of repeated observations (see the module docstring); ``cases`` are
    :class:`spec.case.Case` objects, one per case id observed."""
    by_id = {c.id: c for c in cases}
    by_group = {g.name: g for g in groups}
    unknown = sorted({o.case_id for o in observations} - set(by_id))
    if unknown:
        raise ValueError(f"observations of case(s) not in the case list: {', '.join(unknown)}")
    unknown = sorted({o.group for o in observations} - set(by_group))
    if unknown:
        raise ValueError(f"observations of unknown metric group(s): {', '.join(unknown)}")

    def row(case, metric, value, unit, **kw) -> Row:
        return Row(run=run, study=study, arch=arch, metric=metric, value=value,
                   unit=UNITS.get(metric, unit), source=Source.MEASURED.value,
                   **case_fields(case.problem, case.variant), **kw)

    cells: dict[tuple[str, str], dict[int, Observation]] = {}
    for o in observations:
        cells.setdefault((o.case_id, o.group), {})[o.repeat] = o
    out: list[Row] = []
    medians: dict[tuple[str, str], dict[str, Summary]] = {}
    for (case_id, group), reps in cells.items():
        case = by_id[case_id]
        values = {r: _values(o, sector_bytes) for r, o in reps.items()}
        metrics = list(dict.fromkeys([*by_group[group].collect,
                                      *(m for v in values.values() for m in v)]))
        units = {m: u for o in reps.values() for m, (_, u) in o.values.items()}
        flags = {r: _flags(o, values[r], tolerance) for r, o in reps.items()}
        for r in sorted(reps):
            note = f"failed: {reps[r].error}" if reps[r].error else f"kernel={reps[r].kernel[:60]}"
            for m in metrics:
                out.append(row(case, m, values[r].get(m, math.nan), units.get(m, ""), sample=r,
                               group=group, flags=_join(flags[r]), note=note))
        failed = repeats - sum(1 for o in reps.values() if not o.error)
        passes = [o.passes for o in reps.values() if o.passes]
        summary_flags = [f"failed={failed}" if failed else "",
                         f"multipass={max(passes)}" if passes and max(passes) > 1 else "",
                         *(f for r in sorted(reps) for f in flags[r]
                           if f.startswith("inconsistent="))]
        medians[(case_id, group)] = {}
        for m in metrics:
            s = summarize([values[r].get(m, math.nan) for r in sorted(reps)])
            medians[(case_id, group)][m] = s
            note = f"n={s.n} of {repeats}" + (f", spread {100 * s.spread:.1f}%" if s.n else "")
            out.append(row(case, m, s.median, units.get(m, ""), group=group, stat="median",
                           lo=s.lo, hi=s.hi, flags=_join(summary_flags), note=note))
    for case_id in dict.fromkeys(o.case_id for o in observations):
        home = {m: medians.get((case_id, g), {}).get(m) for m, g in (
            (Metric.L2_TEX_MISSES, home_group(Metric.L2_TEX_MISSES, groups)),
            (Metric.L2_FABRIC_HITS, home_group(Metric.L2_FABRIC_HITS, groups)),
            (Metric.DRAM_FILL_SECTORS, home_group(Metric.DRAM_READ_BYTES, groups)))}
        out += _estimate_rows(by_id[case_id], home, row, tolerance)
    return out


def _values(o: Observation, sector_bytes: int) -> dict[str, float]:
    if o.error:
        return {}
    values = {m: v for m, (v, _) in o.values.items()}
    return values | derive(values, sector_bytes)


def _flags(o: Observation, values: dict[str, float], tolerance: float) -> list[str]:
    if o.error:
        return ["failed"]
    flags = [f"multipass={o.passes}"] if o.passes and o.passes > 1 else []
    return flags + [f"inconsistent={c.metric}" for c in SAME_PASS_CHECKS
                    if c.metric in values and c.fails(values[c.metric], tolerance)]


def _estimate_rows(case, home: dict[str, Summary | None], row, tolerance: float) -> list[Row]:
    """DRAM fill estimate (tex misses - fabric hits) and its check, from the medians of the
    metrics' home groups."""
    tex, fab = home[Metric.L2_TEX_MISSES], home[Metric.L2_FABRIC_HITS]
    dram = home[Metric.DRAM_FILL_SECTORS]
    if tex is None or fab is None or not tex.n or not fab.n:
        return []
    est = Summary(tex.median - fab.median, tex.lo - fab.hi, tex.hi - fab.lo, min(tex.n, fab.n))
    note = "cross-pass: median tex misses minus median fabric hits (lo..hi: extremes)"
    out = [row(case, Metric.DRAM_FILL_ESTIMATE_SECTORS, est.median, "", group=DERIVED_GROUP,
               stat="median", lo=est.lo, hi=est.hi, note=note)]
    if dram is None or not dram.n or est.median <= 0:
        return out
    ratio = dram.median / est.median
    lo = dram.lo / est.hi if est.hi > 0 else math.nan
    hi = dram.hi / est.lo if est.lo > 0 else math.nan
    flags = f"inconsistent={ESTIMATE_CHECK.metric}" if ESTIMATE_CHECK.fails(ratio, tolerance) \
        else ""
    out.append(row(case, ESTIMATE_CHECK.metric, ratio, "", group=DERIVED_GROUP, stat="median",
                   lo=lo, hi=hi, flags=flags,
                   note="cross-pass: median DRAM fills / fill estimate"))
    return out


def flagged(rows_: list[Row]) -> list[Row]:
    """The summary rows that carry a flag (failed repeats, multi-pass groups, failed checks):
    what a summary table must show beside the medians."""
    return [r for r in rows_ if r.stat == "median" and r.flags]


def failing_checks(rows_: list[Row]) -> list[Row]:
    """Summary check rows whose check failed, one per (case, check)."""
    return [r for r in flagged(rows_) if r.metric.startswith("check_")
            and f"inconsistent={r.metric}" in r.flags.split(";")]


def home_summaries(rows_: list[Row], groups: tuple[Group, ...]) -> list[Row]:
    """One row per (case, metric), as the single-run files had: the median row of each metric in
    its home group, the derived (cross-group) rows, and the summaries of checks and derived
    quantities of each group. This is what comparisons read; per-repeat rows stay for spreads."""
    def wanted(r: Row) -> bool:
        if r.stat != "median":
            return False
        home = home_group(r.metric, groups)
        if home is not None:
            return r.group == home
        if r.metric == Metric.REPLAY_PASSES:
            return False
        return r.group == DERIVED_GROUP or r.metric.startswith("check_") \
            or r.metric == Metric.DRAM_FILL_SECTORS
    return [r for r in rows_ if wanted(r)]

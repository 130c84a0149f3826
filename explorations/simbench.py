"""Benchmark of the timed L2 simulator (``analysis.cache.timesim``): speed, memory, SHARDS error,
and the GB10 predictions made with the default (unfitted) parameters.

    python -m explorations.simbench --out DIR [--sections ABCDEFGH]
                                   [--exact-archs b200,b300]

Sections (one CSV row per case and mode, plus ``manifest.json``):

A. ``sawtooth --arch gb10``, exact, timing model on: seconds per variant (the issue's bar: the
   cuTile variants <= 10 s each, the whole study <= 60 s, peak memory < 3 GiB).
B. the same cases with SHARDS sampling at the size rule (``analysis.cache.timesim.shards_rate``) and
   the error of its miss count against A; C. the same for H100 cases (the CUDA batch cases and
   cuTile Static causal).
D. ``sawtooth --arch b200`` and ``--arch b300`` sampled at the size rule (bar: <= 5 min each);
   every row states its rate and the largest error measured in B and C.
F. SHARDS rate sweep (``RATES``) on the GB10 cuTile causal cases, where B's error is largest:
   does the error shrink like sampling noise (random sign, ~1/sqrt(R)) or is it a bias of the
   timed model (one sign: unsampled accesses cost the mean sampled load time, so sampling moves
   the clocks that decide which CTAs share a tile)? And what does each rate cost? Each case
   also runs without jitter at the lowest rate, exact and sampled: the clocks are then the same
   (equal makespans), so the error left is the spatial sample's own.
E. GB10 predictions of the sawtooth study: the exact run of A at the default parameters, and
   the range over the uncertainty corners (``analysis.calibration.params.default_params``) and
   jitter seeds 0..2 (exact), written to ``gb10_predictions.csv``; every GB10 case with the resident
   CTAs of its sm_121 build (``experiments.simulation.simulate.resident_of_build``), and where that
   is not the study's request, the count at the request beside it.
G. The exact model's own seed spread on the GB10 cuTile cases (jitter seeds 1..3 against seed 0,
   ``err_pct``): the floor of any approximation that draws the jitter differently from the exact
   run (SHARDS' skip-ahead, a shorter run extrapolated), since it compares one realisation of the
   drift with another.
H. ``sawtooth`` for ``--exact-archs`` (default b200, b300), exact, timing model on: seconds per
   case and per study (the bar of D, without sampling).

Every case runs in this one process, one after another (no worker processes): the seconds are
single-core. The first simulation of a process may include numba's compilation when its cache
is cold; ``_warm`` compiles both partition layouts on a tiny case before anything is timed.
The machine's 2 cores may be shared with other work while this runs (the run's README says):
the seconds are upper bounds of what the code needs.
"""
from __future__ import annotations

import argparse
import resource
import signal
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from analysis import calibration as cal
from analysis.cache.timesim import SHARDS_TARGET, TimeParams, counts_to_rows, shards_rate, simulate
from experiments.registry.plans import sawtooth_plan
from experiments.rundirs import rundir
from experiments.simulation.simulate import resident_of_build
from spec import CtaSchedule, Problem, ScanOrder, TileGrid, Tiles, get_arch
from spec.records import write_csv, write_dicts
from spec.trace import work_table


@dataclass(frozen=True)
class BenchRow:
    section: str
    arch: str
    case: str
    mode: str              # exact | sampled
    sample_rate: float
    seconds: float           # wall clock (the CPU was shared: an upper bound)
    cpu_seconds: float       # this process's CPU time for the case (what the work costs)
    accesses: int
    tex_misses: int
    exact_misses: float | None
    err_pct: float | None
    params: str
    note: str = ""


RATES = (0.1, 0.2, 0.4, 0.7)
"""Section F's SHARDS rates."""


def _run(case, arch, tp: TimeParams):
    table = work_table(TileGrid(case.problem, case.variant.tiles), case.variant.schedule,
                       case.variant.order, arch.sector_bytes)
    t0, c0 = time.perf_counter(), time.process_time()
    c = simulate(table, case.resident, tp, arch.sector_bytes)
    _run.cpu = time.process_time() - c0
    return c, time.perf_counter() - t0, table


def _warm() -> None:
    """Compile the event loop for one and two partitions (and sampling) outside the timings."""
    tab = work_table(TileGrid(Problem(1, 1, 512, 64), Tiles(64, 64)), CtaSchedule.persistent(2),
                     ScanOrder.linear())
    for tp in (TimeParams(1 << 20, jitter=0.01, rate_jitter=0.001),
               TimeParams(1 << 20, partitions=2, jitter=0.01, stores_miss=False),
               TimeParams(1 << 20, partitions=2, sample_rate=0.5, jitter=0.01)):
        simulate(tab, 2, tp)


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m explorations.simbench")
    ap.add_argument("--out", type=Path, required=True,
                    help="new run directory (commit it under profiles/cpu/ and register it with "
                         "python -m analysis.data register)")
    ap.add_argument("--sections", default="ABCDEFGH")
    ap.add_argument("--exact-archs", default="b200,b300",
                    help="the arches of section H (comma-separated)")
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # a kill removes the partial run
    out = a.out
    try:
        rundir.check_free(out)
    except FileExistsError as e:
        print(f"error: {e}; pass another --out", file=sys.stderr)
        return 2
    rows: list[BenchRow] = []
    tidy = []
    gb10 = get_arch("gb10")
    gb10_p, corners = cal.default_params(gb10)
    exact_gb10 = {}
    # the GB10 cases with the resident CTAs of their sm_121 builds, as the main command
    # simulates them, and the study's requests beside them
    study_plan = sawtooth_plan(gb10)
    requested = {c.id: c.resident for c in study_plan}
    built = {c.id: resident_of_build(c, gb10) for c in study_plan}
    gb10_plan = [c for c, _ in built.values()]
    with rundir.reserved_run_dir(out) as (final, work):
        _warm()
        t_all = time.perf_counter()
        if "A" in a.sections or "E" in a.sections:
            tp = gb10_p.time_params(gb10)
            t_a, c_a = time.perf_counter(), time.process_time()
            for case in gb10_plan:
                c, s, table = _run(case, gb10, tp)
                exact_gb10[case.id] = c
                rows.append(BenchRow("A", "gb10", case.id, "exact", 1.0, s, _run.cpu,
                                     table.n_accesses, c.tex_misses, None, None, tp.note()))
                tidy += counts_to_rows(c, case, run=final.name, study="sawtooth", arch=gb10,
                                       note=gb10_p.note() + "; defaults, not fitted")
                print(f"A {case.id}: {s:.1f}s {table.n_accesses / 1e6:.0f}M accesses", flush=True)
            rows.append(BenchRow("A", "gb10", "TOTAL sawtooth study", "exact", 1.0,
                                 time.perf_counter() - t_a, time.process_time() - c_a,
                                 sum(r.accesses for r in rows), 0,
                                 None, None, tp.note(), f"peak RSS {_peak_mib():.0f} MiB"))
        errs = []
        if "B" in a.sections:
            tp = gb10_p.time_params(gb10)
            for case in gb10_plan:
                table = work_table(TileGrid(case.problem, case.variant.tiles),
                                   case.variant.schedule, case.variant.order)
                R = shards_rate(table, tp.partitions)
                if R >= 1.0:
                    continue
                c, s, _ = _run(case, gb10, replace(tp, sample_rate=R))
                cpu = _run.cpu
                ex = exact_gb10.get(case.id) or _run(case, gb10, tp)[0]
                e = 100 * (c.tex_misses / ex.tex_misses - 1)
                errs.append(abs(e))
                rows.append(BenchRow("B", "gb10", case.id, "sampled", R, s, cpu, table.n_accesses,
                                     c.tex_misses, ex.tex_misses, e, replace(tp, sample_rate=R)
                                     .note()))
                print(f"B {case.id}: R={R:.3f} {s:.1f}s err {e:+.2f}%", flush=True)
        if "C" in a.sections:
            h100 = get_arch("h100")
            hp = cal.read_params("h100").time_params(h100)
            for case in sawtooth_plan(h100):
                v = case.variant
                if not (v.backend.value == "cuda" and case.problem.B <= 2
                        or v.schedule.is_persistent and case.problem.causal):
                    continue
                table = work_table(TileGrid(case.problem, v.tiles), v.schedule, v.order)
                R = shards_rate(table, hp.partitions)
                ex, s_ex, _ = _run(case, h100, hp)
                cpu_ex = _run.cpu
                c, s, _ = _run(case, h100, replace(hp, sample_rate=R))
                e = 100 * (c.tex_misses / ex.tex_misses - 1)
                errs.append(abs(e))
                rows.append(BenchRow("C", "h100", case.id, "exact", 1.0, s_ex, cpu_ex,
                                     table.n_accesses, ex.tex_misses, None, None, hp.note()))
                rows.append(BenchRow("C", "h100", case.id, "sampled", R, s, _run.cpu,
                                     table.n_accesses, c.tex_misses, ex.tex_misses, e,
                                     replace(hp, sample_rate=R).note()))
                print(f"C {case.id}: exact {s_ex:.1f}s, R={R:.3f} {s:.1f}s err {e:+.2f}%",
                      flush=True)
        if "F" in a.sections:
            tp = gb10_p.time_params(gb10)
            for case in gb10_plan:
                if not (case.variant.backend.value == "cutile" and case.problem.causal):
                    continue
                ex = exact_gb10.get(case.id) or _run(case, gb10, tp)[0]
                for R in RATES:
                    c, s, table = _run(case, gb10, replace(tp, sample_rate=R))
                    e = 100 * (c.tex_misses / ex.tex_misses - 1)
                    rows.append(BenchRow("F", "gb10", case.id, "sampled", R, s, _run.cpu,
                                         table.n_accesses, c.tex_misses, ex.tex_misses, e,
                                         replace(tp, sample_rate=R).note()))
                    print(f"F {case.id}: R={R} {s:.1f}s err {e:+.2f}%", flush=True)
                # without jitter both runs' clocks are the same (their makespans are equal):
                # what error is left comes from the spatial sample alone
                calm = replace(tp, jitter=0.0, rate_jitter=0.0)
                ex0, _, _ = _run(case, gb10, calm)
                c, s, table = _run(case, gb10, replace(calm, sample_rate=RATES[0]))
                e = 100 * (c.tex_misses / ex0.tex_misses - 1)
                rows.append(BenchRow("F", "gb10", case.id, "sampled", RATES[0], s, _run.cpu,
                                     table.n_accesses, c.tex_misses, ex0.tex_misses, e,
                                     replace(calm, sample_rate=RATES[0]).note(),
                                     f"no jitter: makespan sampled {c.makespan:.1f}, exact "
                                     f"{ex0.makespan:.1f}"))
                print(f"F {case.id}: no jitter R={RATES[0]} err {e:+.2f}%", flush=True)
        max_err = max(errs) if errs else float("nan")
        if "D" in a.sections:
            for name in ("b200", "b300"):
                arch = get_arch(name)
                bp, _ = cal.default_params(arch)
                tp = bp.time_params(arch)
                t_d, c_d = time.perf_counter(), time.process_time()
                for case in sawtooth_plan(arch):
                    v = case.variant
                    table = work_table(TileGrid(case.problem, v.tiles), v.schedule, v.order)
                    R = shards_rate(table, tp.partitions)
                    c, s, _ = _run(case, arch, replace(tp, sample_rate=R))
                    rows.append(BenchRow("D", name, case.id, "sampled", R, s, _run.cpu,
                                         table.n_accesses, c.tex_misses, None, None,
                                         replace(tp, sample_rate=R).note(),
                                         f"SHARDS error <= {max_err:.2f}% on the "
                                         f"GB10/H100 cases of B, C"))
                    print(f"D {name} {case.id}: R={R:.4f} {s:.1f}s", flush=True)
                rows.append(BenchRow("D", name, "TOTAL sawtooth study", "sampled", 0.0,
                                     time.perf_counter() - t_d, time.process_time() - c_d, 0, 0,
                                     None, None, bp.note()))
        if "G" in a.sections:
            tp = gb10_p.time_params(gb10)
            for case in gb10_plan:
                if case.variant.backend.value != "cutile":
                    continue
                ex = exact_gb10.get(case.id) or _run(case, gb10, tp)[0]
                for seed in (1, 2, 3):
                    c, s, table = _run(case, gb10, replace(tp, seed=seed))
                    e = 100 * (c.tex_misses / ex.tex_misses - 1)
                    rows.append(BenchRow("G", "gb10", case.id, "exact", 1.0, s, _run.cpu,
                                         table.n_accesses, c.tex_misses, ex.tex_misses, e,
                                         replace(tp, seed=seed).note(), "seed k against seed 0"))
                    print(f"G {case.id}: seed {seed} {e:+.2f}%", flush=True)
        if "H" in a.sections:
            for name in a.exact_archs.split(","):
                arch = get_arch(name)
                bp, _ = cal.default_params(arch)
                tp = bp.time_params(arch)
                t_h, c_h = time.perf_counter(), time.process_time()
                n_acc = 0
                for case in sawtooth_plan(arch):
                    c, s, table = _run(case, arch, tp)
                    n_acc += table.n_accesses
                    rows.append(BenchRow("H", name, case.id, "exact", 1.0, s, _run.cpu,
                                         table.n_accesses, c.tex_misses, None, None, tp.note(),
                                         f"{1e9 * _run.cpu / table.n_steps:.0f} ns per step"))
                    print(f"H {name} {case.id}: {s:.1f}s", flush=True)
                rows.append(BenchRow("H", name, "TOTAL sawtooth study", "exact", 1.0,
                                     time.perf_counter() - t_h, time.process_time() - c_h, n_acc,
                                     0, None, None, tp.note(), f"peak RSS {_peak_mib():.0f} MiB"))
        if "E" in a.sections:
            pred = []
            for case in gb10_plan:
                table = work_table(TileGrid(case.problem, case.variant.tiles),
                                   case.variant.schedule, case.variant.order)
                vals = []
                for f, r in corners:
                    for seed in range(3):
                        # exact: the timed model's SHARDS error reaches tens of % on some cases
                        tp = replace(gb10_p.time_params(gb10, seed=seed),
                                     capacity_bytes=int(f * gb10.l2_bytes), miss_ratio=r)
                        vals.append(simulate(table, case.resident, tp).tex_misses)
                ex = exact_gb10[case.id]
                # where the build's residency is not the study's request, the request's count too
                alt = (simulate(table, requested[case.id], gb10_p.time_params(gb10)).tex_misses
                       if requested[case.id] != case.resident else "")
                pred.append(dict(case=case.id, panel=case.panel, resident=case.resident,
                                 predicted=ex.tex_misses,
                                 lo=min(vals + [ex.tex_misses]), hi=max(vals + [ex.tex_misses]),
                                 cold=ex.cold_misses, tex_sectors=ex.tex_sectors,
                                 requested_resident=requested[case.id],
                                 predicted_at_requested=alt, source="simulated",
                                 note=f"{gb10_p.note()}; {ex.params.note()}; range over "
                                      f"{len(corners)} (f, r) corners {corners} x seeds 0..2, "
                                      f"exact; {built[case.id][1] or 'persistent: P CTAs'}"))
                print(f"E {case.id}: {ex.tex_misses / 1e6:.1f}M "
                      f"[{pred[-1]['lo'] / 1e6:.1f}, {pred[-1]['hi'] / 1e6:.1f}]", flush=True)
            write_dicts(work / "gb10_predictions.csv", pred)
            write_csv(work / "gb10_counters.csv", tidy)
        write_dicts(work / "simbench.csv", [asdict(r) for r in rows])
        rundir.write_manifest(
            work, command=rundir.command_line("explorations.simbench", list(argv or sys.argv[1:])),
            source="simulated", wall_seconds=time.perf_counter() - t_all,
            peak_rss_mib=_peak_mib(), max_shards_err_pct=max_err,
            gb10_params=gb10_p, shards_target_subkeys=SHARDS_TARGET,
            cpu_note="2-core machine, possibly shared with other jobs while this ran "
                     "(the run's README says): seconds are upper bounds")
    print(f"{'sec':>3} {'arch':>5} {'mode':>7} {'R':>7} {'wall s':>8} {'cpu s':>8} "
          f"{'err %':>7}  case")
    for r in rows:
        err = "" if r.err_pct is None else f"{r.err_pct:+.2f}"
        print(f"{r.section:>3} {r.arch:>5} {r.mode:>7} {r.sample_rate:7.4f} {r.seconds:8.1f} "
              f"{r.cpu_seconds:8.1f} "
              f"{err:>7}  {r.case} {r.note}")
    print(f"written: {final}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The GB10 sawtooth study under the pipeline model, at points of its assumptions fixed beforehand.

It reports and never chooses. The pipeline model (``analysis.models.steptime``) times each
CTA's steps by its build: compute per step, the L2-hit and DRAM latencies, and how many steps
ahead the build issues its K/V loads. On GB10 two of those inputs are not measured and enter as
stated ranges: the step's speed against the H100's (``speed``: SM clock ratio .. tensor-rate
ratio) and the DRAM fill latency (``latency``: 349 ns .. 1 us). The points are fixed in the code
(``POINTS``: each range's ends and their geometric mean, nine in all); what each of the paper's
builds does per step is read off its cubin (``experiments.registry.plans.build_costs``: the
authors' sources compiled with cuda-tile 1.0.1 for sm_121): the causal linear builds hold three
K/V pairs in shared memory (loads two steps ahead by the shared-memory rule) and spill 50 / 43
accesses per step, at the cost measured on the H100; the causal sawtooth and the non-causal
builds hold one pair (every fill exposed).

At each point it simulates the eight cuTile cases of the main study and prints each case's
simulated count and kernel time beside the published count and time (the paper's FLOPs over its
TFLOPS; ``analysis.data.published``). It scores nothing: no count of cases within a bound, no
ranking, no best point. A model change is justified by H100/H200 measurements only; the
published counts judge a frozen model version once, and a scan that scores points against them
selects the model against its own judge (docs/model-card.md). The CUDA cases do not depend on
these assumptions (their builds' own depth and a step two orders longer than any fill) and are
simulated once, at the middle point.

    python -m explorations.gb10_pipeline --out DIR        # ~5 min on 2 cores
    python -m explorations.gb10_pipeline --speed mid --latency mid --out DIR   # one point

writes ``grid.csv`` (one row per point and case: simulated and published counts and times),
``times.csv`` (per point: the cuTile simulated over published times, lowest and highest) and
``pairs.csv`` (per point and cuTile pair: the simulated sawtooth speedup split into its compiler
and memory parts, beside the published one) and prints them.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from experiments.rundirs.rundir import BadRunDir, RunDirExists, check_new
from spec.records import write_dicts

POINTS = ("lo", "mid", "hi")


def grid(speeds=POINTS, latencies=POINTS) -> list[dict]:
    """The scanned points: speed x latency (each build's prefetch depth is its own)."""
    return [dict(speed=s, latency=l, prefetch=None)
            for s, l in itertools.product(speeds, latencies)]


def _case_misses(case, arch, tp0, pt):
    from analysis.cache import timesim
    from analysis.models import steptime
    from experiments.registry.plans import build_costs
    pt = {k: v for k, v in pt.items() if k != "cuda"}
    timing = steptime.step_timing(case, arch, spills=build_costs(case, arch), **pt)
    tp = replace(tp0, capacity_bytes=max(0, tp0.capacity_bytes - timing.stack_l2_bytes),
                 **timing.units())
    counts = timesim.simulate_case(case, tp, arch.sector_bytes, auto_sample=True)
    return counts.tex_misses, counts.makespan * timing.step_s, timing.step_s


def run(jobs: int = 2, speeds=POINTS, latencies=POINTS) -> tuple[list[dict], list[dict],
                                                                   list[dict]]:
    from analysis.data.published import key_of_row, read_published
    from experiments.registry.plans import sawtooth_plan
    from experiments.simulation.simulate import model_params, resident_of_build
    from spec import Backend, get_arch
    from spec.records import case_fields

    arch = get_arch("gb10")
    tp0 = model_params(arch).time_params(arch)
    truth = {c.key: c.misses for c in read_published()}
    tflops = {c.key: c.tflops for c in read_published()}
    cases = [resident_of_build(c, arch)[0] for c in sawtooth_plan(arch)]

    def key(c):
        return key_of_row(case_fields(c.problem, c.variant))

    cutile = [c for c in cases if c.variant.backend == Backend.CUTILE]
    cuda = [c for c in cases if c.variant.backend == Backend.CUDA]
    mid = dict(speed="mid", latency="mid", prefetch=None, cuda=True)
    points = grid(speeds, latencies)
    jobs_list = [(c, pt) for pt in points for c in cutile] + [(c, mid) for c in cuda]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        got = list(pool.map(lambda j: _case_misses(j[0], arch, tp0, j[1]), jobs_list))
    rows = []
    for (c, pt), (m, secs, step) in zip(jobs_list, got):
        p = c.problem
        flops = 4.0 * p.B * p.H * p.S_q * p.S_kv * p.D * (0.5 if p.causal else 1.0)
        pub_s = flops / (tflops[key(c)] * 1e12)
        rows.append(dict(speed=pt["speed"], latency=pt["latency"],
                         family="cuda" if pt.get("cuda") else "cutile",
                         variant=c.variant.id(c.problem), B=c.problem.B, causal=c.problem.causal,
                         order=c.variant.order.label,
                         schedule="static" if c.variant.schedule.is_persistent else "tile",
                         simulated=m, published=truth[key(c)], time_s=secs,
                         published_time_s=pub_s, step_s=step,
                         published_tflops=tflops[key(c)]))
    times = []
    for pt in points:
        sel = [r["time_s"] / r["published_time_s"] for r in rows if r["family"] == "cutile"
               and r["speed"] == pt["speed"] and r["latency"] == pt["latency"]]
        times.append(dict(speed=pt["speed"], latency=pt["latency"],
                          cutile_time_over_published_lo=min(sel),
                          cutile_time_over_published_hi=max(sel)))
    return rows, times, pairs(rows)


def pairs(rows: list[dict]) -> list[dict]:
    """Per point and cuTile pair: the simulated sawtooth speedup (linear time over sawtooth
    time), its compiler part (the ratio of the two builds' steps: spills, instruction count) and
    the rest (fewer steps stalled on fills), beside the published speedup (its TFLOPS ratio)."""
    out = []
    lin = {(r["speed"], r["latency"], r["schedule"], r["causal"]): r for r in rows
           if r["family"] == "cutile" and r["order"] == "linear"}
    for r in rows:
        if r["family"] != "cutile" or r["order"] != "sawtooth":
            continue
        li = lin[(r["speed"], r["latency"], r["schedule"], r["causal"])]
        speedup = li["time_s"] / r["time_s"]
        compiler = li["step_s"] / r["step_s"]
        out.append(dict(speed=r["speed"], latency=r["latency"], schedule=r["schedule"],
                        causal=r["causal"], speedup=speedup, compiler=compiler,
                        memory=speedup / compiler,
                        published=r["published_tflops"] / li["published_tflops"]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory to create (must not exist)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--speed", default="lo,mid,hi",
                    help="points of the step-speed range to run, comma-separated (lo, mid, hi)")
    ap.add_argument("--latency", default="lo,mid,hi",
                    help="points of the DRAM-latency range to run, comma-separated")
    args = ap.parse_args(argv)
    speeds, latencies = (tuple(x.strip() for x in a.split(",")) for a in (args.speed,
                                                                          args.latency))
    bad = [x for x in speeds + latencies if x not in POINTS]
    if bad:
        print(f"error: unknown point {bad[0]!r}; use lo, mid or hi", file=sys.stderr)
        return 2
    out = Path(args.out)
    try:
        check_new(out)
    except (BadRunDir, RunDirExists) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows, times, pair_rows = run(args.jobs, speeds, latencies)
    out.mkdir(parents=True)
    write_dicts(out / "grid.csv", rows)
    write_dicts(out / "times.csv", times)
    write_dicts(out / "pairs.csv", pair_rows)
    # a report at the fixed points: nothing is scored, ranked or picked against the paper
    print("speed latency family variant B causal | simulated / published misses (M) | "
          "simulated / published time (ms)")
    for r in rows:
        print(f"{r['speed']:>5} {r['latency']:>7} {r['family']:>6} {r['variant']} B={r['B']} "
              f"{'causal' if r['causal'] else 'full':>6} | {r['simulated'] / 1e6:8.1f} / "
              f"{r['published'] / 1e6:7.1f} | {1e3 * r['time_s']:8.1f} / "
              f"{1e3 * r['published_time_s']:7.1f}")
    print("\ncuTile simulated / published time, lowest and highest of the eight cases")
    for t in times:
        print(f"{t['speed']:>5} {t['latency']:>7} | {t['cutile_time_over_published_lo']:.2f} "
              f"- {t['cutile_time_over_published_hi']:.2f}")
    print("\nsawtooth speedup (time linear / sawtooth) = compiler (step ratio) x memory; "
          "published speedup")
    for p in pair_rows:
        print(f"{p['speed']:>5} {p['latency']:>5} {p['schedule']:>6} "
              f"{'causal' if p['causal'] else 'full':>6} | {p['speedup']:.2f} = "
              f"{p['compiler']:.2f} x {p['memory']:.2f} | published {p['published']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

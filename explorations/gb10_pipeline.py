"""The GB10 sawtooth study under the pipeline model, across every assumption it needs.

The pipeline model (``analysis.models.steptime``) times each CTA's steps by its build: compute
per step, the L2-hit and DRAM latencies, and how many steps ahead the build issues its K/V loads.
On GB10 three of those inputs are not measured and enter as stated ranges, never as values
picked to reproduce the paper: the step's speed against the H100's (``speed``: SM clock ratio ..
tensor-rate ratio) and the DRAM fill latency (``latency``: 349 ns .. 1 us). What each of the
paper's builds does per step is read off its cubin (``experiments.registry.plans.build_costs``: the
authors' sources compiled with cuda-tile 1.0.1 for sm_121): the causal linear builds hold three
K/V pairs in shared memory (loads two steps ahead) and spill 50 / 43 accesses per step, at the
cost measured on the H100; the causal sawtooth and the non-causal builds hold one pair (every
fill exposed).

For each point of the grid it simulates the eight cuTile cases of the main study and scores them
against the published counts (``analysis.data.published``: judged, never fitted); the CUDA
cases do not depend on these assumptions (their builds' own depth and a step two orders longer
than any fill) and are scored once at the middle point.

    python -m explorations.gb10_pipeline --out DIR        # ~5 min on 2 cores
    python -m explorations.gb10_pipeline --speed mid --latency mid --out DIR   # one point

writes ``grid.csv`` (one row per point and case), ``summary.csv`` (per point: cases within 10%
of 16, causal counts within 1.5x of 4) and ``pairs.csv`` (per point and cuTile pair: the
simulated sawtooth speedup split into its compiler and memory parts, beside the published one)
and prints them.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

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
        pub = truth[key(c)]
        rows.append(dict(speed=pt["speed"], latency=pt["latency"],
                         family="cuda" if pt.get("cuda") else "cutile",
                         variant=c.variant.id(c.problem), B=c.problem.B, causal=c.problem.causal,
                         order=c.variant.order.label,
                         schedule="static" if c.variant.schedule.is_persistent else "tile",
                         simulated=m, published=pub, ratio=m / pub, time_s=secs, step_s=step,
                         published_tflops=tflops[key(c)]))
    cuda_rows = [r for r in rows if r["family"] == "cuda"]
    cuda_within = sum(abs(r["ratio"] - 1) <= 0.10 for r in cuda_rows)
    summary = []
    for pt in points:
        sel = [r for r in rows if r["family"] == "cutile" and r["speed"] == pt["speed"]
               and r["latency"] == pt["latency"]]
        causal = [r for r in sel if r["causal"]]
        summary.append(dict(speed=pt["speed"], latency=pt["latency"], within_10pct=sum(abs(r["ratio"] - 1) <= 0.10 for r in sel)
                            + cuda_within,
                            causal_within_1p5x=sum(1 / 1.5 <= r["ratio"] <= 1.5 for r in causal),
                            causal_ratios=" ".join(f"{r['ratio']:.2f}" for r in causal)))
    return rows, summary, pairs(rows)


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


def _write(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


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
    if out.exists():
        print(f"error: {out} already exists; choose a new --out directory", file=sys.stderr)
        return 2
    rows, summary, pair_rows = run(args.jobs, speeds, latencies)
    out.mkdir(parents=True)
    _write(out / "grid.csv", rows)
    _write(out / "summary.csv", summary)
    _write(out / "pairs.csv", pair_rows)
    print("speed latency | within 10% (of 16) | causal within 1.5x (of 4) | "
          "causal sim/published: Static lin, saw, Tile lin, saw")
    for s in summary:
        print(f"{s['speed']:>5} {s['latency']:>7} | "
              f"{s['within_10pct']:>2} | {s['causal_within_1p5x']} | {s['causal_ratios']}")
    print("\nsawtooth speedup (time linear / sawtooth) = compiler (step ratio) x memory; "
          "published speedup")
    for p in pair_rows:
        print(f"{p['speed']:>5} {p['latency']:>5} {p['schedule']:>6} "
              f"{'causal' if p['causal'] else 'full':>6} | {p['speedup']:.2f} = "
              f"{p['compiler']:.2f} x {p['memory']:.2f} | published {p['published']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

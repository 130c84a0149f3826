"""How far apart do the CTAs of a persistent launch drift, in a kernel that has no timer? (H100)

The timed simulator (``analysis.cache.timesim``) takes the CTAs' drift from the CUDA build's trace
(``%globaltimer`` stamps): the odd SM of a busy pair falls behind at 4.75e-4 per step, CTAs
otherwise keep pace. It then keeps the cuTile Static non-causal launch in one convoy and
predicts 17-30x fewer misses than the H100 counts (REPORT.md 7d); concurrent requests for one
line are merged by the hardware (``explorations/convoy_probe.py``), so the reading left is that
the cuTile CTAs drift apart. A cuTile kernel cannot read a clock, so this script watches it from
outside: a *spy* kernel, one warp per SM launched first on another stream, polls the first
element of every work item's output tile (NaN-poisoned beforehand; ``ld.global.cv``, so each
poll is an L2 read of one sector) and stamps ``%globaltimer`` when it turns finite. Each lane
follows one CTA's items in the order that CTA runs them (items ``j, j+32, ...`` of CTA ``c``),
polling only its next unfinished one, so the spy keeps at most one pending line per lane in the
L2 (4224 lines, 0.5 MiB) and issues one 32-lane poll per SM about every half microsecond.

Two things make it run beside the kernel at all: both streams are non-blocking, and the spy asks
for the largest shared-memory carve-out (an SM changes its L1/shared split only when idle, so a
spy on the default split keeps the kernel's CTAs off every SM until it exits). With one spy warp
on an SM a 256-thread, 128-register cuTile CTA still fits once (two do not: the spy's registers),
so a persistent launch of one CTA per SM lands as it does alone; kernel time beside the spy is
within 7% of alone on the H100.

``measure`` (GPU) writes per launch the spread of the CTAs' speeds and positions (in K/V steps)
and each CTA's speed (``analysis.launch.drift.Completions``): the quantities the simulator's drift
terms stand for. ``predict`` (CPU) runs the timed simulator with the committed drift term and with
the measured speeds (``analysis.cache.timesim.TimeParams.speeds``). From the repository root:

    python -m explorations.drift_spy measure --seq 229376 --launches 5 --out DIR
    python -m explorations.drift_spy predict --spy DIR --seq 294912 [--measured PROFILES_ROOT]
"""
from __future__ import annotations

import argparse
import csv
import functools
import gzip
import time
from pathlib import Path

import numpy as np

from analysis.data import csv_rows

SPY_SOURCE = r"""
extern "C" __global__ void spy(const unsigned short* out, const long long* offs, const int* count,
                               int per_lane, unsigned long long* t_done,
                               long long timeout_ns, int sleep_ns) {
    // lane l polls out[offs[l][k]] for k = 0, 1, ... in turn and stamps when it turns finite
    const int lane = blockIdx.x * blockDim.x + threadIdx.x;
    const long long* my = offs + (long long)lane * per_lane;
    unsigned long long* mine = t_done + (long long)lane * per_lane;
    const int n = count[lane];
    unsigned long long t0, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    int k = 0;
    while (k < n) {
        unsigned short v;
        asm volatile("ld.global.cv.u16 %0, [%1];" : "=h"(v) : "l"(out + my[k]) : "memory");
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if ((v & 0x7c00u) != 0x7c00u || (v & 0x3ffu) == 0) { mine[k] = now; ++k; continue; }
        if ((long long)(now - t0) > timeout_ns) break;
        __nanosleep(sleep_ns);
    }
}
"""

def lanes_for(items, n_lanes: int) -> list[list[int]]:
    """Item indices (rows of ``items``) per spy lane, each lane's in the order its CTA runs them:
    with P <= lanes, CTA ``c``'s items ``j, j+L, ...`` go to lane ``c·L + j`` (L = lanes // P);
    with more CTAs than lanes (grid launches), lane ``l`` follows CTAs ``l, l + lanes, ...``."""
    out: list[list[int]] = [[] for _ in range(n_lanes)]
    per = n_lanes // items.n_ctas
    for row in np.lexsort((items.iter, items.cta)):
        c, it = int(items.cta[row]), int(items.iter[row])
        lane = c * per + it % per if per >= 1 else c % n_lanes
        out[lane].append(int(row))
    return out


def watch(fam, prepared, q, k, v, out, items, *, timeout_s: float, sleep_ns: int = 500):
    """Run ``prepared`` once on ``out`` (poisoned) with the spy beside it, one warp per SM;
    returns (t_done ns per item row, 0 if never seen; kernel ms by events)."""
    import cupy as cp
    import torch

    n_sm = torch.cuda.get_device_properties(q.device).multi_processor_count
    n_lanes = 32 * n_sm
    lanes = lanes_for(items, n_lanes)
    per_lane = max(len(x) for x in lanes)
    tm = prepared.variant.tiles.m
    st = out.stride()
    h = prepared.problem.H
    b, hh = items.bh // h, items.bh % h
    offs_item = b * st[0] + hh * st[1] + items.q.astype(np.int64) * tm * st[2]
    offs = np.zeros((n_lanes, per_lane), dtype=np.int64)
    count = np.zeros(n_lanes, dtype=np.int32)
    for lane, rows in enumerate(lanes):
        offs[lane, :len(rows)] = offs_item[rows]
        count[lane] = len(rows)
    d_offs, d_count = cp.asarray(offs), cp.asarray(count)
    d_t = cp.zeros((n_lanes, per_lane), dtype=cp.uint64)
    kern = cp.RawModule(code=SPY_SOURCE, options=("-std=c++17",)).get_function("spy")
    # an SM changes its L1/shared split only when idle: the spy asks for the split the kernel
    # needs (most shared memory), or the kernel's CTAs wait for the spy to finish
    kern.preferred_shared_memory_carveout = 100
    # two non-blocking streams, so that neither waits for the legacy default stream
    spy_stream = cp.cuda.Stream(non_blocking=True)
    run_cp = cp.cuda.Stream(non_blocking=True)
    run_stream = torch.cuda.ExternalStream(run_cp.ptr)
    torch.cuda.synchronize()
    kern((n_sm,), (32,),
         (out.data_ptr(), d_offs, d_count, np.int32(per_lane), d_t,
          np.int64(int(timeout_s * 1e9)), np.int32(sleep_ns)), stream=spy_stream)
    time.sleep(0.02)                     # the spy is resident before the kernel's CTAs arrive
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(run_stream):
        e0.record()
        fam.run(prepared, q, k, v, out)
        e1.record()
    torch.cuda.synchronize()
    t_lane = d_t.get()
    t = np.zeros(len(items.cta), dtype=np.int64)
    for lane, rows in enumerate(lanes):
        t[rows] = t_lane[lane, :len(rows)].astype(np.int64)
    return t, e0.elapsed_time(e1)


SPEED_FIELDS = ["case", "seq", "launch", "cta", "items", "rel_speed"]
LAUNCH_FIELDS = ["case", "seq", "launch", "correct", "ms_alone", "ms_with_spy", "items", "seen",
                 "step_ns", "speed_rel_sd", "p1_50", "p99_50", "p1_90", "p99_90"]


def measure(args) -> int:
    """On the GPU: every persistent case of the sawtooth study that ``--filter`` keeps, at each
    ``--seq``: checked, timed alone, then run ``--launches`` times beside the spy. Writes
    ``launches.csv`` (one row per launch: times, the speeds' spread, the positions' 1st/99th
    percentiles about the median at 50% and 90% of the launch, in K/V steps) and
    ``speeds.csv.gz`` (each CTA's speed over the launch mean); ``--raw`` also every item's
    finish time."""
    import re

    import torch

    from analysis.launch.drift import Completions
    from experiments.measurement.correctness import check, poisoned_like, random_inputs, reference
    from experiments.measurement.families import family
    from experiments.measurement.timing import time_one
    from experiments.registry.lengths import at_length
    from experiments.registry.plans import sawtooth_plan
    from spec import detect
    from spec.problem import TileGrid

    arch = detect()
    args.out.mkdir(parents=True, exist_ok=False)
    launches, speeds, raw = [], [], []
    for s in args.seq:
        cases = [c for c in at_length(sawtooth_plan(arch), [s])
                 if c.variant.schedule.is_persistent and re.search(args.filter, c.id)]
        ref_key, ref = None, None
        for case in cases:
            prob, var = case.problem, case.variant
            fam = family(var.backend, arch.name)
            prepared = fam.prepare(var, prob)
            q, k, v = random_inputs(prob, seed=1234)
            if ref_key != (prob.B, prob.causal):
                ref_key, ref = (prob.B, prob.causal), reference(q, k, v, prob.causal)
            out = poisoned_like(q)
            fam.run(prepared, q, k, v, out)
            torch.cuda.synchronize()
            verdict = check(out, q, k, v, prob.causal, ref)
            ms_alone = time_one(functools.partial(fam.run, prepared, q, k, v, out), reps=3,
                                warmup=0, l2="warm").median     # the launch reads GBs
            grid = TileGrid(prob, var.tiles)
            items = var.schedule.work_items(grid)
            seen = 0
            for launch in range(args.launches):
                out = poisoned_like(q)
                t, ms_spy = watch(fam, prepared, q, k, v, out, items,
                                  timeout_s=2 + 3e-3 * ms_alone)
                seen = int((t > 0).sum())
                row = {"case": case.id, "seq": s, "launch": launch, "correct": str(verdict),
                       "ms_alone": ms_alone, "ms_with_spy": ms_spy, "items": len(t), "seen": seen}
                if verdict.passed and seen == len(t):
                    c = Completions(items.cta, items.iter, grid.kv_tiles_for(items.q), t)
                    v_ = c.speeds()
                    pos = c.positions([0.5, 0.9])
                    rel = pos - np.median(pos, axis=1, keepdims=True)
                    row |= {"step_ns": 1 / v_.mean(), "speed_rel_sd": v_.std() / v_.mean(),
                            "p1_50": np.percentile(rel[0], 1), "p99_50": np.percentile(rel[0], 99),
                            "p1_90": np.percentile(rel[1], 1), "p99_90": np.percentile(rel[1], 99)}
                    n_items = np.bincount(items.cta, minlength=items.n_ctas)
                    speeds += [(case.id, s, launch, c_, int(n_items[c_]), f"{x / v_.mean():.6f}")
                               for c_, x in enumerate(v_)]
                launches.append(row)
                if args.raw:
                    raw += [(case.id, s, launch, int(a), int(b), int(c_), int(d), int(e))
                            for a, b, c_, d, e in zip(items.cta, items.iter, items.bh, items.q, t)]
                print(row, flush=True)
                del out
                if seen == 0:
                    break
            del q, k, v
            torch.cuda.empty_cache()
            if seen == 0:
                print("the spy saw no item finish (the kernel did not run beside it); stopping")
                break
    with open(args.out / "launches.csv", "w", newline="") as f:
        w = csv.DictWriter(f, LAUNCH_FIELDS)
        w.writeheader()
        w.writerows({k: (f"{x:.6g}" if isinstance(x, float) else x) for k, x in r.items()}
                    for r in launches)
    with gzip.open(args.out / "speeds.csv.gz", "wt", newline="", compresslevel=9) as f:
        w = csv.writer(f)
        w.writerow(SPEED_FIELDS)
        w.writerows(speeds)
    if args.raw:
        with gzip.open(args.out / "items.csv.gz", "wt", newline="") as f:
            w = csv.writer(f)
            w.writerow(["case", "seq", "launch", "cta", "iter", "bh", "q_tile", "t_done_ns"])
            w.writerows(raw)
    print("\ncase | S | ms alone / with spy | speed sd | positions p1..p99 at 50%, 90% (steps)")
    for r in launches:
        extra = (f"{100 * r['speed_rel_sd']:.3f}% {r['p1_50']:.0f}..{r['p99_50']:.0f} "
                 f"{r['p1_90']:.0f}..{r['p99_90']:.0f}" if "step_ns" in r else
                 f"seen {r['seen']} of {r['items']}, {r['correct'][:4]}")
        print(r["case"], r["seq"], r["launch"], f"{r['ms_alone']:.1f}/{r['ms_with_spy']:.1f}",
              extra)
    return 0


def read_speeds(spy_dir: Path) -> dict[tuple[str, int], list[np.ndarray]]:
    """{(case id, S): per launch, each CTA's speed over the launch mean} from a ``measure``
    run."""
    rows: dict[tuple[str, int, int], list] = {}
    for r in csv_rows(spy_dir / "speeds.csv.gz", typed=False):
        rows.setdefault((r["case"], int(r["seq"]), int(r["launch"])), []).append(
            (int(r["cta"]), float(r["rel_speed"])))
    out: dict[tuple[str, int], list[np.ndarray]] = {}
    for (cid, s, _), v in sorted(rows.items()):
        out.setdefault((cid, s), []).append(np.array([x for _, x in sorted(v)]))
    return out


def predict(args) -> int:
    """On the CPU: for every persistent case of the sawtooth study at ``--seq``, the committed
    model's misses (its SM-pair drift) beside the same model with each CTA's speed as ``--spy``
    measured it for the same build and batch at the nearest length (``--spy-seq`` picks one):
    the median and range over the launches spied there; with ``--measured`` (ncu runs) also the
    measured median and the errors."""
    from dataclasses import replace

    from analysis import calibration as cal
    from analysis.cache.timesim import simulate_case
    from analysis.launch.drift import step_factors
    from experiments.registry.lengths import at_length
    from experiments.registry.plans import sawtooth_plan
    from spec import get_arch

    arch = get_arch(args.arch)
    tp = cal.read_params(arch.name).time_params(arch)
    spy: dict[tuple[str, int], list[np.ndarray]] = {}
    for d in args.spy:
        for key, vs in read_speeds(d).items():
            spy.setdefault(key, []).extend(vs)
    measured = {}
    if args.measured:
        measured = {m.case.id: m.median
                    for m in cal.load_measured(args.measured, arch, "sawtooth")}
    print(f"{'case':62s} {'measured':>9s} {'pair drift':>17s}  measured speeds: median [range]")
    for case in at_length(sawtooth_plan(arch), [args.seq]):
        if not case.variant.schedule.is_persistent:
            continue
        name, label = case.id.split()
        twins = {s2: v for (cid, s2), v in spy.items() if cid.split()[0] == name
                 and cid.split()[1].replace(f"s{s2}d", "") == label.replace(f"s{args.seq}d", "")
                 and (args.spy_seq is None or s2 == args.spy_seq)}
        meas = measured.get(case.id)
        err = (lambda g: f" ({100 * (g / meas - 1):+5.0f}%)") if meas else (lambda g: "")
        a_ = simulate_case(case, tp, arch.sector_bytes, auto_sample=True).tex_misses
        cells = [f"{a_ / 1e6:8.1f}{err(a_)}"]
        if twins:
            s_ref = min(twins, key=lambda s2: abs(s2 - args.seq))
            got = [simulate_case(case, replace(tp, pair_slowdown=0.0,
                                               speeds=tuple(step_factors(v)),
                                               speeds_source=f"spy S={s_ref} launch {i}"),
                                 arch.sector_bytes, auto_sample=True).tex_misses
                   for i, v in enumerate(twins[s_ref])]
            med = float(np.median(got))
            cells.append(f"{med / 1e6:8.1f}{err(med)} [{min(got) / 1e6:.1f}-{max(got) / 1e6:.1f}]"
                         f" S={s_ref} x{len(got)}")
        print(f"{case.id[:62]:62s} {(meas or float('nan')) / 1e6:9.1f}", *cells, flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="on the GPU: the spy beside each persistent case")
    m.add_argument("--seq", type=int, action="append", required=True)
    m.add_argument("--filter", default=".", help="regex on case ids (persistent cases only)")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--launches", type=int, default=1, help="spied launches per case")
    m.add_argument("--raw", action="store_true", help="also write every item's finish time")
    p = sub.add_parser("predict", help="on the CPU: the model with the measured speeds")
    p.add_argument("--spy", type=Path, action="append", required=True,
                   help="a `measure` run directory (repeat to pool several)")
    p.add_argument("--seq", type=int, required=True, help="the study's sequence length")
    p.add_argument("--spy-seq", type=int, help="use the speeds measured at this length")
    p.add_argument("--measured", type=Path, help="ncu runs of the study (a profiles/ root)")
    p.add_argument("--arch", default="h100")
    args = ap.parse_args(argv)
    return measure(args) if args.cmd == "measure" else predict(args)


if __name__ == "__main__":
    raise SystemExit(main())

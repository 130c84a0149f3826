"""Load-to-use latency of an L2 hit and of an L2 miss served by DRAM: a pointer chase.

Why it matters. ``analysis.models.timemodel`` says an L2 miss costs time only when the K/V pipeline
does not hide it: a step lasts ``t_c + max(0, L(f) - (stages - 1) * t_c)`` with
``L(f) = L_hit + f * (L_dram - L_hit)``. Whether sawtooth's fewer misses (a smaller ``f``) can
save time therefore hangs on ``L_hit`` and ``L_dram`` against the compute a tile has ahead of it.
Those two numbers were assumed (0.15 and 0.50 us on the H100); this module measures them.

What is measured. One thread (grid 1x1) follows a chain of 8-byte pointers, ``p = *p``, N times
(the dependent-load chase of Jia et al. 2018, "Dissecting the NVIDIA Volta GPU Architecture via
Microbenchmarking", and of Chips and Cheese's GPU latency tests). Each load needs the previous
one's value, so elapsed / N is the load-to-use latency (the loop's own instructions issue in the
shadow of the load). The loads are ``ld.global.cg`` (inline PTX: cached in L2, not in L1), so L1
hits never enter. The chain is one random cycle (numpy ``rng.permutation``, seeded) over the lines
of a buffer, one pointer every ``stride`` bytes (a multiple of the 128 B line): no two loads share
a line and no prefetcher can guess the next. ``%globaltimer`` (ns) and ``clock64`` (SM cycles)
are read in the kernel around the loop; the last pointer is written out and compared with the
chain walked on the host, so the loop cannot be optimised away and a wrong chain cannot pass.

Per footprint: an untimed warm pass (the whole cycle, or 2x L2 of lines when the cycle is longer)
brings small footprints into the L2, then R timed passes of N loads, each continuing where the
previous one stopped, so a footprint above the L2 never re-reads lines it has just fetched.

Reading the curve (``latency.csv``, one row per footprint, median and min..max of R passes):
footprint <= L2/4 is the L2-hit plateau (``l2`` rows; estimate = their median). Hopper's L2 is two
partitions and a line homed in the far one costs more, so footprints between L2/4 and the L2 may
show a second step before the rise to DRAM: every footprint stays in the CSV. Footprints from 4x
L2 to 512 MiB are the DRAM plateau (``dram``; estimate = their median). Above 512 MiB a random
chase also misses the TLBs (``dram+tlb``): kept, labelled, left out of the estimate. These are
unloaded latencies; a loaded memory system is slower, so the exposed latency timemodel derives
from them is a lower bound.

``python -m experiments.instruments.latency --arch h100 --out DIR``
(``--dry-run``: the plan, no GPU).
"""
from __future__ import annotations

import argparse
import csv
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spec import detect, get_arch

from ..rundirs.rundir import RunDirExists, check_new, command_line, reserved_run_dir, write_manifest

MiB = 2**20
TLB_SAFE_BYTES = 512 * MiB
"""Largest footprint counted in the DRAM estimate; beyond it TLB misses join the DRAM latency."""
DEFAULT_SIZES = "1M,2M,4M,8M,16M,24M,32M,48M,64M,128M,256M,512M,1G,2G"
UPPER_NS_PER_LOAD = 1000.0
"""Dry-run bound on the cost of one load (a TLB-missing DRAM access), for the time estimate."""

CHASE_KERNEL = "pointer_chase"
CHASE_SOURCE = r"""
extern "C" __global__ void pointer_chase(unsigned long long p, long long n,
                                         unsigned long long* out) {
    // One thread: n dependent loads p = *p, cached in L2 only (ld.global.cg).
    // out = {last p, elapsed ns (%globaltimer), elapsed SM cycles (clock64)}.
    unsigned long long t0, t1;
    long long c0 = clock64();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
#pragma unroll 8
    for (long long i = 0; i < n; ++i)
        asm volatile("ld.global.cg.u64 %0, [%0];" : "+l"(p) :: "memory");
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    long long c1 = clock64();
    out[0] = p; out[1] = t1 - t0; out[2] = (unsigned long long)(c1 - c0);
}
"""


@dataclass(frozen=True)
class Point:
    """One footprint of the sweep: its lines (= chain length), untimed warm loads, timed loads."""

    footprint: int
    lines: int
    warm: int
    loads: int


@dataclass(frozen=True)
class Result:
    point: Point
    ns: tuple[float, ...]        # ns per load, one per timed pass
    cycles: tuple[float, ...]    # SM cycles per load, one per timed pass

    @property
    def median(self) -> float:
        return statistics.median(self.ns)


def parse_size(text: str) -> int:
    """``"512K"``, ``"1M"``, ``"1MiB"``, ``"2G"`` (binary units) or plain bytes -> bytes > 0."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:([KMG])(?:iB)?|B)?\s*", text, re.IGNORECASE)
    if not m or int(m.group(1)) <= 0:
        raise ValueError(f"--sizes entry {text!r} is not a positive size; write e.g. 512K, 1M, "
                         "48MiB, 2G (binary units) or a byte count")
    return int(m.group(1)) * 1024 ** (" KMG".index(m.group(2).upper()) if m.group(2) else 0)


def fmt_size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", MiB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def plan(sizes: list[int], stride: int, loads: int, l2_bytes: int) -> list[Point]:
    """The sweep: warm passes walk the whole cycle, at most 2x L2 of lines."""
    return [Point(s, s // stride, min(s // stride, 2 * l2_bytes // stride), loads) for s in sizes]


def region(footprint: int, l2_bytes: int) -> str:
    """Which plateau a footprint belongs to (see the module docstring)."""
    if footprint <= l2_bytes / 4:
        return "l2"
    if footprint < 4 * l2_bytes:
        return "transition"
    return "dram" if footprint <= TLB_SAFE_BYTES else "dram+tlb"


def estimates(curve: dict[int, float], l2_bytes: int) -> dict[str, float | None]:
    """Median ns/load over the ``l2`` footprints and over the ``dram`` ones (None if none)."""
    out = {}
    for name, reg in (("l2_hit_ns", "l2"), ("dram_ns", "dram")):
        vals = [ns for f, ns in curve.items() if region(f, l2_bytes) == reg]
        out[name] = statistics.median(vals) if vals else None
    return out


def visit_order(lines: int, seed: int) -> np.ndarray:
    """The cycle's line order, starting at line 0, the rest a seeded random permutation."""
    rest = np.random.default_rng(seed).permutation(lines - 1) + 1
    return np.concatenate((np.zeros(1, dtype=np.int64), rest.astype(np.int64)))


def successor_offsets(order: np.ndarray, stride: int) -> np.ndarray:
    """``nxt[i]``: byte offset of the line visited after line ``i`` (one cycle over all lines)."""
    nxt = np.empty_like(order)
    nxt[order] = np.roll(order, -1)
    return nxt * stride


def plan_lines(arch_name: str, l2_bytes: int, points: list[Point], stride: int,
               repeats: int, seed: int) -> list[str]:
    total = sum(p.warm + repeats * p.loads for p in points)
    lines = [f"latency on {arch_name} (L2 {fmt_size(l2_bytes)}): one-thread pointer chase, "
             f"ld.global.cg, stride {stride} B, seed {seed}, {repeats} timed passes of "
             f"{points[0].loads} loads per footprint",
             f"  {'footprint':>10} {'lines':>10} {'warm loads':>10}  region"]
    lines += [f"  {fmt_size(p.footprint):>10} {p.lines:>10} {p.warm:>10}  "
              f"{region(p.footprint, l2_bytes)}" for p in points]
    lines.append(f"  {total} loads in all: at most ~{total * UPPER_NS_PER_LOAD * 1e-9:.0f} s of "
                 f"chasing at {UPPER_NS_PER_LOAD:g} ns per load, plus building the chains")
    return lines


class ChaseError(RuntimeError):
    """The kernel did not end where the chain says it must."""


def measure(points: list[Point], stride: int, repeats: int, seed: int, say=print) -> list[Result]:
    """Build each footprint's chain on the device, warm, then time ``repeats`` passes."""
    import cupy
    kernel = cupy.RawKernel(CHASE_SOURCE, CHASE_KERNEL)
    out = cupy.zeros(3, dtype=cupy.uint64)
    results = []
    for pt in points:
        order = visit_order(pt.lines, seed)
        buf = cupy.zeros(pt.footprint // 8, dtype=cupy.uint64)
        base = int(buf.data.ptr)
        heads = (successor_offsets(order, stride) + base).astype(np.uint64)   # absolute pointers
        buf.reshape(pt.lines, stride // 8)[:, 0] = cupy.asarray(heads)
        p, done, ns, cyc = base, 0, [], []
        for k in range(repeats + 1):
            n = pt.loads if k else pt.warm
            kernel((1,), (1,), (np.uint64(p), np.int64(n), out))
            last, elapsed, cycles = (int(v) for v in out.get())
            done += n
            if last != base + int(order[done % pt.lines]) * stride:
                raise ChaseError(f"{fmt_size(pt.footprint)}: the chase ended at {last:#x}, not "
                                 "where the chain leads; the kernel or the chain is wrong")
            p = last
            if k:
                ns.append(elapsed / n)
                cyc.append(cycles / n)
        results.append(Result(pt, tuple(ns), tuple(cyc)))
        say(f"  {fmt_size(pt.footprint):>9}: {results[-1].median:7.1f} ns/load")
        del buf
        cupy.get_default_memory_pool().free_all_blocks()
    return results


def write_csv(path: Path, results: list[Result], l2_bytes: int) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["footprint_bytes", "lines", "loads", "ns_per_load", "min_ns_per_load",
                    "max_ns_per_load", "cycles_per_load", "region"])
        for r in results:
            w.writerow([r.point.footprint, r.point.lines, r.point.loads, f"{r.median:.3f}",
                        f"{min(r.ns):.3f}", f"{max(r.ns):.3f}",
                        f"{statistics.median(r.cycles):.2f}", region(r.point.footprint, l2_bytes)])


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m experiments.instruments.latency",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, help="registry name; the device's L2 must match it")
    ap.add_argument("--out", type=Path, help="new directory for latency.csv and latency.json")
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated footprints")
    ap.add_argument("--stride", type=int, default=128, help="bytes between chained pointers")
    ap.add_argument("--loads", type=int, default=200_000, help="timed loads per pass")
    ap.add_argument("--repeats", type=int, default=5, help="timed passes per footprint")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true", help="print the plan; no GPU needed")
    return ap.parse_args(argv)


def _checked(a: argparse.Namespace):
    """(arch, sizes) or ValueError / RunDirExists naming the problem and the fix."""
    arch = get_arch(a.arch)
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    if a.stride <= 0 or a.stride % arch.line_bytes:
        raise ValueError(f"--stride {a.stride} is not a positive multiple of the "
                         f"{arch.line_bytes} B line; pass e.g. --stride {arch.line_bytes}")
    if a.loads < 1 or a.repeats < 1:
        raise ValueError("--loads and --repeats must be >= 1")
    bad = [s for s in sizes if s % a.stride or s < 2 * a.stride]
    if bad:
        raise ValueError(f"footprint {fmt_size(bad[0])} is not a multiple of --stride {a.stride} "
                         "of at least two strides; pass sizes like 1M, 48M, 2G")
    if a.out is None and not a.dry_run:
        raise ValueError("--out DIR is required (a new directory); or pass --dry-run")
    if a.out is not None:
        check_new(a.out)
    return arch, sizes


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = parse(argv)
    try:
        arch, sizes = _checked(a)
        if a.dry_run:
            points = plan(sizes, a.stride, a.loads, arch.l2_bytes)
            print("\n".join(plan_lines(arch.name, arch.l2_bytes, points, a.stride, a.repeats,
                                       a.seed)))
            return 0
        dev = detect()
        if dev is None:
            raise ValueError("no CUDA GPU here: run this on the GPU machine, or pass --dry-run")
        if dev.l2_bytes != arch.l2_bytes:
            raise ValueError(f"the device ({dev.marketing_name}) has {fmt_size(dev.l2_bytes)} of "
                             f"L2, --arch {arch.name} has {fmt_size(arch.l2_bytes)}; pass the "
                             "--arch of this device")
    except (ValueError, RunDirExists) as e:   # UnknownArch, BadRunDir are ValueErrors
        print(f"error: {e}", file=sys.stderr)
        return 2
    from ..measurement.measure import device_facts
    points = plan(sizes, a.stride, a.loads, dev.l2_bytes)
    print("\n".join(plan_lines(arch.name, dev.l2_bytes, points, a.stride, a.repeats, a.seed)))
    with reserved_run_dir(a.out) as (final, work):
        results = measure(points, a.stride, a.repeats, a.seed)
        est = estimates({r.point.footprint: r.median for r in results}, dev.l2_bytes)
        clock = statistics.median(c / n for r in results for c, n in zip(r.cycles, r.ns))
        write_csv(work / "latency.csv", results, dev.l2_bytes)
        write_manifest(work, command=command_line("experiments.instruments.latency", argv),
                       arch=arch.name, device=device_facts(), stride=a.stride, loads=a.loads,
                       repeats=a.repeats, seed=a.seed, sizes=sizes, **est, sm_clock_ghz=clock,
                       l2_hit_rule="median over footprints <= L2/4",
                       dram_rule=f"median over footprints in 4x L2 .. {fmt_size(TLB_SAFE_BYTES)}"
                       ).rename(work / "latency.json")   # not a study run: no manifest.json
    print(f"wrote {final}/latency.csv and latency.json\n  {'footprint':>10} {'ns/load':>9} "
          f"{'min..max':>17} {'cycles':>7}  region\n" + "\n".join(
              f"  {fmt_size(r.point.footprint):>10} {r.median:9.1f} {min(r.ns):8.1f}.."
              f"{max(r.ns):<8.1f} {statistics.median(r.cycles):7.0f}  "
              f"{region(r.point.footprint, dev.l2_bytes)}" for r in results))
    for name, v in est.items():
        print(f"{name}: " + (f"{v:.1f} ns" if v is not None else "no footprint in its range; "
                             "add one to --sizes"))
    print(f"(SM clock during the chase {clock:.2f} GHz)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

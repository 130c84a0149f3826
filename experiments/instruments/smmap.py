"""Which L2 partition each SM sits on, and which SM each CTA of a launch lands on.

Why it matters for locality. Hopper's L2 is two partitions, each serving the SMs of four GPCs
(``../shared/l2-ncu-notes.md`` §1). Two CTAs that read the same K/V tile at the same time share
one copy of it when their SMs sit on the same partition; on opposite partitions the tile is held
twice (the home copy and the reader's local copy) and the reader from the far side counts a tex
lookup miss although the line is on chip. So the wavefront argument's sharing depends on *which*
SMs a launch's CTAs land on, something the CUDA programming model leaves unspecified and NVIDIA
does not document. This module measures both halves of that mapping on the device at hand.

1. **SM -> partition, by latency.** The L2 is flushed (a write of 2x L2); one reference SM reads a
   4 MiB buffer once (a random pointer chain, ``ld.global.cg``), which puts every line in its home
   partition and a copy in the reference SM's partition; then SM ``s`` walks the same chain once,
   timed. An SM on the reference's partition finds every line locally (the L2-hit latency, ~143 ns
   on the H100, ``profiles/h100/latency-20261123``); an SM on the other side finds locally only the
   lines homed there and fetches the rest over the fabric (~270 ns): about the mean of the two.
   Done for every SM and for two reference SMs, one from each group (the groups must come out
   complementary, which checks the method).
2. **CTA -> SM, by ``%smid``.** A launch of ``N`` CTAs that each record ``%smid`` and spin for a
   while (all resident at once), for the CTA counts of the active-sms and sawtooth studies, with one
   CTA per SM (dynamic shared memory above half an SM's) and with up to two per SM, three launches
   each.

``smmap.csv``: one row per (kind, reference or launch, index): ``sm_partition`` rows (ref SM, SM,
ns per load, group 0/1 with group 0 = the reference's side), ``cta_sm`` rows (launch N, shared
memory, repeat, CTA index, SM, the SM's group).
``python -m experiments.instruments.smmap --arch h100 --out DIR``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

from spec import detect, get_arch
from spec.records import write_dicts

from ..rundirs.rundir import RunDirExists, check_new, command_line, reserved_run_dir, write_manifest
from .latency import successor_offsets, visit_order

SOURCE = r"""
extern "C" __global__ void where(unsigned int* smid_out, long long spin_ns) {
    // each CTA records the SM it runs on, then spins so that the whole launch is resident at once
    unsigned int s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    if (threadIdx.x == 0) smid_out[blockIdx.x] = s;
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < spin_ns);
}

extern "C" __global__ void chase_on(unsigned long long p, long long n, unsigned int target,
                                    int* claim, unsigned long long* out) {
    // the first CTA that runs on SM `target` walks n links of the chain (one thread, L2 only)
    unsigned int s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    if (s != target || threadIdx.x != 0) return;
    if (atomicCAS(claim, 0, 1) != 0) return;
    unsigned long long t0, t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (long long i = 0; i < n; ++i)
        asm volatile("ld.global.cg.u64 %0, [%0];" : "+l"(p) :: "memory");
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    out[0] = p; out[1] = t1 - t0; out[2] = s;
}
"""
FOOTPRINT = 4 * 2**20
"""Chain footprint: far below one partition, so the reference's read leaves every line on chip."""
LAUNCH_CTAS = (1, 2, 4, 8, 16, 32, 64, 66, 99, 128, 132, 264)
SPIN_NS = 200_000


def _groups(ns: dict[int, float]) -> dict[int, int]:
    """Split SMs into the fast group (0) and the slow group (1) at the midpoint of the extremes."""
    lo, hi = min(ns.values()), max(ns.values())
    cut = (lo + hi) / 2
    return {sm: int(v > cut) for sm, v in ns.items()}


def measure(say=print) -> tuple[list[dict], dict]:
    import cupy
    mod = cupy.RawModule(code=SOURCE)
    where, chase = mod.get_function("where"), mod.get_function("chase_on")
    props = cupy.cuda.runtime.getDeviceProperties(0)
    smem_sm = int(props["sharedMemPerMultiprocessor"])
    one_per_sm = smem_sm // 2 + 1024            # above half an SM: one CTA per SM
    two_per_sm = smem_sm // 2 - 8 * 1024        # two fit
    for f in (where, chase):
        f.max_dynamic_shared_size_bytes = one_per_sm
    # SMs present
    n_sm = int(props["multiProcessorCount"])
    out = cupy.zeros(4 * n_sm, dtype=cupy.uint32)
    where((n_sm,), (32,), (out, np.int64(SPIN_NS)), shared_mem=one_per_sm)
    sms = sorted(set(int(x) for x in out[:n_sm].get()))
    say(f"{n_sm} SMs, %smid values {sms[0]}..{sms[-1]} ({len(sms)} distinct)")
    rows: list[dict] = []
    # 1. SM -> partition
    lines = FOOTPRINT // 128
    order = visit_order(lines, 0)
    buf = cupy.zeros(FOOTPRINT // 8, dtype=cupy.uint64)
    base = int(buf.data.ptr)
    buf.reshape(lines, 16)[:, 0] = cupy.asarray((successor_offsets(order, 128) + base)
                                                .astype(np.uint64))
    flush = cupy.empty(2 * int(props["l2CacheSize"]) // 4, dtype=cupy.uint32)
    claim = cupy.zeros(1, dtype=cupy.int32)
    res = cupy.zeros(3, dtype=cupy.uint64)

    def walk(sm: int) -> float:
        claim.fill(0)
        res.fill(0)
        chase((2 * n_sm,), (32,), (np.uint64(base), np.int64(lines), np.uint32(sm), claim, res),
              shared_mem=one_per_sm)
        last, ns, got = (int(v) for v in res.get())
        if got != sm or last != base:
            raise RuntimeError(f"SM {sm}: chase did not run there or ended off the chain")
        return ns / lines

    refs = [sms[0]]
    groups_by_ref = {}
    for k in range(2):
        ref = refs[k]
        ns = {}
        for sm in sms:
            flush.fill(k + 1)
            walk(ref)
            ns[sm] = walk(sm)
        g = _groups(ns)
        groups_by_ref[ref] = g
        say(f"ref SM {ref}: fast {sum(1 for v in g.values() if v == 0)} SMs "
            f"(median {statistics.median(v for s, v in ns.items() if g[s] == 0):.1f} ns), slow "
            f"{sum(g.values())} (median {statistics.median(v for s, v in ns.items() if g[s]):.1f}"
            f" ns)")
        for sm in sms:
            rows.append(dict(kind="sm_partition", ref=ref, n_ctas="", smem="", repeat="",
                             index=sm, sm=sm, ns_per_load=round(ns[sm], 2), group=g[sm]))
        if k == 0:
            refs.append(min(s for s in sms if g[s] == 1))
    g0, g1 = groups_by_ref[refs[0]], groups_by_ref[refs[1]]
    consistent = all(g0[s] != g1[s] for s in sms)
    say(f"the two references split the SMs complementarily: {consistent}")
    part = g0                                   # group 0 = the side of the lowest %smid
    # 2. CTA -> SM
    for n in LAUNCH_CTAS:
        for smem, label in ((one_per_sm, "1/SM"), (two_per_sm, "2/SM")):
            if label == "1/SM" and n > n_sm:
                continue
            for rep in range(3):
                buf_s = cupy.zeros(n, dtype=cupy.uint32)
                where((n,), (32,), (buf_s, np.int64(SPIN_NS)), shared_mem=smem)
                got = [int(x) for x in buf_s.get()]
                for i, sm in enumerate(got):
                    rows.append(dict(kind="cta_sm", ref="", n_ctas=n, smem=smem, repeat=rep,
                                     index=i, sm=sm, ns_per_load="", group=part[sm]))
                if rep == 0:
                    say(f"N={n:>3} {label}: groups of CTAs 0..{min(n, 16) - 1}: "
                        f"{[part[s] for s in got[:16]]}, in group 1: "
                        f"{sum(part[s] for s in got)}/{n}")
    facts = dict(sms=len(sms), refs=refs, complementary=consistent, footprint=FOOTPRINT,
                 smem_one_per_sm=one_per_sm, smem_two_per_sm=two_per_sm, spin_ns=SPIN_NS,
                 group1_sms=sorted(s for s in sms if part[s]))
    return rows, facts


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m experiments.instruments.smmap",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, help="registry name; must match the device")
    ap.add_argument("--out", type=Path, required=True, help="new directory for smmap.csv")
    a = ap.parse_args(argv)
    try:
        arch = get_arch(a.arch)
        check_new(a.out)
        dev = detect()
        if dev is None:
            raise ValueError("no CUDA GPU here: run this on the GPU machine")
        if dev.l2_bytes != arch.l2_bytes:
            raise ValueError(f"the device has {dev.l2_bytes} B of L2, --arch {arch.name} "
                             f"{arch.l2_bytes}; pass the --arch of this device")
    except (ValueError, RunDirExists) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from ..measurement.measure import device_facts
    with reserved_run_dir(a.out) as (final, work):
        rows, facts = measure()
        write_dicts(work / "smmap.csv", rows)
        write_manifest(work, command=command_line("experiments.instruments.smmap", argv),
                       arch=arch.name, device=device_facts(), **facts)
    print(f"wrote {final}/smmap.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())

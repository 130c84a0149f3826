"""Benchmark of the raw CUDA family beside PyTorch SDPA (flash and cuDNN backends), one GPU.

    python -m cuda_baseline.bench --out profiles/h100/cuda_bench.csv [--reps 20] [--S 16384]

For each head dim (64, 128) and mask (full, causal) at B=1, H=16, S=16K fp16: every tested tile
shape with the grid schedule and linear order, plus persistent linear / sawtooth / longest-first
builds of the arch's default tile with P = all resident CTAs, each checked against the fp32
reference first (experiments.correctness), then timed with experiments.timing.time_interleaved
(cold L2, A/B alternation, every sample kept) beside the SDPA peers. The trace build of the
persistent linear variant measures how far the CTAs drift apart (cuda_baseline.drift). Writes tidy
rows (spec.records schema: kernel_time_ms samples, tflops, the resource metrics registers /
local_bytes / smem_bytes / ctas_per_sm per variant, median_step_ns and cta_start_spread_ns) and
prints a resource table, the drift summary and a speed table last. A failed correctness check is
reported and the variant is still timed (marked in the note column), so one run always yields the
whole picture.
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from spec.orders import ScanOrder
from spec.problem import Problem, Tiles
from spec.records import Metric, Row, Source, case_fields, write_csv
from spec.schedules import CtaSchedule
from spec.variant import Backend, Variant

from .source import TESTED_TILES


def _variants(num_ctas: int, default: Tiles) -> list[Variant]:
    """Grid/linear at every tested tile; persistent linear, sawtooth and longest-first at the
    arch's default tile (the last three share P)."""
    out = [Variant(Backend.CUDA, ScanOrder.linear(), CtaSchedule.grid(), t) for t in TESTED_TILES]
    for order, sched in ((ScanOrder.linear(), CtaSchedule.persistent(num_ctas)),
                         (ScanOrder.sawtooth(), CtaSchedule.persistent(num_ctas)),
                         (ScanOrder.linear(), CtaSchedule.longest_first(num_ctas))):
        out.append(Variant(Backend.CUDA, order, sched, default))
    return out


def _drift_rows(backend, var: Variant, pr: Problem, q, k, v, fields: dict) -> tuple[list, str]:
    """Trace build of a persistent variant: spread of step start times over the CTAs."""
    import torch

    from .drift import drift
    p = backend.prepare(var, pr)
    tr = backend.trace(p, q, k, v, torch.empty_like(q))
    d = drift(tr["time_ns"])
    f = case_fields(pr, var) | fields
    rows = [Row(**f, metric="median_step_ns", value=d.median_step_ns, unit="ns",
                note="trace build")]
    for s, ns in zip(d.step[::32], d.spread_ns[::32]):
        rows.append(Row(**f, metric="cta_start_spread_ns", value=float(ns), unit="ns",
                        sample=int(s), note="trace build; every 32nd step"))
    n_kv = -(-pr.S_kv // var.tiles.n)
    at = {f"step {s}": d.spread_steps[s] for s in (0, n_kv - 1, n_kv) if s < len(d.step)}
    at["max"] = float(d.spread_steps.max())
    summary = ", ".join(f"{k} {x:.1f}" for k, x in at.items())
    return rows, (f"{var.id(pr)} {pr.label}: median step {d.median_step_ns:.0f} ns; start-time "
                  f"spread over {tr['visits'].shape[0]} CTAs, in steps: {summary}")


def _git(state: dict) -> dict:
    """git_state() outside a checkout (the device copy) reads 'HEAD'; record unknown instead."""
    if not re.fullmatch(r"[0-9a-f]{40}", state.get("commit") or ""):
        return {"commit": None, "dirty": None}
    return state


def _manifest(run_id: str, args, arch) -> dict:
    """The environment of the run (design.md: every result records it), beside the CSV."""
    import torch

    from experiments.rundir import git_state, package_versions
    from spec.records import SCHEMA_VERSION
    props = torch.cuda.get_device_properties(0)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.max.sm",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout
    return {"schema_version": SCHEMA_VERSION, "run": run_id, "study": "cuda_bench",
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python", "-m", "cuda_baseline.bench", *sys.argv[1:]]),
            "gpu": props.name, "sm_count": props.multi_processor_count,
            "l2_bytes": props.L2_cache_size, "nvidia_smi_driver_clock_maxclock": smi.strip(),
            "cuda_runtime": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "arch": arch.name if arch else None, "git": _git(git_state()),
            "versions": package_versions(), "seed": "1234 + D + causal",
            "l2_state": "cold (2x L2 flush before every repetition)", "reps": args.reps,
            "ncu": None, "clock_control": "none (card as found)"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="tidy CSV to write")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--S", type=int, default=16384)
    ap.add_argument("--H", type=int, default=16)
    ap.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--causal", choices=["full", "causal", "both"], default="both")
    args = ap.parse_args(argv)

    import cupy
    import torch

    from experiments.correctness import check, poisoned_like, random_inputs, reference
    from experiments.timing import sdpa_peers, time_interleaved
    from spec.arch import detect

    from .backend import CudaBackend, instance_for, precompile

    arch = detect()
    props = torch.cuda.get_device_properties(0)
    backend = CudaBackend()
    run_id = time.strftime("%Y%m%dT%H%M%S")
    masks = {"full": [False], "causal": [True], "both": [False, True]}[args.causal]
    cases = [Problem(B=1, H=args.H, S_q=args.S, D=d, causal=c)
             for d, c in itertools.product(args.head_dims, masks)]
    header = (f"{props.name}, {props.multi_processor_count} SMs, L2 {props.L2_cache_size} B, "
              f"torch {torch.__version__}, CuPy {cupy.__version__}, "
              f"CUDA runtime {torch.version.cuda}, arch {arch.name if arch else '?'}")
    print(header, flush=True)

    # Persistent builds get one CTA per SM slot (the largest P the default tile keeps resident).
    default = arch.cuda_tiles if arch else Tiles(128, 64)
    probe = {}
    insts = []
    for pr in cases:
        for v in _variants(1, default):
            insts.append(instance_for(v, pr))
        insts.append(instance_for(_variants(1, default)[-3], pr, trace=True))
    t0 = time.perf_counter()
    precompile(insts)
    print(f"compiled {len(set(i.name for i in insts))} kernels in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)

    rows: list[Row] = []
    speed: list[tuple] = []
    drift_lines: list[str] = []
    resources: dict[str, tuple] = {}
    base_fields = dict(run=run_id, study="cuda_bench", arch=arch.name if arch else "unknown",
                       source=Source.MEASURED.value)
    for pr in cases:
        q, k, v = random_inputs(pr, seed=1234 + pr.D + pr.causal)
        ref = reference(q, k, v, pr.causal)
        if pr not in probe:   # P = CTAs resident at once, for both persistent builds
            probe[pr] = min(backend.prepare(v, pr).resident_ctas
                            for v in _variants(1, default)[-3:])
        fns, notes, prepared = {}, {}, {}
        for var in _variants(probe[pr], default):
            try:
                p = backend.prepare(var, pr)
            except Exception as e:   # report and go on: one run must give the whole picture
                print(f"  {var.id(pr):<44} {pr.label:<32} NOT RUN: {e}", flush=True)
                continue
            out = poisoned_like(q)
            backend.run(p, q, k, v, out)
            torch.cuda.synchronize()
            res = check(out, q, k, v, pr.causal, ref=ref)
            vid = var.id(pr)
            notes[vid] = "" if res.passed else f"CORRECTNESS {res}"
            print(f"  {vid:<44} {pr.label:<32} {res}", flush=True)
            o = torch.empty_like(q)
            fns[vid] = (lambda p=p, o=o, q=q, k=k, v=v: backend.run(p, q, k, v, o))
            prepared[vid] = (var, p)
            resources[p.instance.name] = (p.registers, p.local_bytes, p.smem_bytes, p.threads,
                                          p.ctas_per_sm)
        peers = sdpa_peers(q, k, v, pr.causal)
        samples = time_interleaved({**fns, **peers}, reps=args.reps, l2="cold")
        for name, s in samples.items():
            var_p = prepared.get(name)
            if var_p:
                var, p = var_p
                f = case_fields(pr, var)
            else:
                f = case_fields(pr) | dict(variant=name, backend="torch", order="", schedule="",
                                           occupancy=None, tile_m=0, tile_n=0)
            f |= base_fields
            note = notes.get(name, "")
            for i, ms in enumerate(s.ms):
                rows.append(Row(**f, metric=Metric.KERNEL_TIME_MS, value=ms, unit="ms",
                                sample=i, note=note))
            rows.append(Row(**f, metric=Metric.TFLOPS, value=s.tflops(pr.flops), unit="TFLOP/s",
                            note=f"median of {len(s.ms)}, spread {s.spread:.3f}; {note}".strip()))
            if var_p:
                for metric, val, unit in (("registers", p.registers, "register"),
                                          ("local_bytes", p.local_bytes, "byte"),
                                          ("smem_bytes", p.smem_bytes, "byte"),
                                          ("ctas_per_sm", p.ctas_per_sm, "CTA")):
                    rows.append(Row(**f, metric=metric, value=float(val), unit=unit,
                                    note=p.instance.name))
            speed.append((pr, name, s.tflops(pr.flops), s.spread, note))
        try:
            drows, line = _drift_rows(backend, _variants(probe[pr], default)[-3], pr, q, k, v,
                                      base_fields)
            rows += drows
            drift_lines.append(line)
        except Exception as e:   # the speed table still gets printed
            drift_lines.append(f"{pr.label}: drift measurement failed: {e}")
        del q, k, v, ref
        torch.cuda.empty_cache()

    args.out.parent.mkdir(parents=True, exist_ok=True)
    n = write_csv(args.out, rows)
    manifest = args.out.with_suffix(".json")
    manifest.write_text(json.dumps(_manifest(run_id, args, arch), indent=1) + "\n")
    print(f"\nwrote {n} rows to {args.out}, environment to {manifest}")

    print("\nresources per instantiation (registers/thread, local B/thread, smem B/CTA, "
          "threads, CTAs/SM):")
    for name, (r, l, s, t, c) in sorted(resources.items()):
        print(f"  {r:>3} reg {l:>4} local {s:>6} smem {t:>4} thr {c} CTA/SM  {name}")

    print("\nlock-step check (trace build, persistent linear, all CTAs resident):")
    for line in drift_lines:
        print("  " + line)

    print(f"\nTFLOPS (median of {args.reps}, cold L2) on {props.name}; ratio to sdpa-flash / "
          "sdpa-cudnn of the same case:")
    for pr in cases:
        mine = [x for x in speed if x[0] == pr]
        ref_t = {x[1]: x[2] for x in mine}
        fl, cu = ref_t.get("sdpa-flash"), ref_t.get("sdpa-cudnn")
        print(f"  {pr.label}")
        for _, name, tf, spread, note in sorted(mine, key=lambda x: -x[2]):
            rf = f"{tf / fl:5.2f}x" if fl else "   - "
            rc = f"{tf / cu:5.2f}x" if cu else "   - "
            print(f"    {name:<44} {tf:7.1f}  ±{spread * 100:4.1f}%  {rf} {rc} {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

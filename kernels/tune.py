"""Search tiles × occupancy × worker warps × schedule per (D, causal) and write the arch's JSON.

    python -m kernels.tune --arch h100 [--seq 16384] [--out kernels/configs/h100.json]

Uses ``ct.tune.exhaustive_search`` (L2 flushed before every run) on B=1, H=16, fp16, one sequence
length, over candidates that compile without spills on sm_90 (checked on CPU by
tests/cpu/test_cutile_compile.py for the chosen defaults). Runs read the JSON; they never autotune.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from spec import arch as arch_registry

from .config import CONFIG_DIR, SCHEMA, KernelConfig, config_key


@dataclass(frozen=True)
class Candidate:
    tile_m: int
    tile_n: int
    occupancy: int
    worker_warps: int | None
    schedule: str          # "persistent" (P = SMs × occupancy) or "grid"

    def config(self) -> KernelConfig:
        return KernelConfig(self.tile_m, self.tile_n, self.occupancy, self.worker_warps,
                            self.schedule)


# Spill-free on sm_90 (cuobjdump -res-usage of JIT-like exports, linear and sawtooth): (tile_m,
# tile_n, occupancy, worker_warps[, schedules]); 128x128 with 8 worker warps at D=128 non-causal
# spills in the persistent linear build (176 B), so it is a grid-only candidate.
_BOTH = ("persistent", "grid")
_BASE = {
    (64, False): [(64, 64, 2, None), (128, 64, 2, None), (128, 64, 1, None), (128, 128, 1, None),
                  (128, 128, 1, 8), (64, 64, 1, 8)],
    (64, True): [(64, 64, 2, None), (128, 64, 2, None), (128, 64, 1, None), (128, 128, 1, 8)],
    (128, False): [(64, 64, 2, None), (128, 64, 2, None), (128, 64, 1, None), (64, 64, 1, 8),
                   (128, 64, 1, 8), (128, 128, 1, 8, ("grid",))],
    (128, True): [(64, 64, 1, 8), (128, 64, 1, None), (128, 128, 1, 8)],
}
SM90_CANDIDATES = {k: [Candidate(*c[:4], s) for c in v for s in (c[4] if len(c) > 4 else _BOTH)]
                   for k, v in _BASE.items()}


def candidates(arch: str, D: int, causal: bool) -> list[Candidate]:
    a = arch_registry.get(arch)
    if a.sm == "sm_90":
        return SM90_CANDIDATES[(D, causal)]
    t = a.cutile_tiles
    return [Candidate(t.m, t.n, occ, None, s) for occ in (1, 2) for s in ("persistent", "grid")]


def tune_one(arch, D: int, causal: bool, S: int, H: int = 16, quiet: bool = False):
    import cuda.tile as ct
    import torch

    from experiments.correctness import random_inputs
    from spec import Problem
    from spec.orders import ScanOrder
    from spec.variant import Backend, Variant

    from . import fmha
    from .backend import CutileBackend, default_schedule
    problem = Problem(B=1, H=H, S_q=S, D=D, causal=causal)
    q, k, v = random_inputs(problem, seed=0)
    out = torch.empty_like(q)
    trace = torch.zeros((1, 1, 4), dtype=torch.int32, device="cuda")
    be = CutileBackend()
    prepared = {}
    for c in candidates(arch.name, D, causal):
        cfg = c.config()
        sched = default_schedule(problem, cfg, cfg.tiles, arch.num_sms)
        var = Variant(Backend.CUTILE, ScanOrder.linear(), sched, cfg.tiles, c.occupancy)
        p = be.prepare(var, problem)
        prepared[c] = p
    result = ct.tune.exhaustive_search(
        list(prepared), torch.cuda.current_stream(),
        grid_fn=lambda c: (prepared[c].n_ctas, 1, 1),
        kernel=lambda c: fmha.get_kernel(c.occupancy, c.worker_warps),
        args_fn=lambda c: (q, k, v, out, trace, prepared[c].qk_scale) + prepared[c].consts
        + (False,),
        quiet=quiet)
    flops = problem.flops
    table = sorted(((m.mean_us, c) for c, m in
                    ((m.config, m) for m in result.successes)), key=lambda t: t[0])
    return result.best.config, [(c, us, flops / (us * 1e-6) / 1e12) for us, c in table], \
        [str(f) for f in getattr(result, "failures", [])]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, help=f"one of {', '.join(arch_registry.known())}")
    ap.add_argument("--seq", type=int, default=16384, help="sequence length tuned at")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default "
                    "kernels/configs/<arch>.json)")
    ap.add_argument("--only", default=None, help="comma list of keys, e.g. d64.full,d128.causal")
    ap.add_argument("--warm", action="store_true", help="compile candidates in parallel first")
    args = ap.parse_args(argv)

    from .backend import _check_arch
    arch = _check_arch(args.arch)
    out = args.out or CONFIG_DIR / f"{arch.name}.json"
    keys = [(D, c) for D in (64, 128) for c in (False, True)]
    if args.only:
        want = set(args.only.split(","))
        keys = [k for k in keys if config_key(*k) in want]
    if args.warm:
        from .warm import Job, warm
        jobs = [Job(1, 16, 16, args.seq, args.seq, D, "fp16", causal, "linear",
                    "grid" if c.schedule == "grid" else f"static{arch.num_sms * c.occupancy}",
                    c.tile_m, c.tile_n, c.occupancy)
                for D, causal in keys for c in candidates(arch.name, D, causal)
                if c.worker_warps is None]
        t0 = time.time()
        errs = warm(jobs)
        print(f"warm: {len(jobs)} compiles in {time.time() - t0:.0f}s, {len(errs)} errors",
              *errs, sep="\n", flush=True)
    existing = json.loads(out.read_text()) if out.exists() else {}
    configs = dict(existing.get("configs", {}))
    measured = dict(existing.get("measured", {}))
    for D, causal in keys:
        key = config_key(D, causal)
        t0 = time.time()
        best, table, failures = tune_one(arch, D, causal, args.seq, quiet=True)
        configs[key] = best.config().to_json()
        measured[key] = [dict(c.config().to_json(), us=round(us, 2), tflops=round(tf, 1))
                         for c, us, tf in table]
        print(f"{key}: best {best} ({time.time() - t0:.0f}s)", flush=True)
        for c, us, tf in table:
            print(f"   {c.tile_m}x{c.tile_n} occ{c.occupancy} ww{c.worker_warps} "
                  f"{c.schedule:10s} {us:9.1f} us {tf:6.1f} TFLOPS")
        for f in failures:
            print("   failed:", f)
    import torch
    doc = {"schema": SCHEMA, "arch": arch.name, "device": torch.cuda.get_device_name(),
           "source": f"python -m kernels.tune --arch {arch.name} --seq {args.seq} "
                     f"(ct.tune.exhaustive_search, B=1 H=16 fp16, L2 flushed)",
           "configs": configs, "measured": measured}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

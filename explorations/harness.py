"""The measurement both explorations share: candidates beside the production kernel and SDPA.

For each (D, S) problem (B=1, H=16, fp16, non-causal): fresh seeded inputs, the fp32 reference,
the production kernel (``prod``: 128×128 tiles, occupancy 1, grid launch) and every candidate run
once on a NaN-poisoned output and checked (experiments.measurement.correctness); those that pass
are timed interleaved with ``prod`` and SDPA's flash and cuDNN backends, cold L2
(experiments.measurement.timing). Prints one line per contender and problem, TFLOPS and the ratio
to cuDNN.
"""
from __future__ import annotations

import time
from typing import Callable

# (q, k, v, out, D) -> a launcher with its arguments bound
MakeLauncher = Callable[..., Callable[[], None]]


def compare(problems: list[tuple[int, int]], candidates: dict[str, MakeLauncher], *, seed: int,
            reps: int = 15, warmup: int = 3) -> list[str]:
    import torch

    from experiments.measurement.correctness import check, poisoned_like, random_inputs, reference
    from experiments.measurement.timing import sdpa_peers, time_interleaved
    from kernels.host.backend import CutileFamily
    from spec import Backend, CtaSchedule, Problem, ScanOrder, Tiles, Variant

    be = CutileFamily()
    lines = []
    for D, S in problems:
        problem = Problem(B=1, H=16, S_q=S, D=D, causal=False)
        q, k, v = random_inputs(problem, seed)
        ref = reference(q, k, v, False)
        var = Variant(Backend.CUTILE, ScanOrder.linear(), CtaSchedule.grid(), Tiles(128, 128), 1)
        p = be.prepare(var, problem)
        out0 = poisoned_like(q)
        be.run(p, q, k, v, out0)
        torch.cuda.synchronize()
        print("prod", check(out0, q, k, v, False, ref), flush=True)
        fns = {"prod": lambda p=p, o=out0, q=q, k=k, v=v: be.run(p, q, k, v, o)}
        for name, make in candidates.items():
            out = poisoned_like(q)
            try:
                t0 = time.time()
                fn = make(q, k, v, out, D)
                fn()
                torch.cuda.synchronize()
                verdict = check(out, q, k, v, False, ref)
                print(name, f"{time.time() - t0:.1f}s", verdict, flush=True)
                if verdict.passed:
                    fns[name] = fn
            except Exception as e:  # noqa: BLE001 - a candidate that does not compile is reported
                print(name, "FAILED", type(e).__name__, str(e)[:400], flush=True)
        fns |= sdpa_peers(q, k, v, False)
        s = time_interleaved(fns, reps=reps, warmup=warmup, l2="cold")
        cudnn = s["sdpa-cudnn"].tflops(problem.flops)
        for n, x in s.items():
            tf = x.tflops(problem.flops)
            lines.append(f"D={D} S={S // 1024}K {n:18s} {tf:7.1f} TFLOPS ±{100 * x.spread:.1f}%  "
                         f"x_cudnn {tf / cudnn:.3f}")
            print(lines[-1], flush=True)
        del q, k, v, ref
        torch.cuda.empty_cache()
    print("\n".join(lines))
    return lines

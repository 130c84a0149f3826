"""Where a small training step's time goes: per forward + backward call, each kernel's GPU time
(torch.profiler, CUPTI) and the wall time of the call loop, cuTile against SDPA cuDNN; with
``--cprofile`` the host functions of cuTile's call instead (cProfile, ``--calls`` calls).

    python -m explorations.train_step_profile [--calls 20] [--cprofile | --host | --burst]

``--host``: the host's time of each part of a step, alone (each call made while the GPU is held
by a spin, ``time_interleaved``'s hold, so it measures enqueueing, never the kernels): the whole
step, the forward, the backward on a retained graph, and the pieces of cuTile's backward call
(``attention_backward``; its prepared launches alone on given buffers; each pass's
``ct.launch`` alone; one allocation).

``--burst``: the same parts, two floors (a Python ``autograd.Function`` whose forward and
backward only allocate; an aten op's step, ``neg``) and the eager call as it was before its
backward was prepared on the forward's launch (``unprepared``), each timed as bursts of ``BURST``
calls back to back behind one GPU hold, perf_counter only (no events inside the burst: what a
training loop's host pays per call, warm CPU caches), the parts alternated, median of
``--calls`` bursts and of each round's step ratios; then cProfile of cuTile's step on the last
problem (not with ``--steps-only``).

Problems: the training benchmark's lowest cuDNN ratios on an H200
(``experiments.speed.cutile_backward_bench``, speed phase). Wall per call far above the kernels'
sum: host-bound; near it: the kernels."""
from __future__ import annotations

import argparse
import collections
import sys
import time

PROBLEMS = ("b1h32g8s1537d128.bf16.causal", "b1h32g8s1024kv6000d128.bf16.causal",
            "b1h64g8s2049d128.bf16.causal", "b8h16s1024d64.fp16.full",
            "b32h12s257d64.bf16.full", "b1h32g8s2048kv16384d128.bf16.full")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m explorations.train_step_profile")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--cprofile", action="store_true")
    ap.add_argument("--host", action="store_true")
    ap.add_argument("--burst", action="store_true")
    ap.add_argument("--problems", type=int, default=len(PROBLEMS),
                    help="--burst: the first N problems only")
    ap.add_argument("--steps-only", action="store_true",
                    help="--burst: whole steps only (and the floors), no parts, no cProfile")
    a = ap.parse_args(argv)
    if a.host:
        return host_parts(a.calls)
    if a.burst:
        return burst_parts(a.calls, a.problems, a.steps_only)
    import torch
    from torch.profiler import ProfilerActivity, profile

    from experiments.registry.suites import model_problems
    from experiments.speed.cutile_backward_bench import step_inputs, step_launchers
    probs = [p for _, _, p in model_problems() if p.label in PROBLEMS]
    for pr in probs:
        q, k, v, dout = step_inputs(pr, grad=True)
        for name, attn in step_launchers(pr).items():
            if name == "flash":
                continue

            def step(attn=attn):
                out = attn(q, k, v)
                return torch.autograd.grad(out, (q, k, v), dout)
            for _ in range(3):
                step()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(a.calls):
                step()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) * 1e3 / a.calls
            if a.cprofile:
                if name == "cutile":
                    import cProfile
                    import pstats
                    cp = cProfile.Profile()
                    def loop(step=step):    # results dropped: a kept list of gradients
                        for _ in range(a.calls):   # makes every allocation a new cudaMalloc
                            step()
                    cp.runcall(loop)
                    st = pstats.Stats(cp)
                    st.sort_stats("tottime").print_stats(15)
                    st.sort_stats("cumtime").print_stats(30)
                continue
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(a.calls):
                    step()
                torch.cuda.synchronize()
            kern = collections.Counter()
            for e in prof.events():
                if e.device_type.name == "CUDA":
                    kern[e.name[:60]] += e.device_time / 1e3 / a.calls
            total = sum(kern.values())
            print(f"{pr.label:38} {name:7} wall {wall:.3f} ms/call, kernels {total:.3f} ms "
                  f"({len(kern)} kinds)")
            for kname, ms in kern.most_common(6):
                print(f"    {ms:.4f} ms  {kname}")
        q = k = v = dout = None
        torch.cuda.empty_cache()
    return 0


def _part_fns(pr, q, k, v, dout, launchers: dict, steps_only: bool = False) -> dict:
    """{part: call} of one problem: each launcher's whole step and, unless ``steps_only``, its
    forward, its backward on a retained graph, and the pieces of cuTile's backward call
    (``attention_backward``; its prepared launches alone on given buffers; each pass's
    ``ct.launch`` alone, ``BackwardLaunch.passes``; one allocation)."""
    import torch

    from kernels.host import backend, backward
    from kernels.host.backend import default_variant
    from spec.arch import detect
    fns = {}
    for name, attn in launchers.items():
        try:
            out = attn(q, k, v)
        except RuntimeError as e:           # a peer that refuses the problem
            print(f"{pr.label:38} {name}: {str(e).splitlines()[0][:80]}")
            continue
        fns[f"{name} step"] = lambda attn=attn: torch.autograd.grad(attn(q, k, v), (q, k, v),
                                                                    dout)
        if not steps_only:
            fns[f"{name} forward"] = lambda attn=attn: attn(q, k, v)
            fns[f"{name} backward"] = lambda out=out: torch.autograd.grad(
                out, (q, k, v), dout, retain_graph=True)
    if steps_only:
        return fns
    lse = backward.stat_buffer(q)
    with torch.no_grad():
        o = backend.attention(q, k, v, causal=pr.causal, lse=lse)
    fns["cutile attention_backward"] = lambda: backward.attention_backward(
        dout, q, k, v, o, lse, causal=pr.causal)
    launch = backward.launch_for(pr, default_variant(pr, detect(), training=True).backward)
    bufs = (backward.stat_buffer(q), torch.empty_like(q), torch.empty_like(k),
            torch.empty_like(v))
    fns["cutile launches alone"] = lambda: launch(dout, q, k, v, o, lse, *bufs)
    for name, fn in launch.passes(dout, q, k, v, o, lse, *bufs).items():
        fns[f"cutile ct.launch {name}"] = fn
    fns["torch.empty_like(q)"] = lambda: torch.empty_like(q)
    fns["stat_buffer(q)"] = lambda: backward.stat_buffer(q)
    return fns


def host_parts(calls: int) -> int:
    """Print the host's µs per call of each part of a step, per problem and launcher."""
    import torch

    from experiments.measurement.timing import time_interleaved
    from experiments.registry.suites import model_problems
    from experiments.speed.cutile_backward_bench import step_inputs, step_launchers
    for pr in [p for _, _, p in model_problems() if p.label in PROBLEMS]:
        q, k, v, dout = step_inputs(pr, grad=True)
        fns = _part_fns(pr, q, k, v, dout, step_launchers(pr))
        held = time_interleaved(fns, reps=calls, warmup=2, l2="warm")
        for name, smp in held.items():
            print(f"{pr.label:38} {name:28} host {1e3 * smp.host_median:7.1f} us")
        q = k = v = dout = fns = held = None
        torch.cuda.empty_cache()
    return 0


BURST = 16
"""Calls per burst: their launches fit the launch queue behind the hold."""


def _burst_us(fn, hold_cycles: int) -> float:
    import time

    import torch
    torch.cuda.synchronize()
    torch.cuda._sleep(hold_cycles)
    t0 = time.perf_counter()
    for _ in range(BURST):
        fn()
    t = time.perf_counter() - t0
    torch.cuda.synchronize()
    return t * 1e6 / BURST


def _floor_function():
    """A Python autograd.Function that only allocates: the floor of any Python-defined op."""
    import torch

    class Floor(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            ctx.save_for_backward(q, k, v)
            return torch.empty_like(q)

        @staticmethod
        def backward(ctx, dout):
            q, k, v = ctx.saved_tensors
            return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    return Floor.apply


def _unprepared_step(causal: bool):
    """cuTile's eager training call as it was before the backward was prepared on the
    forward's launch (``spec.front`` at f21e5d6): an autograd.Function given every argument,
    the family's forward, then ``attention_backward``'s keyed lookup in the backward. The A
    of the A/B against ``kernels.attention``."""
    import torch
    from torch.autograd.function import once_differentiable

    from kernels import attention
    fam = attention.family

    class Unprepared(torch.autograd.Function):
        @staticmethod
        def forward(ctx, fam, q, k, v, causal, order, schedule, tiles, scale, border,
                    bschedule, btiles, knobs):
            out, lse = fam.forward(q, k, v, None, True, causal, order, schedule, tiles, scale,
                                   **knobs)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.fam, ctx.args = fam, (causal, scale, border, bschedule, btiles, knobs)
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, dout):
            q, k, v, out, lse = ctx.saved_tensors
            causal, scale, border, bschedule, btiles, knobs = ctx.args
            dq, dk, dv = ctx.fam.backward(dout, q, k, v, out, lse, causal, scale, border,
                                          bschedule, btiles, **knobs)
            return (None, dq, dk, dv) + (None,) * 9

    knobs = dict(fam.knobs)
    return lambda q, k, v: Unprepared.apply(fam, q, k, v, causal, "linear", None, None, None,
                                            "linear", None, None, knobs)


def burst_parts(bursts: int, n_problems: int = len(PROBLEMS), steps_only: bool = False) -> int:
    """Print the host's us per call of each part, timed in bursts (``--burst``), the parts
    alternated burst by burst; then, per problem, the median over rounds of each round's
    step ratios (adjacent bursts: the host's drift, which moves every launcher alike over
    seconds, cancels)."""
    import cProfile
    import pstats
    import statistics

    import torch

    from experiments.measurement.timing import spin_cycles_per_ms
    from experiments.registry.suites import model_problems
    from experiments.speed.cutile_backward_bench import step_inputs, step_launchers
    hold = int(60 * spin_cycles_per_ms())          # 60 ms: 16 steps of the slowest host
    floor = _floor_function()
    last = None
    ratios = {}
    for pr in [p for _, _, p in model_problems() if p.label in PROBLEMS][:n_problems]:
        q, k, v, dout = step_inputs(pr, grad=True)
        launchers = dict(step_launchers(pr), unprepared=_unprepared_step(pr.causal))
        fns = _part_fns(pr, q, k, v, dout, launchers, steps_only)
        fns["floor: python Function step"] = lambda: torch.autograd.grad(
            floor(q, k, v), (q, k, v), dout)
        fns["floor: aten neg step"] = lambda: torch.autograd.grad(q.neg(), (q,), dout)
        for fn in fns.values():
            fn()
            fn()
        times = {n: [] for n in fns}
        for _ in range(bursts):
            for n, fn in fns.items():
                times[n].append(_burst_us(fn, hold))
        for n, t in times.items():
            print(f"{pr.label:38} {n:30} host {statistics.median(t):7.1f} us "
                  f"(min {min(t):.1f})")
        for a, b in (("cutile", "cudnn"), ("cutile", "flash"), ("cutile", "unprepared")):
            if f"{b} step" in times:
                ratios[(pr.label, a, b)] = statistics.median(
                    x / y for x, y in zip(times[f"{a} step"], times[f"{b} step"]))
        last = (fns["cutile step"],)       # its closure reads this scope's q, k, v, dout
        fns = None
        torch.cuda.empty_cache()
    print("\nhost per step, median over rounds of the round's ratio:")
    for (label, a, b), r in ratios.items():
        print(f"{label:38} {a}/{b} {r:.3f}")
    for a, b in (("cutile", "cudnn"), ("cutile", "flash"), ("cutile", "unprepared")):
        rs = [r for (_, x, y), r in ratios.items() if (x, y) == (a, b)]
        if rs:
            print(f"{'geometric mean':38} {a}/{b} {statistics.geometric_mean(rs):.3f} "
                  f"(max {max(rs):.3f})")
    if steps_only:
        return 0
    cp = cProfile.Profile()

    def loop():
        for _ in range(BURST):
            last[0]()
    for _ in range(10):
        torch.cuda._sleep(hold)
        cp.runcall(loop)
        torch.cuda.synchronize()
    st = pstats.Stats(cp)
    st.sort_stats("tottime").print_stats(40)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a small training step's time goes: per forward + backward call, each kernel's GPU time
(torch.profiler, CUPTI) and the wall time of the call loop, cuTile against SDPA cuDNN; with
``--cprofile`` the host functions of cuTile's call instead (cProfile, ``--calls`` calls).

    python -m explorations.train_step_profile [--calls 20] [--cprofile | --host]

``--host``: the host's time of each part of a step, alone (each call made while the GPU is held
by a spin, ``time_interleaved``'s hold, so it measures enqueueing, never the kernels): the whole
step, the forward, the backward on a retained graph, and the pieces of cuTile's backward call
(``attention_backward``; its prepared launches alone on given buffers; one ``ct.launch``; one
allocation).

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
    a = ap.parse_args(argv)
    if a.host:
        return host_parts(a.calls)
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


def host_parts(calls: int) -> int:
    """Print the host's µs per call of each part of a step, per problem and launcher."""
    import torch

    from experiments.measurement.timing import time_interleaved
    from experiments.registry.suites import model_problems
    from experiments.speed.cutile_backward_bench import step_inputs, step_launchers
    from kernels.host import backward
    for pr in [p for _, _, p in model_problems() if p.label in PROBLEMS]:
        q, k, v, dout = step_inputs(pr, grad=True)
        fns = {}
        for name, attn in step_launchers(pr).items():
            try:
                out = attn(q, k, v)
            except RuntimeError as e:           # a peer that refuses the problem
                print(f"{pr.label:38} {name}: {str(e).splitlines()[0][:80]}")
                continue
            fns[f"{name} step"] = lambda attn=attn: torch.autograd.grad(attn(q, k, v),
                                                                        (q, k, v), dout)
            fns[f"{name} forward"] = lambda attn=attn: attn(q, k, v)
            fns[f"{name} backward"] = lambda out=out: torch.autograd.grad(
                out, (q, k, v), dout, retain_graph=True)
        lse = backward.stat_buffer(q)
        from kernels.host import backend
        with torch.no_grad():
            o = backend.attention(q, k, v, causal=pr.causal, lse=lse)
        fns["cutile attention_backward"] = lambda: backward.attention_backward(
            dout, q, k, v, o, lse, causal=pr.causal)
        from kernels.host.backend import default_variant
        from spec.arch import detect
        launch = backward.launch_for(pr, default_variant(pr, detect(), training=True).backward)
        bufs = (backward.stat_buffer(q), torch.empty_like(q), torch.empty_like(k),
                torch.empty_like(v))
        fns["cutile launches alone"] = lambda: launch(dout, q, k, v, o, lse, *bufs)
        first = launch.prep if launch.config.one_pass else launch.dq
        kern, grid, tail = first
        args = ((o, dout, bufs[0], torch.empty(q.shape, dtype=torch.float32, device=q.device))
                if launch.config.one_pass else (q, k, v, o, dout, lse) + bufs[:2])
        fns["cutile one ct.launch"] = lambda: launch.launch(
            launch.raw_stream(launch.device), grid, kern, args + tail)
        fns["torch.empty_like(q)"] = lambda: torch.empty_like(q)
        fns["stat_buffer(q)"] = lambda: backward.stat_buffer(q)
        held = time_interleaved(fns, reps=calls, warmup=2, l2="warm")
        for name, smp in held.items():
            print(f"{pr.label:38} {name:28} host {1e3 * smp.host_median:7.1f} us")
        q = k = v = dout = fns = held = None
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())

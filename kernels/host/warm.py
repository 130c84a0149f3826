"""Compile many variants in parallel before a run, so timing loops and tests hit the disk cache.

The JIT compiles at the first launch, one variant at a time (0.5-6 s each). ``warm`` launches each
job once in a pool of worker processes on small tensors with the *same specialisation facts*
(size-1 dims, divisibility by 16) as the real ones, which fills ``$CUDA_TILE_CACHE_DIR``; the
real launch then finds the cubin there. Purely an optimisation: a miss only costs a compile.
"""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass


@dataclass(frozen=True)
class Job:
    B: int
    H: int
    H_kv: int
    S_q: int
    S_kv: int
    D: int
    dtype: str
    causal: bool
    order: str
    schedule: str
    tile_m: int
    tile_n: int
    occupancy: int | None = None
    level: int = 6
    trace: bool = False
    worker_warps: int | None = None   # a tuning candidate's hint (None: the arch's default's)
    tactic: int = 0                   # a tuning candidate's kernels.device.fmha TACTIC bits


def _small(s: int) -> int:
    """A small length with the same JIT facts as ``s`` (divisible by 16 or not; 1 stays 1).
    Lengths up to 2048 (the GPU tests' problems) are kept as they are: the trace build's buffer
    has a step dimension that follows S, and its strides' divisibility is a JIT fact too, so a
    shrunk S can miss the cache entry the real launch needs."""
    if s == 1 or s <= 2048:
        return s
    return 256 if s % 16 == 0 else 256 + (s % 16)


def _run(jobs: list[Job]) -> list[str]:
    import torch

    from kernels.host.backend import CutileFamily
    from kernels.rules.config import KernelConfig
    from spec import Problem
    from spec.orders import ScanOrder
    from spec.problem import Tiles
    from spec.schedules import CtaSchedule
    from spec.variant import Backend, Variant
    errors = []
    for j in jobs:
        try:
            p = Problem(B=j.B, H=j.H, H_kv=j.H_kv, S_q=_small(j.S_q), S_kv=_small(j.S_kv), D=j.D,
                        dtype=j.dtype, causal=j.causal)
            dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[j.dtype]
            q = torch.randn(p.B, p.H, p.S_q, p.D, device="cuda", dtype=dt)
            k = torch.randn(p.B, p.H_kv, p.S_kv, p.D, device="cuda", dtype=dt)
            v = torch.randn_like(k)
            out = torch.empty_like(q)
            sched = CtaSchedule.parse(j.schedule)
            var = Variant(Backend.CUTILE, ScanOrder.parse(j.order), sched,
                          Tiles(j.tile_m, j.tile_n), j.occupancy,
                          None if j.level == 6 else j.level)
            fam = (CutileFamily() if j.worker_warps is None and not j.tactic else CutileFamily(
                defaults=KernelConfig(j.tile_m, j.tile_n, j.occupancy, j.worker_warps,
                                      tactic=j.tactic)))
            prep = fam.prepare(var, p)      # also exports the build and reads its resources
            if j.trace:
                fam.trace(prep, q, k, v, out)
            else:
                fam.run(prep, q, k, v, out)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - reported, the real run will raise properly
            errors.append(f"{j}: {type(e).__name__}: {str(e)[:300]}")
    return errors


def in_processes(run, jobs, workers: int | None) -> list[str]:
    """``run`` over the distinct ``jobs`` dealt to ``workers`` spawned processes; the error
    strings of every chunk (empty when all built)."""
    import multiprocessing as mp
    jobs = list(dict.fromkeys(jobs))
    if not jobs:
        return []
    workers = workers or min(12, max(1, (os.cpu_count() or 2) - 2), len(jobs))
    chunks = [jobs[i::workers] for i in range(workers)]
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx) as ex:
        return [e for errs in ex.map(run, chunks) for e in errs]


def warm(jobs, workers: int | None = None) -> list[str]:
    """Compile ``jobs`` in ``workers`` processes; returns error strings (empty when all built)."""
    return in_processes(_run, jobs, workers)


def _run_training(jobs: list) -> list[str]:
    """Each (Problem, BackwardConfig or None) job: the training forward and the backward once on
    a small problem with the same JIT facts (``_small``), which compiles their builds."""
    from dataclasses import replace

    import torch

    from kernels.host import backend, backward
    from spec import detect
    errors = []
    for pr, cfg in jobs:
        try:
            p = replace(pr, S_q=_small(pr.S_q), S_kv=_small(pr.S_kv))
            dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[p.dtype.value]
            q = torch.randn(p.B, p.H, p.S_q, p.D, device="cuda", dtype=dt)
            k = torch.randn(p.B, p.H_kv, p.S_kv, p.D, device="cuda", dtype=dt)
            v = torch.randn_like(k)
            # the forward configuration of the real problem, on the small one
            arch = detect()
            var = backend.default_variant(pr, arch)  # with its compile hints, on the small one
            launch = backend.Launch(backend.family_for(pr, arch).prepare(var, p),
                                    torch.cuda.current_device(), None, True)
            lse = backward.stat_buffer(q)
            out = torch.empty_like(q)
            launch(q, k, v, out, lse)
            backward.attention_backward(torch.randn_like(q), q, k, v, out, lse, causal=p.causal,
                                        config=cfg)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - reported, the real run will raise properly
            errors.append(f"{pr.label} {cfg}: {type(e).__name__}: {str(e)[:300]}")
    return errors


def warm_training(jobs, workers: int | None = None) -> list[str]:
    """``warm`` for the training path: (Problem, BackwardConfig or None: the default) jobs."""
    return in_processes(_run_training, jobs, workers)


def _run_backward_traces(jobs: list) -> list[str]:
    """Each (Problem, BackwardConfig, pass name) job: the pass's trace build once
    (``kernels.host.backward.trace_backward``) on random tensors of the problem, which compiles
    it."""
    from dataclasses import replace

    import torch

    from kernels.host import backward
    errors = []
    for pr, cfg, name in jobs:
        try:
            p = replace(pr, S_q=_small(pr.S_q), S_kv=_small(pr.S_kv))
            dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[p.dtype.value]
            q, dout, out = (torch.randn(p.B, p.H, p.S_q, p.D, device="cuda", dtype=dt)
                            for _ in range(3))
            k, v = (torch.randn(p.B, p.H_kv, p.S_kv, p.D, device="cuda", dtype=dt)
                    for _ in range(2))
            lse = backward.stat_buffer(q).zero_()
            backward.trace_backward(name, dout, q, k, v, out, lse, causal=p.causal, config=cfg)
        except Exception as e:  # noqa: BLE001 - reported, the real run will raise properly
            errors.append(f"{pr.label} {cfg} {name}: {type(e).__name__}: {str(e)[:300]}")
    return errors


def warm_backward_traces(jobs, workers: int | None = None) -> list[str]:
    """``warm`` for the backward's trace builds: (Problem, BackwardConfig, "dkdv" or "dq")
    jobs."""
    return in_processes(_run_backward_traces, jobs, workers)


@dataclass(frozen=True)
class DecodeJob:
    """One split-K/V decode build (``kernels.host.decode``) as ``attention()`` launches it for
    this problem: ``splits`` the plan's (its value is a JIT fact of the partial buffers)."""
    B: int
    H: int
    H_kv: int
    S_q: int
    S_kv: int
    D: int
    dtype: str
    causal: bool
    splits: int
    lengths: bool = False      # kv_lengths given: bottom-right causal


def decode_job(problem, num_sms: int, lengths: bool = False) -> DecodeJob:
    from kernels.host.decode import plan
    p = problem
    return DecodeJob(p.B, p.H, p.H_kv, p.S_q, p.S_kv, p.D, p.dtype.value, p.causal,
                     plan(p, num_sms).splits, lengths)


def _run_decode(jobs: list) -> list[str]:
    import torch

    from kernels.host.backend import attention
    errors = []
    for j in jobs:
        try:
            dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[j.dtype]
            S = _small(j.S_kv)
            q = torch.randn(j.B, j.H, j.S_q, j.D, device="cuda", dtype=dt)
            k = torch.randn(j.B, j.H_kv, S, j.D, device="cuda", dtype=dt)
            lens = (torch.full((j.B,), S, dtype=torch.int32, device="cuda") if j.lengths
                    else None)
            attention(q, k, k, causal=j.causal, schedule=f"decode{j.splits}", kv_lengths=lens)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - reported, the real run will raise properly
            errors.append(f"{j}: {type(e).__name__}: {str(e)[:300]}")
    return errors


def warm_decode(jobs, workers: int | None = None) -> list[str]:
    """Compile the decode ``jobs`` (``DecodeJob``) in ``workers`` processes; error strings."""
    return in_processes(_run_decode, jobs, workers)

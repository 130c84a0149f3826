"""The CUDA twin's training path: the forward that also writes the log-sum-exp, and the backward
(flash_bwd.cu), each one cache lookup and a few driver launches per repeated call.

``forward(q, k, v, ...)`` returns ``(out, lse)``: ``lse`` is [B, H, S_q] fp32, the log-sum-exp
of the scaled scores in log2 units.
``backward(dout, q, k, v, out, lse, ...)`` returns ``(dq, dk, dv)`` in q's type, contiguous:

    Δ = rowsum(dO ∘ O)                                  flash_bwd_delta
    dK, dV per K/V tile, dQ reduced into fp32           flash_bwd_dkdv (the scan order / schedule)
    dQ = scale · dQaccum                                flash_bwd_dq

With grouped heads, a work item covers ``heads_per_cta`` query heads of one K/V head's group
(summing their dK, dV in registers); where the whole group per item leaves too few items to fill
the GPU (full attention) or too coarse a tail (causal: ``causal_makespan``), the group is split
in chunks whose fp32 partials are summed afterwards.

``trace_dkdv(dout, q, k, v, out, lse, ...)`` runs the dK/dV kernel's trace build once and returns
what it visited per CTA and step, and the spec schedule of its deal (``dkdv_spec_schedule``), to
compare with ``spec.backward_trace.backward_visits``.

Parameters are laid out once per launch key, as in ``cuda_baseline.host.launch``; only the tensor
addresses are written per call. Everything is issued on torch's current stream, so CUDA-graph
capture records it. dQ's fp32 reduction makes dQ's last bits depend on the order the CTAs reach
it (as FlashAttention 2's default backward).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace

import numpy as np

from cuda_baseline.build.bwd_source import (
    BwdInstance,
    BwdOption,
    bwd_compile_options,
    bwd_source_text,
    delta_name,
    dq_name,
    parse_bwd_options,
)
from cuda_baseline.build.source import CompileError
from cuda_baseline.host.backend import CudaFamily, check_strides, default_variant
from cuda_baseline.host.launch import Block
from spec import arch as arch_registry
from spec.family import BadInput, UnsupportedVariant, device_limits, problem_from_tensors
from spec.orders import OrderKind, ScanOrder
from spec.problem import Problem, Tiles, cdiv
from spec.schedules import CtaSchedule, ScheduleKind, WorkOrder

_FAMILY = CudaFamily()
_KERNELS: dict[tuple[int, str], object] = {}
_CACHE: dict = {}
i32, i64 = np.int32, np.int64


def lse_stride(S_q: int) -> int:
    """Row length of the LSE and Δ buffers ([B, H, S_q] fp32): rows padded to 16 bytes, the
    layout of both families' log-sum-exp (``spec.front.Family.lse_like``; the cuTile kernels
    read it with TMA copies, which need 16-byte row strides)."""
    return (S_q + 3) // 4 * 4


def _bwd_kernel(name: str, device: int, smem: int = 0):
    key = (device, name)
    if key not in _KERNELS:
        import cupy
        with cupy.cuda.Device(device):
            try:
                mod = cupy.RawModule(code=bwd_source_text(), options=bwd_compile_options(),
                                     name_expressions=[name])
                _KERNELS[key] = mod.get_function(name)
            except Exception as e:   # CompileException (NVRTC log) or a driver error
                raise CompileError(f"compiling {name} failed:\n{e}") from e
    k = _KERNELS[key]
    if smem > 48 * 1024:
        k.max_dynamic_shared_size_bytes = smem
    return k


def _aligned(*ts) -> None:
    for t in ts:
        if t.data_ptr() % 16:
            raise BadInput("q, k, v and the output gradient must start 16-byte aligned "
                           "(16-byte row copies); call .contiguous() or .clone()")


# --- forward with LSE ----------------------------------------------------------------------------

def _fwd_block(q, k, v, causal, order, schedule, tiles, scale):
    import torch
    problem = problem_from_tensors(q, k, v, causal)
    variant = default_variant(problem, arch_registry.detect(), order=order, schedule=schedule,
                              tiles=tiles, training=True).forward
    with torch.cuda.device(q.device):
        p = _FAMILY.prepare(variant, problem, lse=True)
    check_strides(q, k, v)
    o = torch.empty_like(q)
    base = _FAMILY._args(p, q, k, v, o, scale=scale)
    args = base[:4] + (np.uint64(0),) + base[4:-4] + (i32(lse_stride(problem.S_q)),)
    return Block(p.kernel.kernel.ptr, p.n_ctas, p.threads, p.smem_bytes, args, 5,
                 p.device_index), problem


def forward(q, k, v, causal: bool = False, order="linear", schedule=None, tiles=None,
            scale: float | None = None):
    """(out, lse) of the training forward; ``scale`` a positive float or None (1/sqrt(D))."""
    import torch
    key = ("fwd", q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype,
           k.device, v.shape, v.stride(), v.dtype, causal, order, schedule, tiles, scale)
    hit = _CACHE.get(key)
    if hit is None:
        hit = _CACHE[key] = _fwd_block(q, k, v, causal, order, schedule, tiles, scale)
    block, pr = hit
    _aligned(q, k, v)
    out = torch.empty_like(q)
    lse = torch.empty((pr.B, pr.H, lse_stride(pr.S_q)), dtype=torch.float32,
                      device=q.device)[..., :pr.S_q]
    with torch.cuda.device(q.device):
        block(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr())
    return out, lse


def _padded_rows(lse, pr: Problem):
    """``lse`` in the layout the kernels index ([B, H, S_q] rows of ``lse_stride``): as given
    when it is (the forward's), else copied into it (a caller's or a traced graph's contiguous
    copy)."""
    ls = lse_stride(pr.S_q)
    if lse.stride() == (pr.H * ls, ls, 1):
        return lse
    import torch
    buf = torch.empty((pr.B, pr.H, ls), dtype=torch.float32, device=lse.device)[..., :pr.S_q]
    buf.copy_(lse)
    return buf


def _delta_pass(pl: BwdPlan, delta, q, k, v, dout, out, lse):
    """The backward's first launch (on the current device): Δ = rowsum(dO ∘ O) into a padded
    buffer, which also zeroes the fp32 dQ accumulator. Returns (lse in the kernels' layout, the
    dQ accumulator, Δ)."""
    import torch
    pr = pl.problem
    lse = _padded_rows(lse, pr)
    _aligned(q, k, v, dout, out)
    dq_acc = torch.empty((pr.B, pr.H, pr.S_q, pr.D), dtype=torch.float32, device=q.device)
    dlt = torch.empty((pr.B, pr.H, lse_stride(pr.S_q)), dtype=torch.float32, device=q.device)
    delta(out.data_ptr(), dout.data_ptr(), dlt.data_ptr(), dq_acc.data_ptr())
    return lse, dq_acc, dlt


# --- backward ------------------------------------------------------------------------------------

ITEM_OVERHEAD_STEPS = 2
"""A dK/dV work item's fixed cost (its K, V tile load, its dK, dV store), in Q-tile steps, in
the causal makespan model of ``heads_per_cta``."""
NEAR_TIE = 1.02
"""Makespans within this factor of the best count as equal; the larger ``heads_per_cta`` (fewer
fp32 partials to sum) wins among them."""


def causal_makespan(pr: Problem, tiles: Tiles, hpc: int, num_sms: int) -> float:
    """Modelled duration, in Q-tile steps, of the causal dK/dV grid at ``hpc`` query heads per
    item: items issued in the kernel's order (K/V tile j slowest, tile j seeing the Q tiles from
    j·TILE_N/TILE_M on) to ``num_sms`` one-CTA slots, each item to the slot free first."""
    n_q, n_kv = cdiv(pr.S_q, tiles.m), cdiv(pr.S_kv, tiles.n)
    rest = pr.B * pr.H_kv * (pr.H // pr.H_kv // hpc)
    free = [0.0] * num_sms
    for j in range(n_kv):
        length = hpc * (n_q - min(j * tiles.n // tiles.m, n_q)) + ITEM_OVERHEAD_STEPS
        for _ in range(rest):
            heapq.heapreplace(free, free[0] + length)
    return max(free)


def heads_per_cta(pr: Problem, tiles: Tiles, num_sms: int) -> int:
    """Query heads per dK/dV work item. Full attention (equal items): the whole group (dK, dV
    summed in registers, no partials) unless that leaves fewer than two work items per SM; then
    the largest divisor of the group that reaches two per SM (or 1). Causal (items of unequal
    length, issued longest first): the divisor with the shortest ``causal_makespan``, the
    larger one among near ties (``NEAR_TIE``): splitting the group gives the tail more, shorter
    items, at the cost of fp32 partials."""
    group = pr.H // pr.H_kv
    divisors = sorted((d for d in range(1, group + 1) if group % d == 0), reverse=True)
    if pr.causal:
        spans = {d: causal_makespan(pr, tiles, d, num_sms) for d in divisors}
        best = min(spans.values())
        return next(d for d in divisors if spans[d] <= NEAR_TIE * best)
    n_kv = cdiv(pr.S_kv, tiles.n)
    for hpc in divisors:
        if pr.B * pr.H_kv * (group // hpc) * n_kv >= 2 * num_sms:
            return hpc
    return 1


@dataclass(frozen=True)
class BwdPlan:
    """What one backward launch key resolved to."""

    problem: Problem
    instance: BwdInstance
    heads_per_cta: int
    n_chunks: int
    n_work: int
    ctas: int


def plan(problem: Problem, order: ScanOrder, schedule: CtaSchedule | None,
         num_sms: int, tiles: Tiles | None = None,
         options: BwdOption = BwdOption(0)) -> BwdPlan:
    """The backward's build and grid for ``problem``: ``schedule`` None or grid (one K/V tile per
    CTA) or static<P> (P persistent CTAs; the Q scan of their successive items alternates under
    the sawtooth order); ``options`` the opt-in build options (``BwdOption``)."""
    if schedule is None or schedule.kind == ScheduleKind.GRID:
        kind = ScheduleKind.GRID
    elif schedule.kind == ScheduleKind.PERSISTENT:
        kind = ScheduleKind.PERSISTENT
    else:
        raise UnsupportedVariant(f"backward schedule {schedule.label!r}: the backward runs the "
                                 "grid launch or static<P>; pass backward_schedule='grid' or "
                                 "'static<P>'")
    if tiles is None:      # the backward's tiles read no arch
        tiles = default_variant(problem, None, order=order, training=True).backward
    try:
        inst = BwdInstance(order.kind, kind, tiles, problem.D, problem.causal, problem.dtype,
                           options)
    except ValueError as e:
        raise UnsupportedVariant(str(e)) from None
    if 2 * tiles.m > inst.threads:
        raise UnsupportedVariant(f"backward tiles {tiles.m}x{tiles.n}: TILE_N must be at least "
                                 "TILE_M (one thread per LSE and per Δ value of a Q tile)")
    hpc = heads_per_cta(problem, tiles, num_sms)
    chunks = problem.H // problem.H_kv // hpc
    n_work = problem.B * problem.H_kv * chunks * cdiv(problem.S_kv, tiles.n)
    ctas = n_work if kind == ScheduleKind.GRID else min(schedule.num_ctas, n_work)
    return BwdPlan(problem, inst, hpc, chunks, n_work, ctas)


def _bwd_blocks(q, k, v, dout, out, causal, order, schedule, scale, tiles, options,
                trace: bool = False):
    """(plan, Δ, dK/dV, dQ conversion) launches; ``trace``: the dK/dV launch is its trace build,
    whose record pointer (the second-last argument) ``trace_dkdv`` writes."""
    import torch
    problem = problem_from_tensors(q, k, v, causal, out)
    check_strides(q, k, v, out)

    order = order if isinstance(order, ScanOrder) else ScanOrder.parse(order)
    if schedule is not None and not isinstance(schedule, CtaSchedule):
        schedule = CtaSchedule.parse(schedule)
    dev = q.device.index
    lim = device_limits(dev)
    try:
        opts = options if isinstance(options, BwdOption) else parse_bwd_options(options)
    except ValueError as e:
        raise UnsupportedVariant(str(e)) from None
    pl = plan(problem, order, schedule, lim.num_sms,
              None if tiles is None else tiles if isinstance(tiles, Tiles) else Tiles(*tiles),
              opts)
    inst, pr = (replace(pl.instance, trace=True) if trace else pl.instance), problem
    if inst.smem_bytes > lim.smem_per_block_optin:
        raise UnsupportedVariant(f"{inst.name} needs {inst.smem_bytes} B of shared memory, over "
                                 f"this device's {lim.smem_per_block_optin} B per block")
    with torch.cuda.device(q.device):
        kd = _bwd_kernel(delta_name(pr.D, pr.dtype), dev)
        kk = _bwd_kernel(inst.name, dev, inst.smem_bytes)
        kq = _bwd_kernel(dq_name(pr.D, pr.dtype), dev)
    ls = lse_stride(pr.S_q)
    rows = pr.B * pr.H * pr.S_q
    tpr = pr.D // 8
    delta = Block(kd.kernel.ptr, cdiv(rows * tpr, 256), 256, 0,
                  (np.uint64(0),) * 4 + tuple(i64(s) for t in (out, dout) for s in t.stride()[:3])
                  + (i32(pr.H), i32(pr.S_q), i32(ls), i64(rows)), 4, dev)
    dkdv = Block(kk.kernel.ptr, pl.ctas, inst.threads, inst.smem_bytes,
                 (np.uint64(0),) * 9 + _dkdv_scalars(pl, order, scale, q, k, v, dout)
                 + ((np.uint64(0), i32(trace_steps(pl))) if trace else ()), 9, dev)
    n = pr.B * pr.H * pr.S_q * pr.D
    dq = Block(kq.kernel.ptr, cdiv(n // 8, 256), 256, 0,
               (np.uint64(0),) * 2 + (np.float32(scale), i64(n)), 2, dev)
    return pl, delta, dkdv, dq


def trace_steps(pl: BwdPlan) -> int:
    """Steps of the dK/dV trace build's record per CTA: a bound on any CTA's steps (its items
    times the longest item's), and one column to spare (a kernel that visits more than
    ``spec.backward_trace`` prescribes leaves a mark there)."""
    n_q = cdiv(pl.problem.S_q, pl.instance.tiles.m)
    return cdiv(pl.n_work, pl.ctas) * pl.heads_per_cta * n_q + 1


def _dkdv_scalars(pl: BwdPlan, order: ScanOrder, scale: float, q, k, v, dout) -> tuple:
    """flash_bwd_dkdv's arguments after its nine pointers (strides, sizes, scales)."""
    pr, bt = pl.problem, pl.instance.tiles
    g = 1 if order.kind != OrderKind.SAWTOOTH else order.group
    strides = tuple(i64(s) for t in (q, k, v, dout) for s in t.stride()[:3])
    return (strides + tuple(i32(x) for x in (pr.H, pr.H_kv, pr.S_q, pr.S_kv, cdiv(pr.S_q, bt.m),
                                            cdiv(pr.S_kv, bt.n), pl.n_work, pl.heads_per_cta,
                                            pl.n_chunks, g, lse_stride(pr.S_q)))
            + (np.float32(math.log2(math.e) * scale), np.float32(scale)))


def backward(dout, q, k, v, out, lse, causal: bool = False, order="linear", schedule=None,
             scale: float | None = None, tiles=None, options=None):
    """(dq, dk, dv) of ``attention(q, k, v)`` for the output gradient ``dout``; ``out`` and ``lse``
    are ``forward``'s. ``order`` and ``schedule`` choose the dK/dV kernel's Q scan and CTA schedule
    (None: the grid launch), ``tiles`` its (TILE_M, TILE_N) (None: those of ``default_variant(...,
    training=True)``), ``options`` its opt-in build options (a ``BwdOption`` or their names joined
    by +, e.g. "onepart+dqv4"; None: the default build). Four launches: Δ (which also zeroes the
    fp32 dQ accumulator), dK/dV, the dQ conversion, and with a split group the sum of the
    partials."""
    import torch
    D = q.shape[-1]
    scale = 1 / math.sqrt(D) if scale is None else scale
    if dout.stride(-1) != 1 or any(s % 8 for s in dout.stride()[:3]) or dout.data_ptr() % 16:
        dout = dout.contiguous() if not dout.is_contiguous() else dout.clone()
    key = ("bwd", q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), v.stride(),
           out.stride(), dout.shape, dout.stride(), dout.dtype, causal, order, schedule, scale,
           tiles, options)
    hit = _CACHE.get(key)
    if hit is None:
        hit = _CACHE[key] = _bwd_blocks(q, k, v, dout, out, causal, order, schedule, scale,
                                        tiles, options)
    pl, delta, dkdv, dqk = hit
    pr = pl.problem
    dev = q.device
    f32 = torch.float32
    with torch.cuda.device(dev):
        lse, dq_acc, dlt = _delta_pass(pl, delta, q, k, v, dout, out, lse)
        if pl.n_chunks == 1:
            dk = torch.empty(k.shape, dtype=q.dtype, device=dev)
            dv = torch.empty(k.shape, dtype=q.dtype, device=dev)
        else:
            shape = (pr.B, pr.H_kv * pl.n_chunks, pr.S_kv, pr.D)
            dk = torch.empty(shape, dtype=f32, device=dev)
            dv = torch.empty(shape, dtype=f32, device=dev)
        dkdv(q.data_ptr(), k.data_ptr(), v.data_ptr(), dout.data_ptr(), lse.data_ptr(),
             dlt.data_ptr(), dq_acc.data_ptr(), dk.data_ptr(), dv.data_ptr())
        dq = torch.empty(q.shape, dtype=q.dtype, device=dev)
        dqk(dq_acc.data_ptr(), dq.data_ptr())
        if pl.n_chunks > 1:
            shape = (pr.B, pr.H_kv, pl.n_chunks, pr.S_kv, pr.D)
            dk = dk.view(shape).sum(2).to(q.dtype)
            dv = dv.view(shape).sum(2).to(q.dtype)
    return dq, dk, dv


def trace_dkdv(dout, q, k, v, out, lse, causal: bool = False, order="linear", schedule=None,
               scale: float | None = None, tiles=None, options=None) -> dict:
    """Run the dK/dV kernel's trace build (``flash_bwd_dkdv_trace``) once, with ``backward``'s
    arguments, after Δ (which zeroes the fp32 dQ accumulator): ``visits``, int32 [n_ctas,
    ``trace_steps``, 4] of (b, query head, Q tile, K/V tile) per CTA and step, -1 where nothing
    was recorded; ``plan``, the ``BwdPlan``; ``schedule``, ``dkdv_spec_schedule(plan)``;
    ``build``, the instantiation's name. Compare ``visits`` with ``spec.backward_trace.
    backward_visits(PassGrid(problem, plan tiles, "dkdv", plan.n_chunks), schedule,
    order).table()``. Synchronises. The family has no dQ scan to trace: dQ is reduced inside
    this kernel (``flash_bwd_dq`` only converts it)."""
    import torch
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    pl, delta, dkdv, _ = _bwd_blocks(q, k, v, dout, out, causal, order, schedule, scale, tiles,
                                     options, trace=True)
    pr = pl.problem
    dev = q.device
    f32 = torch.float32
    with torch.cuda.device(dev):
        visits = torch.full((pl.ctas, trace_steps(pl), 4), -1, dtype=torch.int32, device=dev)
        dkdv.slots[-2] = visits.data_ptr()      # the record (BwdParams::trace_visits)
        lse, dq_acc, dlt = _delta_pass(pl, delta, q, k, v, dout, out, lse)
        shape = k.shape if pl.n_chunks == 1 else (pr.B, pr.H_kv * pl.n_chunks, pr.S_kv, pr.D)
        dt = q.dtype if pl.n_chunks == 1 else f32
        dk = torch.empty(shape, dtype=dt, device=dev)
        dv = torch.empty(shape, dtype=dt, device=dev)
        dkdv(q.data_ptr(), k.data_ptr(), v.data_ptr(), dout.data_ptr(), lse.data_ptr(),
             dlt.data_ptr(), dq_acc.data_ptr(), dk.data_ptr(), dv.data_ptr())
        torch.cuda.current_stream(dev).synchronize()
    return {"visits": visits.cpu().numpy(), "plan": pl, "schedule": dkdv_spec_schedule(pl),
            "build": replace(pl.instance, trace=True).name}


def dkdv_spec_schedule(pl: BwdPlan) -> CtaSchedule:
    """The dK/dV kernel's deal of work items to CTAs (``flash_bwd_dkdv_impl``) as a spec schedule
    on ``spec.backward_trace.PassGrid.items_grid``, whose items are (b, slot, K/V tile) with
    slot = (K/V head, chunk) in the kernel's ``rest`` order. Full attention deals K/V tiles
    fastest: the spec's q-major order, so the grid launch is ``CtaSchedule.grid()`` and P
    persistent CTAs ``static<P>``. Causal deals K/V tiles slowest (longest items first): the
    spec's head-major order, ``static<P>h``; its grid launch (item w on CTA w, iteration 0) is
    ``static<n_work>h``, one item per CTA."""
    if pl.problem.causal:
        return CtaSchedule.persistent(pl.ctas, WorkOrder.HEAD_MAJOR)
    if pl.instance.schedule == ScheduleKind.GRID:
        return CtaSchedule.grid()
    return CtaSchedule.persistent(pl.ctas)


# --- compiling ahead -----------------------------------------------------------------------------

def _compile_bwd(names: list[str], device: int) -> None:
    import cupy
    with cupy.cuda.Device(device):
        cupy.RawModule(code=bwd_source_text(), options=bwd_compile_options(),
                       name_expressions=names).compile()


def training_builds(problems, orders=("linear",), schedules=(ScheduleKind.GRID,),
                    backward_tiles=(None,), arch=None,
                    options: BwdOption = BwdOption(0),
                    trace: bool = False) -> tuple[set, list[str]]:
    """(training-forward ``Instance`` set, backward kernel names) of ``problems``: each family
    default forward (``default_variant`` on ``arch``) in every order, and
    the backward builds of every order x schedule x tiles (None: the default tiles) with the
    build ``options`` (``trace``: the dK/dV trace builds, ``trace_dkdv``'s)."""
    from cuda_baseline.host.backend import instance_for
    fwd, bwd = set(), set()
    for pr in problems:
        for o in orders:
            so = o if isinstance(o, ScanOrder) else ScanOrder.parse(o)
            fwd.add(instance_for(default_variant(pr, arch, order=so, training=True).forward, pr,
                                 lse=True))
            for s in schedules:
                for bt in backward_tiles:
                    bt = (default_variant(pr, arch, order=so, training=True).backward
                          if bt is None else Tiles(*bt))
                    i = BwdInstance(so.kind, s, bt, pr.D, pr.causal, pr.dtype, options, trace)
                    bwd |= {i.name, delta_name(pr.D, pr.dtype), dq_name(pr.D, pr.dtype)}
    return fwd, sorted(bwd)


def warm(problems, orders=("linear",), schedules=(ScheduleKind.GRID,), device: int = 0,
         jobs: int | None = None, backward_tiles=(None,),
         options: BwdOption = BwdOption(0), trace: bool = False) -> None:
    """Compile ``training_builds`` in parallel processes into CuPy's disk cache; later launches
    only load them."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    from cuda_baseline.host.backend import precompile
    fwd, names = training_builds(problems, orders, schedules, backward_tiles,
                                 arch_registry.detect(), options, trace)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(names)))
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as ex:
        done = [ex.submit(_compile_bwd, [n], device) for n in names]
        precompile(fwd, device)
        for f in done:
            f.result()

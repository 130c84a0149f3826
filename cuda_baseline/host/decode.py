"""The host side of the CUDA split-K/V decode (device/decode.cuh): the launch plan of a decode
call and its prepared launch.

``plan(problem, num_sms, splits=0)`` fixes what the kernels specialise on, with the cuTile
family's rules so both families run the same decomposition: the group packing
(``spec.decode.packing``: HG query heads × SQP rows per CTA, so each K/V tile is read once per
group), the K/V tile (``spec.decode.tile_n_for``: 32 KB of K and 32 KB of V per pipeline
stage) and the number of splits from ``spec.decode.choose_splits`` (the work model: enough CTAs
to fill the GPU's resident slots, each split keeping at least a few K/V tiles; its docstring has
the bandwidth argument) unless the call names them (``schedule="decode<N>"``). The slots are the
SMs × ``CTAS_PER_SM``: the split kernel holds 208 KB of shared memory (the packed Q tile and
three K/V stages), so one CTA per SM is resident, as for the cuTile exports.

``DecodeLaunch`` is what a repeated ``attention()`` call with the same key runs: the split
kernel and, with more than one split, the combine kernel, each one driver launch of a prepared
parameter block (``cuda_baseline.host.block.Block``) on torch's current stream. The fp32 partial
output and log-sum-exp are allocated per call by torch's caching allocator (one buffer per key
would race between calls on different streams; under CUDA-graph capture they come from the
graph's pool). ``kv_lengths`` (int32 [B] on q's device, checked by metadata when the key is
first seen: ``spec.ops.check_lengths``) is passed to the kernel by address and never read on
the host, so a captured graph reads the values present at each replay.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from cuda_baseline.build.decode_source import (
    COMBINE_THREADS,
    DecodeInstance,
    decode_compile_options,
    decode_source_text,
)
from cuda_baseline.build.source import CompileError
from cuda_baseline.host.block import Block
from spec import decode as spec_decode
from spec.family import BadInput
from spec.problem import Problem

CTAS_PER_SM = 1
"""Resident split-kernel CTAs per SM (208 KB of shared memory each: module docstring)."""


@dataclass(frozen=True)
class DecodePlan(spec_decode.DecodePlan):
    """The CUDA decode plan: the shared one and its split kernel's build."""

    FAMILY: ClassVar[str] = "cuda"

    def instance(self, bottom_right: bool = False) -> DecodeInstance:
        """The split kernel's build (``bottom_right``: per-sequence lengths were given, so a
        causal mask aligns each sequence's last row with its last key)."""
        p = self.problem
        return DecodeInstance(p.D, self.tile_n, self.hg, self.sqp, p.dtype, p.causal,
                              p.causal and bottom_right, self.splits > 1)


def plan(problem: Problem, num_sms: int, splits: int = 0) -> DecodePlan:
    """The decode launch plan of ``problem`` on a GPU of ``num_sms`` SMs; ``splits`` 0: the work
    model's."""
    return DecodePlan.make(problem, num_sms * CTAS_PER_SM, splits)


# --- compiling and loading ---------------------------------------------------------------------

_MODULES: dict[tuple[int, tuple[str, ...]], object] = {}   # (device, names) -> cupy RawModule


def _module(names: list[str]):
    import cupy
    return cupy.RawModule(code=decode_source_text(), options=decode_compile_options(),
                          name_expressions=list(names))


def kernels(inst: DecodeInstance, device: int):
    """(split kernel, combine kernel) as CuPy RawKernels, compiled or loaded from CuPy's disk
    cache once per process; the split kernel opted in to its shared memory."""
    key = (device, tuple(inst.names))
    if key not in _MODULES:
        import cupy
        with cupy.cuda.Device(device):
            try:
                mod = _module(inst.names)
                mod.compile()
            except Exception as e:   # CompileException (NVRTC log) or a driver error
                raise CompileError(f"compiling {inst.name} failed:\n{e}") from e
        _MODULES[key] = mod
    mod = _MODULES[key]
    split, combine = (mod.get_function(n) for n in inst.names)
    if inst.smem_bytes > 48 * 1024:
        split.max_dynamic_shared_size_bytes = inst.smem_bytes
    return split, combine


def _compile_worker(names: list[str], device: int) -> None:
    import cupy
    with cupy.cuda.Device(device):
        _module(names).compile()


def precompile(instances, device: int = 0, jobs: int | None = None) -> None:
    """Compile the modules of ``instances`` in parallel processes (NVRTC is single-threaded) into
    CuPy's disk cache, then load them here; a module is the one ``kernels`` asks for."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    insts = list(dict.fromkeys(instances))
    todo = [i for i in insts if (device, tuple(i.names)) not in _MODULES]
    jobs = min(jobs or os.cpu_count() or 1, len(todo))
    if jobs > 1:
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as ex:
            for f in [ex.submit(_compile_worker, i.names, device) for i in todo]:
                f.exception()        # a failure is raised with its log by the load below
    for i in todo:
        kernels(i, device)


# --- the prepared launch -------------------------------------------------------------------------

class DecodeLaunch:
    """A prepared decode launch: ``launch(q, k, v, out, kv_lengths=None)``. The parameter blocks
    hold everything but the addresses (q, k, v, out, the lengths, the two partial buffers), which
    each call writes; the tensors were checked when the key was first seen, so a call checks
    only the addresses' 16-byte alignment (the kernels' row copies) and the device."""

    __slots__ = ("plan", "instance", "split", "combine", "device", "opart_shape",
                 "lpart_shape", "f32", "torch", "empty_like", "current_device", "device_guard")

    def __init__(self, p: DecodePlan, q, k, v, out, scale: float, bottom_right: bool = False):
        import torch

        pr = p.problem
        dev = q.device.index
        self.plan = p
        self.instance = inst = p.instance(bottom_right)
        split_fn, combine_fn = kernels(inst, dev)
        i32, i64, u64 = np.int32, np.int64, np.uint64
        strides = [i64(s) for t in (q, k, v, out) for s in t.stride()[:3]]
        args = (u64(0),) * 7 + (*strides, i32(pr.B), i32(pr.H), i32(pr.H_kv), i32(pr.S_q),
                                i32(pr.S_kv), i32(p.head_chunks), i32(p.splits), i32(p.chunk),
                                np.float32(math.log2(math.e) * scale))
        self.split = Block(split_fn.kernel.ptr, p.n_ctas, inst.threads, inst.smem_bytes, args, 7,
                           dev)
        self.combine = None
        if p.splits > 1:
            cargs = (u64(0),) * 3 + (*strides[9:], i32(pr.B), i32(pr.H), i32(pr.S_q),
                                     i32(p.splits))
            self.combine = Block(combine_fn.kernel.ptr, pr.B * pr.H, COMBINE_THREADS, 0, cargs,
                                 3, dev)
        self.device = dev
        self.opart_shape = (p.splits, pr.B, pr.H, pr.S_q, pr.D)
        self.lpart_shape = (p.splits, pr.B, pr.H, pr.S_q)
        self.f32 = torch.float32
        self.torch = torch      # torch.empty looked up per call (tests/gpu/poison.py wraps it)
        self.empty_like = torch.empty_like
        self.current_device = torch._C._cuda_getDevice
        self.device_guard = torch.cuda.device

    def __call__(self, q, k, v, out, kv_lengths=None) -> None:
        qp, kp, vp, op = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()
        if (qp | kp | vp | op) & 15:
            bad = [n for n, a in (("q", qp), ("k", kp), ("v", vp), ("out", op)) if a & 15]
            raise BadInput(f"{', '.join(bad)} must start 16-byte aligned (16-byte row copies); "
                           "call .contiguous() or .clone()")
        lens = 0 if kv_lengths is None else kv_lengths.data_ptr()
        if self.current_device() != self.device:
            with self.device_guard(self.device):
                self._run(q, qp, kp, vp, op, lens)
        else:
            self._run(q, qp, kp, vp, op, lens)

    def _run(self, q, qp, kp, vp, op, lens) -> None:
        if self.combine is None:
            self.split(qp, kp, vp, op, lens, 0, 0)
            return
        o = self.torch.empty(self.opart_shape, dtype=self.f32, device=q.device)
        lse = self.torch.empty(self.lpart_shape, dtype=self.f32, device=q.device)
        self.split(qp, kp, vp, op, lens, o.data_ptr(), lse.data_ptr())
        self.combine(o.data_ptr(), lse.data_ptr(), op)


__all__ = ["CTAS_PER_SM", "DecodeLaunch", "DecodePlan", "kernels", "plan", "precompile"]

"""JIT-like export signatures, so compile-only checks (no GPU, no libcuda) see the code that runs.

``KernelSignature.from_kernel_args`` needs libcuda, and a bare ``ArrayConstraint`` drops the facts
the JIT infers from real tensors (unit strides, 16-byte divisible strides / shapes / base address,
size-1 dims). Without them sm_90 code has no TMA (LDG + STS) and different register use, so a
resource check on it says nothing (cutile-notes.md §4.3). ``jit_like_array`` mirrors the JIT's
specialisation bits (the same rule as ``cuda.tile.jax``'s constraint builder).
"""
from __future__ import annotations

from dataclasses import dataclass

import cuda.tile as ct
from cuda.tile.compilation import (
    ArrayConstraint,
    CallingConvention,
    KernelSignature,
    ScalarConstraint,
)

from kernels.device import fmha

_ITEMSIZE = {ct.float16: 2, ct.bfloat16: 2, ct.float32: 4, ct.int32: 4}


def contiguous_strides(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


def jit_like_array(shape, dtype=ct.float16, strides=None, base_aligned: bool = True,
                   index_dtype=ct.int32) -> ArrayConstraint:
    """The ArrayConstraint the JIT derives from a tensor of this shape/strides/alignment."""
    strides = contiguous_strides(shape) if strides is None else tuple(strides)
    isz = _ITEMSIZE[dtype]
    return ArrayConstraint(
        dtype, len(shape), index_dtype=index_dtype, stride_lower_bound_incl=0, alias_groups=(),
        may_alias_internally=False,
        stride_constant=tuple(1 if s == 1 else None for s in strides),
        shape_constant=tuple(1 if d == 1 else None for d in shape),
        stride_divisible_by=tuple(16 // isz if (s * isz) % 16 == 0 else 1 for s in strides),
        shape_divisible_by=tuple(16 if d % 16 == 0 else 1 for d in shape),
        base_addr_divisible_by=16 if base_aligned else 1)


def needs_v2(params) -> bool:
    return any(isinstance(p, ArrayConstraint) and any(x is not None for x in p.shape_constant)
               for p in params)


@dataclass(frozen=True)
class BuildShape:
    """What every build to compile has: the problem's shapes, the tiles and the scan-order and
    CTA-schedule codes (``spec.OrderKind``, ``spec.ScheduleKind``, ``spec.WorkOrder``)."""

    B: int = 1
    H: int = 16
    H_kv: int = 16
    S_q: int = 4096
    S_kv: int = 4096
    D: int = 64
    dtype: str = "fp16"
    causal: bool = False
    tile_m: int = 64
    tile_n: int = 64
    order: int = 0
    group: int = 1
    sched: int = 0
    work: int = 0

    def _tensors(self, aligned: bool = True):
        """(element type, a JIT-like Q-shaped array, a K/V-shaped one)."""
        dt = {"fp16": ct.float16, "bf16": ct.bfloat16}[self.dtype]
        return (dt, jit_like_array((self.B, self.H, self.S_q, self.D), dt, base_aligned=aligned),
                jit_like_array((self.B, self.H_kv, self.S_kv, self.D), dt, base_aligned=aligned))


def _signature(params: list, symbol: str) -> KernelSignature:
    cc = (CallingConvention.cutile_python_v2() if needs_v2(params)
          else CallingConvention.cutile_python_v1())
    return KernelSignature(params, cc).with_mangled_symbol(symbol)


@dataclass(frozen=True)
class CompileCase(BuildShape):
    """One forward variant to compile: shapes plus the constant codes (what ``CutileFamily``
    launches)."""

    tiles_per_cta: int = 1
    section: int = 1
    level: int = 6
    trace: bool = False
    n_ctas: int = 132
    aligned: bool = True     # q, k, v, out start 16-byte aligned (what the JIT sees from torch)
    tactic: int = 0          # fmha's TACTIC bits (0: the build the studies compare)

    @classmethod
    def of(cls, variant, problem, *, trace: bool = False, level: int = 6,
           tactic: int = 0) -> "CompileCase":
        """The compile case of a spec ``Variant`` on a ``Problem`` (what the backend launches)."""
        from spec.problem import TileGrid
        o, s = variant.order, variant.schedule
        return cls(B=problem.B, H=problem.H, H_kv=problem.H_kv, S_q=problem.S_q,
                   S_kv=problem.S_kv, D=problem.D, dtype=problem.dtype.value,
                   causal=problem.causal, tile_m=variant.tiles.m, tile_n=variant.tiles.n,
                   order=int(o.kind), group=o.group, sched=int(s.kind), work=int(s.work_order),
                   tiles_per_cta=s.tiles_per_cta, section=s.section or 1, level=level,
                   trace=trace, tactic=tactic,
                   n_ctas=s.grid_size(TileGrid(problem, variant.tiles)))

    def constants(self) -> tuple:
        """The kernel's constant arguments for this case (``fmha.constants``): what the export
        specialises on and what ``CutileFamily`` launches with."""
        return fmha.constants(
            D=self.D, tile_m=self.tile_m, tile_n=self.tile_n, H=self.H,
            group_size=self.H // self.H_kv, causal=self.causal,
            even_k=self.S_kv % self.tile_n == 0, order=self.order, group=self.group,
            sched=self.sched, work=self.work, tiles_per_cta=self.tiles_per_cta,
            section=self.section, level=self.level, trace=self.trace, tactic=self.tactic)

    def signature(self) -> KernelSignature:
        _, q, kv = self._tensors(self.aligned)
        trace_shape = (self.n_ctas, 64, 4) if self.trace else (1, 1, 4)
        params = [q, kv, kv, q, jit_like_array(trace_shape, ct.int32),
                  ScalarConstraint(ct.float32)]
        return _signature(params + list(self.constants()), "fmha_fwd")


@dataclass(frozen=True)
class BackwardCase(BuildShape):
    """One backward build to compile (``kernels.device.fmha_bwd``): which kernel, the shapes,
    and its constant codes. The fp32 LSE / Δ buffers have a row stride padded to a multiple of 4
    elements, 16 bytes (``kernels.host.backward.stat_buffer``). ``trace``: the pass's trace build
    (``bwd_dkdv_trace`` / ``bwd_dq_trace``: the same constants and one more argument, the int32
    record [n_ctas, steps, 4] after the pass's outputs)."""

    kernel: str = "dkdv"          # "dq" | "dkdv" | "split_sum" | "prep" | "dq_cast"
    split: int = 1                # dK/dV: query heads of a group dealt over this many items
    one_pass: bool = False        # dK/dV: the one-pass build (its DQ constant)
    trace: bool = False
    n_ctas: int = 132             # the trace build's record: [n_ctas, 64, 4]

    def __post_init__(self) -> None:
        if self.trace and self.kernel not in ("dq", "dkdv"):
            raise ValueError(f"the {self.kernel} kernel has no trace build (it reads no scan)")

    @property
    def kernel_name(self) -> str:
        """The ``kernels.device.fmha_bwd.KERNELS`` key of this build."""
        return self.kernel + ("_trace" if self.trace else "")

    def constants(self) -> tuple:
        """The kernel's constant arguments, in kernel order (``kernels.device.fmha_bwd``)."""
        if self.kernel == "split_sum":
            return (int(self.D), int(self.tile_n))
        if self.kernel in ("prep", "dq_cast"):
            return (int(self.D), int(self.tile_m))
        tail = (bool(self.causal), self.S_kv % self.tile_n == 0)
        if self.kernel == "dkdv":
            tail += (bool(self.one_pass),)
        return ((int(self.D), int(self.tile_m), int(self.tile_n)) + tail
                + (int(self.order), int(self.group), int(self.sched), int(self.work)))

    def signature(self) -> KernelSignature:
        _, q, kv = self._tensors()
        sp = -(-self.S_q // 4) * 4
        stat = jit_like_array((self.B, self.H, self.S_q), ct.float32,
                              strides=(self.H * sp, sp, 1))
        f32, i32 = ScalarConstraint(ct.float32), ScalarConstraint(ct.int32)
        partial = jit_like_array((self.B, self.H_kv * self.split, self.S_kv, self.D), ct.float32)
        dq_sum = jit_like_array((self.B, self.H, self.S_q, self.D), ct.float32)
        if self.kernel == "split_sum":
            params = [partial, partial, kv, kv, i32]
        elif self.kernel == "prep":
            params = [q, q, stat, dq_sum]
        elif self.kernel == "dq_cast":
            params = [dq_sum, q, f32]
        elif self.kernel == "dkdv":
            grad = kv if self.split == 1 else partial
            params = [q, kv, kv, q, stat, stat, grad, grad, dq_sum if self.one_pass else grad]
        else:
            params = [q, kv, kv, q, q, stat, stat, q]
        if self.kernel in ("dkdv", "dq"):
            if self.trace:
                params.append(jit_like_array((self.n_ctas, 64, 4), ct.int32))
            params += [f32, f32, i32, i32]
        return _signature(params + list(self.constants()), "bwd_" + self.kernel_name)


@dataclass(frozen=True)
class DecodeCase(BuildShape):
    """One split-K/V decode build (``kernels.device.decode``): the shapes, the K/V tile, the
    packing (``spec.decode.packing``) and the number of splits (1: the split kernel writes the
    output and there is no combine). ``kernel`` is "split" or "combine"."""

    S_q: int = 1
    S_kv: int = 8192
    splits: int = 8
    kernel: str = "split"
    bottom_right: bool = False      # causal aligned to each sequence's end (kv_lengths)

    def packing(self) -> tuple[int, int]:
        from spec.decode import packing
        return packing(self.H // self.H_kv, self.S_q)

    def constants(self) -> tuple:
        from kernels.device import decode
        if self.kernel == "combine":
            from spec.decode import merge_chunk
            return decode.combine_constants(D=self.D, chunk=merge_chunk(self.splits, self.D))
        hg, sqp = self.packing()
        return decode.split_constants(D=self.D, tile_n=self.tile_n, hg=hg, sqp=sqp,
                                      causal=self.causal, bottom_right=self.bottom_right,
                                      split=self.splits > 1)

    def signature(self) -> KernelSignature:
        dt, q, kv = self._tensors()
        part = (self.splits, self.B, self.H, self.S_q)
        opart = jit_like_array(part + (self.D,), ct.float32)
        lpart = jit_like_array(part, ct.float32)
        if self.kernel == "combine":
            return _signature([opart, lpart, q] + list(self.constants()), "decode_combine")
        lens = jit_like_array((self.B,), ct.int32)
        params = [q, kv, kv, lens, opart, lpart, q, ScalarConstraint(ct.float32)]
        return _signature(params + list(self.constants()), "decode_split")

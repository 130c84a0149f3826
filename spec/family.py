"""The interface both kernel families implement, the facts they report, and the input checks they
share.

Names (one per concept):

- ``spec.Backend`` (an enum, ``cutile`` / ``cuda``) *names* the family a variant belongs to: the
  first field of a variant id and the ``backend`` column of every CSV.
- ``KernelFamily`` (this module) is the interface a family implements:
  ``kernels.host.backend.CutileFamily`` and ``cuda_baseline.CudaFamily``;
  ``experiments.measurement.families.family(backend, arch)`` picks one by name.

A family turns a ``Variant`` and a ``Problem`` into something launchable (``prepare``: compile,
read the build's resources), launches it on the torch current stream (``run``), and runs its trace
build (``trace``), which records per CTA and step the (b, h, q_tile, kv_tile) visited so a GPU test
can compare it with ``spec.visit_order``. Both return the same ``Prepared`` fields
(``PREPARED_FIELDS``) and the same ``trace`` keys (``TRACE_KEYS``).

Why the resources are part of the interface: a build that spills reads its local memory through
L2, so its L2 misses include spill traffic and a locality comparison between two builds is only
fair when both have ``local_bytes == 0`` and the same ``ctas_per_sm`` (the wavefront width).
Nothing here imports torch at module import time.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Protocol

from .arch import Arch
from .problem import SUPPORTED_HEAD_DIMS, DType, Problem, cdiv
from .variant import Variant


class UnsupportedVariant(ValueError):
    """A variant/problem combination a family cannot build; the message says why and what works."""


class BadInput(ValueError):
    """Tensors that do not describe a valid attention call; the message names what was passed and
    what is accepted."""


@dataclass(frozen=True)
class Prepared:
    """What every family's ``prepare`` returns (each family's own ``Prepared`` extends it with its
    launch details): the variant and problem it was prepared for, the CTAs launched
    (``n_ctas``), threads per CTA, registers per thread, local memory per thread in bytes (stack
    and spills; 0 for a clean build), shared memory per CTA in bytes, CTAs resident per SM, and
    ``build``, the name of the compiled kernel (its instantiation)."""

    variant: Variant
    problem: Problem
    n_ctas: int
    threads: int
    registers: int
    local_bytes: int
    smem_bytes: int
    ctas_per_sm: int
    build: str

    @property
    def id(self) -> str:
        return self.variant.id(self.problem)


PREPARED_FIELDS = tuple(f.name for f in fields(Prepared))
"""The fields of :class:`Prepared`, first in every family's ``Prepared``."""


TRACE_KEYS = ("visits", "time_ns", "smid", "start_ns", "end_ns", "build", "every")
"""Keys of ``trace()``: ``visits`` int32 [n_ctas, steps, 4] (b, h, q_tile, kv_tile; -1 padded, the
layout of ``spec.Visits.table()``); ``time_ns`` int64 [n_ctas, steps], the ``%globaltimer`` at
the start of each step (-1 padded); per CTA, ``smid`` int32 [n_ctas], the SM it ran on
(``%smid``), and ``start_ns`` / ``end_ns`` int64 [n_ctas], the ``%globaltimer`` when it started
(before its first step) and finished; ``build``, the trace build's kernel name; ``every``, the
stride of the recorded steps (1: every step; the CUDA family's ``trace(..., every=k)`` records
steps 0, k, 2k, ... of each CTA, for timing that the stamps themselves must not perturb). The
timing and placement keys are None for a family whose trace build does not record them (cuTile
has no timer or SM-id intrinsic)."""


class KernelFamily(Protocol):
    name: str

    def prepare(self, variant: Variant, problem: Problem) -> Any:
        """Compile (or fetch from cache) the specialisation and read its resources (a ``Prepared``
        with ``PREPARED_FIELDS``); raise UnsupportedVariant if impossible."""

    def run(self, prepared: Any, q, k, v, out) -> None:
        """Launch on ``torch.cuda.current_stream()``; ``out`` is written, nothing is returned."""

    def trace(self, prepared: Any, q, k, v, out, every: int = 1) -> dict:
        """Run the trace build, recording every ``every``-th step; returns ``TRACE_KEYS``. A
        family that records no timing supports only ``every=1`` (``BadInput`` otherwise)."""


@dataclass(frozen=True)
class DeviceLimits:
    """What the occupancy and validity checks need to know about a GPU."""

    name: str
    num_sms: int
    smem_per_block_optin: int
    smem_per_sm: int
    regs_per_sm: int
    threads_per_sm: int
    compute_capability: tuple[int, int]
    reserved_smem_per_block: int = 1024

    @classmethod
    def of(cls, device_index: int) -> "DeviceLimits":
        import torch
        p = torch.cuda.get_device_properties(device_index)
        return cls(p.name, p.multi_processor_count, p.shared_memory_per_block_optin,
                   p.shared_memory_per_multiprocessor, p.regs_per_multiprocessor,
                   p.max_threads_per_multi_processor, (p.major, p.minor))

    def ctas_per_sm(self, threads: int, registers: int, smem: int) -> int:
        """Resident CTAs per SM. Registers are allocated per warp in units of 256 from four
        sub-partition register files (a quarter of the SM's each) with the warps dealt round
        robin, so n CTAs of W warps need ceil(n W / 4) warps' registers in one sub-partition
        (what ptxas assumes too: two 5-warp CTAs leave 168 registers per thread, not 204)."""
        warps = threads // 32
        regs_per_warp = cdiv(registers * 32, 256) * 256
        per_partition = self.regs_per_sm // 4
        by_regs = 0
        while cdiv((by_regs + 1) * warps, 4) * regs_per_warp <= per_partition:
            by_regs += 1
        by_smem = self.smem_per_sm // (smem + self.reserved_smem_per_block)
        return max(0, min(by_regs, by_smem, self.threads_per_sm // threads, 32))


# Per compute capability, for plans and simulations on a machine without that GPU. sm_90: read off
# the lent H100 (cudaDeviceProp, 2026-11-25: 65536 registers, 233472 B shared memory per SM,
# 232448 per block opt-in, 2048 threads, 1024 B reserved per block). sm_100 / sm_103 and sm_121:
# the CUDA C++ Programming Guide's table of limits per compute capability (10.x: 228 KB per SM,
# 227 KB per block, 2048 threads; 12.x: 100 KB per SM, 99 KB per block, 1536 threads; 64 K
# registers and 1 KB reserved per block on all).
_PUBLISHED = {"sm_90": (232448, 233472, 65536, 2048), "sm_100": (232448, 233472, 65536, 2048),
              "sm_103": (232448, 233472, 65536, 2048), "sm_121": (101376, 102400, 65536, 1536)}


def published_limits(arch: Arch) -> DeviceLimits:
    """The limits of ``arch``'s GPU when it is not here, from its compute target
    (``_PUBLISHED``): what a build's occupancy is computed under when no driver can be asked."""
    if arch.sm not in _PUBLISHED:
        raise ValueError(f"no published SM limits for {arch.sm}; known: {', '.join(_PUBLISHED)}")
    optin, per_sm, regs, threads = _PUBLISHED[arch.sm]
    return DeviceLimits(arch.marketing_name or arch.name, arch.num_sms, optin, per_sm, regs,
                        threads, arch.compute_capability)


_LIMITS: dict[int, DeviceLimits] = {}


def device_limits(device_index: int) -> DeviceLimits:
    """The limits of ``cuda:device_index`` (read once per process)."""
    if device_index not in _LIMITS:
        _LIMITS[device_index] = DeviceLimits.of(device_index)
    return _LIMITS[device_index]


_TORCH_DTYPES = {"float16": DType.FP16, "bfloat16": DType.BF16}


def problem_from_tensors(q, k, v, causal: bool, out=None) -> Problem:
    """Validate [B, H, S, D] torch tensors and describe them as a ``Problem``.

    Raises BadInput naming the offending tensor, what it is, and what is accepted.
    """
    names = {"q": q, "k": k, "v": v} | ({"out": out} if out is not None else {})
    for name, t in names.items():
        if not hasattr(t, "is_cuda") or not hasattr(t, "dim"):
            raise BadInput(f"{name} must be a torch.Tensor on a CUDA device, "
                           f"got {type(t).__name__}")
        if not t.is_cuda:
            raise BadInput(f"{name} is on {t.device}; move it to the GPU first (tensor.cuda())")
        if t.dim() != 4:
            raise BadInput(f"{name} has shape {tuple(t.shape)}; expected 4-D [B, H, S, D]")
        if t.stride(-1) != 1:
            raise BadInput(f"{name} has stride {t.stride(-1)} in its last dimension; it must be "
                           "contiguous there (call .contiguous())")
        dt = str(t.dtype).removeprefix("torch.")
        if dt not in _TORCH_DTYPES:
            raise BadInput(f"{name} has dtype {t.dtype}; accepted: torch.float16, torch.bfloat16")
    if len({str(t.dtype) for t in names.values()}) != 1:
        raise BadInput("q, k, v (and out) must share one dtype, got "
                       + ", ".join(f"{n}={t.dtype}" for n, t in names.items()))
    if len({t.device for t in names.values()}) != 1:
        raise BadInput("q, k, v (and out) must be on one device, got "
                       + ", ".join(f"{n}={t.device}" for n, t in names.items()))
    B, H, S_q, D = q.shape
    Bk, H_kv, S_kv, Dk = k.shape
    if tuple(v.shape) != tuple(k.shape):
        raise BadInput(f"k {tuple(k.shape)} and v {tuple(v.shape)} must have the same shape")
    if Bk != B or Dk != D:
        raise BadInput(f"q {tuple(q.shape)} and k {tuple(k.shape)} disagree on batch or head dim")
    if H % H_kv:
        raise BadInput(f"q has {H} heads, k/v have {H_kv}: H must be a multiple of H_kv")
    if D not in SUPPORTED_HEAD_DIMS:
        raise BadInput(f"head dim {D} is not supported; accepted: {SUPPORTED_HEAD_DIMS}")
    if out is not None and tuple(out.shape) != tuple(q.shape):
        raise BadInput(f"out {tuple(out.shape)} must have q's shape {tuple(q.shape)}")
    return Problem(B=B, H=H, S_q=S_q, D=D, S_kv=S_kv, H_kv=H_kv,
                   dtype=_TORCH_DTYPES[str(q.dtype).removeprefix("torch.")], causal=causal)

"""The host side of the split-K/V decode (``kernels.device.decode``): the launch plan of a decode
call and its cached launch.

``plan(problem, arch, splits=0)`` fixes, once per launch key, what the kernels specialise on: the
K/V tile (``spec.decode.tile_n_for``: 32 KB of K and 32 KB of V per copy for the 16 packed rows of
one-token decode, 16 KB each above), the group packing (``spec.decode.packing``: HG query heads ×
SQP rows per CTA, so each K/V tile is read once per group), and the number of splits, from
``spec.decode.choose_splits`` (the work model: enough CTAs to fill the GPU's resident slots, each
split keeping at least a few K/V tiles; its docstring has the bandwidth argument) unless the call
names them (``schedule="decode<N>"``). The slots are the arch's SMs × ``CTAS_PER_SM``: the sm_90
exports of the split kernel use 255 registers at 256 threads (M ≤ 32, mma.sync) or 168 at 384
threads (M = 64, wgmma) and 150-215 KB of shared memory (tileiras pipelines the K/V loads), so one
CTA per SM is resident.

``DecodeLaunch`` is what a repeated ``attention()`` call with the same key runs: the split kernel,
and with more than one split the combine kernel, on torch's current stream; the fp32 partial
output and log-sum-exp are allocated per call by torch's caching allocator (reusing one buffer
per key would race between calls on different streams). The per-sequence lengths
``kv_lengths`` are passed to the kernel as they are (an int32 tensor [B] on q's device, checked
by metadata when the key is first seen) and never read on the host: their *values* (0 ≤ L_b ≤
S_kv) cannot be checked without a device sync, so a value above S_kv is clamped to S_kv by the
kernel and a negative one acts as 0 (every row of that sequence is 0).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spec import decode as spec_decode
from spec.family import UnsupportedVariant
from spec.problem import Problem

CTAS_PER_SM = 1
"""Resident split-kernel CTAs per SM (module docstring: the sm_90 exports' registers and shared
memory allow one)."""


@dataclass(frozen=True)
class DecodePlan(spec_decode.DecodePlan):
    """The cuTile decode plan: the shared one and the split kernel's hints."""

    occupancy: int | None = None     # the split kernel's occupancy hint (None: the compiler's)
    latency: int = 2                 # its K/V load latency hint (``decode.LATENCY``)
    reverse: bool = False            # each split scans its chunk from the end
    merge_occupancy: int | None = None   # the combine kernel's hint (None: ``decode``'s)
    dependent_merge: bool = True     # the merge as a programmatic dependent launch
    FAMILY: ClassVar[str] = "cutile"

    @property
    def label(self) -> str:
        return super().label + (f".occ{self.occupancy}" if self.occupancy else "") + (
            f".lat{self.latency}" if self.latency != 2 else "") + (
            ".rev" if self.reverse else "") + (
            f".mocc{self.merge_occupancy}" if self.merge_occupancy else "") + (
            "" if self.dependent_merge else ".nopdl")


def plan(problem: Problem, num_sms: int, splits: int = 0, *, tile_n: int | None = None,
         occupancy: int | None = None, latency: int | None = None, group: bool = True,
         reverse: bool = False, merge_occupancy: int | None = None,
         dependent_merge: bool = True) -> DecodePlan:
    """The decode launch plan of ``problem`` on a GPU of ``num_sms`` SMs; ``splits`` 0: the work
    model's. ``tile_n``, ``occupancy`` (resident CTAs per SM asked of the compiler, which the
    work model then fills) and ``latency`` override the defaults for an exploration of the
    kernel's tactics (``explorations/decode_tactics.py``); ``group`` False (one query head per
    CTA) and ``reverse`` (each chunk scanned from its end) are the decode study's variants
    (``experiments.simulation.decode``); ``dependent_merge`` False launches the merge after
    the split kernel in the plain stream order (the A/B of ``explorations/decode_tactics.py``);
    ``attention()`` passes none of them."""
    from kernels.device import decode
    return DecodePlan.make(problem, num_sms * (occupancy or CTAS_PER_SM), splits, tile_n,
                           group, occupancy=occupancy, reverse=reverse,
                           latency=decode.LATENCY if latency is None else int(latency),
                           merge_occupancy=merge_occupancy,
                           dependent_merge=dependent_merge)


class DecodeLaunch:
    """A prepared decode launch: ``launch(q, k, v, out, lse=None, kv_lengths=None)`` as
    ``kernels.host.backend.Launch`` (``lse`` must be None: no training build)."""

    __slots__ = ("plan", "device", "empty_like", "raw_stream", "launch", "split",
                 "combine", "grid", "cgrid", "tail", "ctail", "lens", "dummies", "opart_shape",
                 "lpart_shape", "f32", "bottom_right", "torch")

    def __init__(self, p: DecodePlan, device_index: int, scale: float | None = None,
                 bottom_right: bool = False):
        import cuda.tile as ct
        import torch

        from kernels.device import decode, fmha
        pr = p.problem
        dev = torch.device("cuda", device_index)
        self.plan = p
        self.device = device_index
        self.bottom_right = bottom_right
        self.split, self.combine = decode.get_kernels(p.occupancy, p.merge_occupancy)
        self.grid = p.grid
        self.cgrid = (pr.B * pr.H * pr.S_q, 1, 1)
        self.tail = (fmha.qk_scale_for(pr.D, 6, scale),) + decode.split_constants(
            D=pr.D, tile_n=p.tile_n, hg=p.hg, sqp=p.sqp, causal=pr.causal,
            bottom_right=bottom_right, split=p.splits > 1, latency=p.latency,
            reverse=p.reverse)
        self.ctail = decode.combine_constants(D=pr.D, chunk=p.combine_chunk)
        self.lens = torch.full((pr.B,), pr.S_kv, dtype=torch.int32, device=dev)
        self.dummies = (torch.zeros((1, 1, 1, 1, pr.D), dtype=torch.float32, device=dev),
                        torch.zeros((1, 1, 1, 4), dtype=torch.float32, device=dev))
        self.opart_shape = (p.splits, pr.B, pr.H, pr.S_q, pr.D)
        self.lpart_shape = (p.splits, pr.B, pr.H, pr.S_q)
        self.f32 = torch.float32
        self.torch = torch      # torch.empty looked up per call (tests/gpu/poison.py wraps it)
        self.empty_like = torch.empty_like
        self.raw_stream = torch._C._cuda_getCurrentRawStream
        self.launch = ct.launch

    def __call__(self, q, k, v, out, lse=None, kv_lengths=None) -> None:
        if lse is not None:
            raise UnsupportedVariant("the decode launch has no training build (lse=); the "
                                     "training forward runs a split-Q schedule")
        lens = self.lens if kv_lengths is None else kv_lengths
        stream = self.raw_stream(self.device)
        try:
            if self.plan.splits == 1:
                o, l_ = self.dummies
                self.launch(stream, self.grid, self.split, (q, k, v, lens, o, l_, out)
                            + self.tail)
                return
            o = self.torch.empty(self.opart_shape, dtype=self.f32, device=q.device)
            l_ = self.torch.empty(self.lpart_shape, dtype=self.f32, device=q.device)
            self.launch(stream, self.grid, self.split, (q, k, v, lens, o, l_, out) + self.tail)
            self.launch(stream, self.cgrid, self.combine, (o, l_, out) + self.ctail,
                        programmatic_dependent_launch=self.plan.dependent_merge)
        except Exception as e:  # noqa: BLE001 - only toolchain failures are rewrapped
            from kernels.build.toolchain import explain_compile_error
            err = explain_compile_error(e)
            if err is e:
                raise
            raise err from e

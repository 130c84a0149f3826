"""The CUDA twin's ``attention()``: one lookup and one driver launch per repeated call.

The first call with a given launch key (shapes, strides, dtypes and devices of the tensors, and
every argument) checks the tensors (``spec.family.problem_from_tensors`` and the stride rule of
``CudaFamily``), resolves the defaults (``default_variant``), compiles or loads
the instantiation and lays out its kernel parameters once: every parameter of ``flash_fwd`` but
the four tensor addresses depends only on the key. A repeated call builds the key, looks it up,
checks the four addresses' 16-byte alignment (the kernel's row copies), writes them into the
parameter block and calls ``cuLaunchKernel`` on torch's current stream (``Block``, also the
training launches' packer). CuPy's
``RawKernel.__call__`` converts ~30 arguments and enters device and stream contexts on every call
(100+ us per call for the whole old path); the driver call with a prepared block does
none of that. The driver copies the parameters at launch, so reusing the block is safe, also
under CUDA-graph capture; a lock keeps two threads from writing it at once.

Nothing here imports torch or CuPy at import time.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from cuda_baseline.host.backend import CudaFamily, Prepared, check_strides, default_variant
from cuda_baseline.host.block import Block
from spec import arch as arch_registry
from spec.family import BadInput, problem_from_tensors
from spec.ops import check_lengths, resolve_scale
from spec.orders import ScanOrder
from spec.problem import Tiles
from spec.schedules import CtaSchedule
from spec.variant import Variant

if TYPE_CHECKING:
    from cuda_baseline.host.decode import DecodeLaunch

_FAMILY = CudaFamily()
_LAUNCHES: dict = {}


class Launch(Block):
    """The forward's prepared launch (a ``Block`` whose first four parameters are q, k, v, out),
    with the checks a repeated call still needs: the addresses' 16-byte alignment and the
    tensors' device."""

    __slots__ = ("prepared", "current_device", "empty_like", "device_guard")

    def __init__(self, prepared: Prepared, args: tuple):
        import torch
        super().__init__(prepared.kernel.kernel.ptr, prepared.n_ctas, prepared.threads,
                         prepared.smem_bytes, args, 4, prepared.device_index)
        self.prepared = prepared
        self.current_device = torch._C._cuda_getDevice
        self.empty_like = torch.empty_like
        self.device_guard = torch.cuda.device

    def __call__(self, q, k, v, out) -> None:
        qp, kp, vp, op = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()
        if (qp | kp | vp | op) & 15:
            bad = [n for n, p in (("q", qp), ("k", kp), ("v", vp), ("out", op)) if p & 15]
            raise BadInput(f"{', '.join(bad)} must start 16-byte aligned (16-byte row copies); "
                           "call .contiguous() or .clone()")
        if self.current_device() != self.device:
            with self.device_guard(self.device):
                Block.__call__(self, qp, kp, vp, op)
        else:
            Block.__call__(self, qp, kp, vp, op)


def _new_launch(q, k, v, out, causal, order, schedule, tiles, stages, scale,
                kv_lengths=None) -> "Launch | DecodeLaunch":
    import torch
    problem = problem_from_tensors(q, k, v, causal, out)
    scale = resolve_scale(scale, problem.D)
    if kv_lengths is not None:
        check_lengths(kv_lengths, q)
    chosen = default_variant(problem, arch_registry.detect(), order=order, schedule=schedule,
                             tiles=tiles, stages=stages, kv_lengths=kv_lengths is not None)
    o = torch.empty_like(q) if out is None else out    # out's strides follow q's when allocated
    if not isinstance(chosen, Variant):                # the decode kernels' plan
        from cuda_baseline.host.decode import DecodeLaunch
        check_strides(q, k, v, o)
        with torch.cuda.device(q.device):
            return DecodeLaunch(chosen, q, k, v, o, scale, bottom_right=kv_lengths is not None)
    with torch.cuda.device(q.device):
        prepared = _FAMILY.prepare(chosen, problem)
    _FAMILY._check_tensors(prepared, q, k, v, o)       # strides: multiples of 8 elements
    return Launch(prepared, _FAMILY._args(prepared, q, k, v, o, scale=scale))


def attention(q, k, v, *, causal: bool = False, order: str | ScanOrder = "linear",
              schedule: str | CtaSchedule | None = None,
              tiles: Tiles | tuple[int, int] | None = None, stages: int | None = None, out=None,
              scale: float | None = None, kv_lengths=None):
    """``softmax(scale q kᵀ) v`` (``scale`` None: 1/sqrt(D), else a positive float) on
    [B, H, S, D] fp16/bf16 CUDA tensors with the raw CUDA
    kernel (k, v: [B, H_kv, S_kv, D], H_kv dividing H; ``causal`` top-left aligned as SDPA's
    ``is_causal``). Strides: the last dimension contiguous, the others multiples of 8 elements,
    addresses 16-byte aligned (a [B, S, H, D] tensor transposed to [B, H, S, D] needs no copy).
    ``order``: linear, sawtooth[X], reverse, blockparity; ``schedule``: grid, tile<X>,
    static<P>[h], snake<P>[h], lpt<P>, glpt<G>, decode, decode<N>, or None for the default
    (``default_variant``); ``tiles``: (TILE_M, TILE_N), default ``default_tiles``; ``stages``: K/V
    pipeline depth 1..3, default 2 (double buffer). Returns ``out`` (allocated like q when not
    given). The eager path (module docstring); ``cuda_baseline.attention`` wraps it in a
    ``torch.library`` custom op.

    Decode (``backend.decode_choice``): a query block of at most 16 rows per head runs the
    split-K/V decode kernels (``cuda_baseline.host.decode``) unless a split-Q schedule, order,
    tiles or stages is named; ``schedule="decode"`` / ``"decode<N>"`` asks for them (N splits).
    ``kv_lengths``, an int32 tensor [B] on q's device, gives each sequence's cache length (keys
    from it on are ignored; causal then aligns each sequence's last query row with its last
    key, as FlashAttention's ``cache_seqlens``); it is never read on the host."""
    launch = launch_for(q, k, v, causal, order, schedule, tiles, stages, out, scale, kv_lengths)
    if out is None:
        out = launch.empty_like(q)
    if kv_lengths is None:
        launch(q, k, v, out)
    else:
        launch(q, k, v, out, kv_lengths)
    return out


def launch_for(q, k, v, causal=False, order="linear", schedule=None, tiles=None, stages=None,
               out=None, scale=None, kv_lengths=None) -> "Launch | DecodeLaunch":
    """The cached ``Launch`` (or ``DecodeLaunch``) of an ``attention()`` call with these
    arguments (prepared on the first call with its launch key); ``launch(q, k, v, out)`` runs
    it."""
    try:
        key = (q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device,
               v.shape, v.stride(), v.dtype, v.device, causal, order, schedule, tiles, stages,
               None if out is None else (out.shape, out.stride(), out.dtype, out.device), scale,
               None if kv_lengths is None else (kv_lengths.shape, kv_lengths.dtype,
                                                kv_lengths.device))
        launch = _LAUNCHES.get(key)
    except (AttributeError, TypeError):   # not tensors, or an unhashable argument
        problem_from_tensors(q, k, v, causal, out)      # names the tensor that is not one
        if kv_lengths is not None:
            check_lengths(kv_lengths, q)
        raise BadInput(f"tiles={tiles!r}, order={order!r}, schedule={schedule!r}: pass a Tiles "
                       "or a (TILE_M, TILE_N) tuple, and strings or spec objects") from None
    if launch is None:
        launch = _new_launch(q, k, v, out, causal, order, schedule, tiles, stages, scale,
                             kv_lengths)
        _LAUNCHES[key] = launch
    return launch

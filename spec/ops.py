"""What the two families' PyTorch operators share (``kernels.host.op``, ``cuda_baseline.host.op``).

A ``torch.library`` operator takes tensors, scalars and strings: ``op_spelling`` turns the user
function's order, schedule and tiles arguments (strings or spec objects) into labels and ints,
and ``check_metadata`` is the eager path's tensor check (``spec.family.problem_from_tensors``) as
the operators' fake implementations run it while ``torch.compile`` traces: on fake tensors,
where a shape may be symbolic (dynamic shapes); ``check_lengths`` the same for ``kv_lengths``.
Nothing here imports torch.
"""
from __future__ import annotations

import math

from .family import BadInput, problem_from_tensors
from .orders import ScanOrder
from .problem import InvalidProblem, Tiles
from .schedules import CtaSchedule


def op_spelling(order: str | ScanOrder, schedule: str | CtaSchedule | None,
                tiles: Tiles | tuple[int, int] | None
                ) -> tuple[str, str | None, int | None, int | None]:
    """(order label, schedule label or None, TILE_M or None, TILE_N or None)."""
    if tiles is not None and not isinstance(tiles, Tiles):
        if len(tiles) != 2:
            raise BadInput(f"tiles={tiles!r}: pass a Tiles or (TILE_M, TILE_N)")
        tiles = Tiles(*tiles)
    return (order if isinstance(order, str) else order.label,
            schedule if schedule is None or isinstance(schedule, str) else schedule.label,
            None if tiles is None else tiles.m, None if tiles is None else tiles.n)


def resolve_scale(scale, head_dim: int) -> float:
    """The softmax scale of an attention call, as SDPA's ``scale=``: None means ``1/sqrt(D)``;
    a finite positive number is taken as given. A bool, a non-number, a non-finite value or a
    scale <= 0 is a ``BadInput``: the kernels fold the scale into the running row maximum
    (``max(s)·scale`` is the maximum of ``s·scale`` only for scale > 0) and mask before scaling,
    so a scale <= 0 would give a silently wrong result (SDPA's own flash backend returns NaN for
    a negative scale with ``is_causal``)."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise BadInput(f"scale={scale!r}: pass a float (the softmax scale, as SDPA's scale=) or "
                       "None for 1/sqrt(head_dim)")
    if not math.isfinite(scale) or scale <= 0:
        raise BadInput(f"scale={scale!r}: the softmax scale must be a finite number > 0 (or "
                       "None for 1/sqrt(head_dim))")
    return float(scale)


def check_metadata(q, k, v, causal: bool, out=None) -> None:
    """Every ``BadInput`` of ``problem_from_tensors`` (dtype, device, rank, head dim, the last
    stride, shapes that disagree); a problem whose sizes are symbolic is not built (a
    ``Problem`` holds ints), and a non-positive size is refused where the sizes are ints."""
    try:
        problem_from_tensors(q, k, v, causal, out)
    except InvalidProblem:
        if all(isinstance(d, int) for t in (q, k) for d in t.shape):
            raise


def check_lengths(kv_lengths, q) -> None:
    """One line for per-sequence cache lengths that are not an int32 tensor [B] on q's device.
    Their values are not read: that would need a device sync per call and breaks CUDA-graph
    capture; the decode kernels clamp a length above S_kv to S_kv and treat a negative one as 0.
    Also on fake tensors (their dtype, shape and device are real)."""
    shape = getattr(kv_lengths, "shape", None)
    ok = (shape is not None and str(getattr(kv_lengths, "dtype", "")) == "torch.int32"
          and getattr(kv_lengths, "device", None) == q.device and len(shape) == 1
          and shape[0] == q.shape[0])
    if not ok:
        what = (f"{kv_lengths.dtype} {tuple(shape)} on {kv_lengths.device}"
                if shape is not None and hasattr(kv_lengths, "device")
                else type(kv_lengths).__name__)
        raise BadInput(f"kv_lengths: {what}; pass an int32 tensor of shape ({q.shape[0]},) on "
                       f"{q.device} (one cache length per batch entry)")

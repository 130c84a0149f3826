"""One front for both kernel families: ``attention()`` as users call it, written once.

    >>> from kernels import attention            # or: from cuda_baseline import attention
    >>> out = attention(q, k, v, causal=True, order="sawtooth")

A family hands ``make_attention`` a ``Family`` (its eager forward with its cached launches, its
backward, the layout of its log-sum-exp buffer, its build knobs) and gets back its user function;
everything else is here, once: the argument set and its meaning, the three ``torch.library``
operators (``sawtooth::<name>_attention`` returning (out, lse), ``..._attention_out`` writing
``out``, ``..._attention_backward``) with their fake implementations and registered autograd, and
the eager ``autograd.Function``.

The arguments mean the same in both families. ``order`` is the scan order of the forward's K/V
loop *and* of the backward (dK/dV's Q scan, dQ's K/V scan) unless ``backward_order`` names
another; ``schedule`` / ``tiles`` are the forward's CTA schedule and tiles,
``backward_schedule`` / ``backward_tiles`` the backward's (None: the family's defaults); ``scale``
is SDPA's ``scale=``. What only one family builds is a *knob*, named in ``Family.knobs`` and
listed in the function's signature after the shared arguments (cuTile: ``occupancy``, ``arch``,
``level``; CUDA: ``stages``, ``backward_options``).

Why the eager path bypasses the dispatcher: outside ``torch.compile`` a call that needs no
gradient goes straight to the family's cached launch (one lookup, one launch: the ``hostpath``
study measures 13-14 us per call against 31 us through the operator); with a gradient it takes
``_EagerAttention`` (the same forward and backward as the operator's registered autograd, no
dispatch). Under ``torch.compile`` the traced program calls the operators. Importing this module
imports torch; ``spec``'s package import does not import it.
"""
from __future__ import annotations

import ast
import inspect
from functools import lru_cache, partial
from typing import Any, Callable, Optional

import torch
from torch.autograd.function import once_differentiable

from .family import BadInput
from .ops import check_lengths, check_metadata, op_spelling, resolve_scale
from .problem import Tiles

Tensor = torch.Tensor

SHARED = ("causal", "order", "schedule", "tiles", "scale", "out", "kv_lengths", "backward_order",
          "backward_schedule", "backward_tiles")
"""The keyword arguments of every family's ``attention()``, in order; the knobs follow."""


class Family:
    """What a kernel family gives the front. ``name`` names its operators; ``knobs`` maps each
    family-specific keyword to its default.

    ``forward(q, k, v, out, save_lse, causal, order, schedule, tiles, scale, kv_lengths,
    **knobs)`` returns (out, lse or None): the eager forward (``out`` None: allocate like q),
    with ``save_lse`` the training build that also stores the log-sum-exp; ``kv_lengths`` None
    or the checked per-sequence cache lengths (an inference call: never with ``save_lse``).
    ``backward(dout, q, k, v, out, lse, causal, scale, order, schedule, tiles, **knobs)``
    returns (dq, dk, dv). ``train_forward`` is the eager training call's forward: (out, lse, a
    backward for them), so a family can prepare both halves of a step once per launch key.
    ``lse_like(q)`` allocates the log-sum-exp buffer the training forward
    returns and ``grad_like(t)`` a gradient of ``t`` as ``backward`` lays it out (both also on
    fake tensors). ``check(q, k, v, causal, out, kv_lengths)`` is the metadata check the fake
    implementations run while tracing. ``check_training(knobs)`` refuses, in one line, knobs
    that have no backward."""

    name: str = ""
    knobs: dict[str, Any] = {}

    def forward(self, q, k, v, out, save_lse, causal, order, schedule, tiles, scale,
                kv_lengths=None, **knobs):
        raise NotImplementedError

    def backward(self, dout, q, k, v, out, lse, causal, scale, order, schedule, tiles, **knobs):
        raise NotImplementedError

    def train_forward(self, q, k, v, causal, order, schedule, tiles, scale, border, bschedule,
                      btiles, **knobs) -> tuple[Tensor, Tensor, Callable]:
        """(out, lse, backward): the training forward and ``backward(dout, q, k, v, out, lse)
        -> (dq, dk, dv)`` with the backward's ``border`` / ``bschedule`` / ``btiles``; by
        default ``forward`` and ``self.backward`` bound to the call's arguments."""
        out, lse = self.forward(q, k, v, None, True, causal, order, schedule, tiles, scale,
                                **knobs)
        return out, lse, partial(self.backward, causal=causal, scale=scale, order=border,
                                 schedule=bschedule, tiles=btiles, **knobs)

    def lse_like(self, q) -> Tensor:
        """``lse_buffer(q)``: the one layout of both families (also on fake tensors)."""
        return lse_buffer(q)

    def grad_like(self, t) -> Tensor:
        """The layout ``backward`` returns a gradient of ``t`` in (also on fake tensors)."""
        return torch.empty_like(t)

    def check(self, q, k, v, causal, out=None, kv_lengths=None) -> None:
        check_metadata(q, k, v, causal, out)
        if kv_lengths is not None:
            check_lengths(kv_lengths, q)

    def check_training(self, knobs: dict) -> None:
        """Nothing to refuse by default."""


def lse_buffer(q) -> Tensor:
    """[B, H, S_q] fp32, rows padded to 16 bytes: the log-sum-exp (and Δ) layout of both
    families (the cuTile kernels read it with TMA copies, which need 16-byte row strides).
    Where S_q is a multiple of 4 the rows need no padding and a plain allocation has the same
    strides (``empty_strided`` costs the host a few us more per call, twice a training step)."""
    B, H, S, _ = q.shape
    if S % 4 == 0:
        return torch.empty((B, H, S), dtype=torch.float32, device=q.device)
    sp = (S + 3) // 4 * 4
    return torch.empty_strided((B, H, S), (H * sp, sp, 1), dtype=torch.float32,
                               device=q.device)


@lru_cache(maxsize=None)
def _tiles(tile_m, tile_n):
    return None if tile_m is None else Tiles(tile_m, tile_n)


@lru_cache(maxsize=None)
def _knobs(text: str) -> dict:
    """The knobs back from ``knob_text``: each ``name=repr(value)`` (None, a number or a string)."""
    if not text:
        return {}
    return {n: ast.literal_eval(v) for n, v in (item.split("=", 1) for item in text.split("|"))}


@torch.compiler.assume_constant_result
def knob_text(knobs: dict) -> str:
    """The operators' ``knobs`` argument (a schema takes no dict): ``name=repr(value)`` joined by
    ``|``, sorted by name; under ``torch.compile`` a constant of the traced graph."""
    return "|".join(f"{n}={v!r}" for n, v in sorted(knobs.items()))


def _scale_arg(scale) -> Optional[float]:
    """The operators' ``scale`` argument (a float or None), checked like the eager path's."""
    if scale is None:
        return None
    resolve_scale(scale, 64)           # the one-line BadInput for a bad value
    return float(scale)


def _needs_grad(q, k, v) -> bool:
    return torch.is_grad_enabled() and any(
        isinstance(t, Tensor) and t.requires_grad for t in (q, k, v))


class _EagerAttention(torch.autograd.Function):
    """The differentiable eager call: the family's training forward (with the log-sum-exp) and
    the backward it prepared for it (``Family.train_forward``), without the dispatcher's
    per-call cost; the operator's registered autograd runs the same kernels. The call's
    arguments travel as one tuple: ``apply`` pays per argument it is given."""

    @staticmethod
    def forward(ctx, fam, args, q, k, v):
        out, lse, ctx.run_backward = fam.train_forward(q, k, v, *args[:-1], **args[-1])
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    @once_differentiable        # no double backward: one line from autograd if asked
    def backward(ctx, dout):
        return (None, None) + tuple(ctx.run_backward(dout, *ctx.saved_tensors))


def register(fam: Family) -> Callable:
    """Register ``fam``'s three operators (op, fake, autograd); returns the forward operator."""
    name = f"sawtooth::{fam.name}_attention"

    @torch.library.custom_op(name, mutates_args=())
    def attention_op(q: Tensor, k: Tensor, v: Tensor, causal: bool, order: str,
                     schedule: Optional[str], tile_m: Optional[int], tile_n: Optional[int],
                     scale: Optional[float], save_lse: bool, backward_order: str,
                     backward_schedule: Optional[str], backward_tile_m: Optional[int],
                     backward_tile_n: Optional[int], knobs: str,
                     kv_lengths: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
        out, lse = fam.forward(q, k, v, None, save_lse, causal, order, schedule,
                               _tiles(tile_m, tile_n), scale, kv_lengths, **_knobs(knobs))
        return out, lse if lse is not None else q.new_empty((0,), dtype=torch.float32)

    @attention_op.register_fake
    def _(q, k, v, causal, order, schedule, tile_m, tile_n, scale, save_lse, backward_order,
          backward_schedule, backward_tile_m, backward_tile_n, knobs, kv_lengths=None):
        fam.check(q, k, v, causal, None, kv_lengths)
        lse = fam.lse_like(q) if save_lse else q.new_empty((0,), dtype=torch.float32)
        return torch.empty_like(q), lse

    @torch.library.custom_op(f"{name}_backward", mutates_args=())
    def backward_op(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                    causal: bool, scale: Optional[float], order: str, schedule: Optional[str],
                    tile_m: Optional[int], tile_n: Optional[int], knobs: str
                    ) -> tuple[Tensor, Tensor, Tensor]:
        return fam.backward(dout, q, k, v, out, lse, causal, scale, order, schedule,
                            _tiles(tile_m, tile_n), **_knobs(knobs))

    @backward_op.register_fake
    def _(dout, q, k, v, out, lse, causal, scale, order, schedule, tile_m, tile_n, knobs):
        return fam.grad_like(q), fam.grad_like(k), fam.grad_like(v)

    def setup_context(ctx, inputs, output):
        (q, k, v, causal, _, _, _, _, scale, save_lse, border, bschedule, btm, btn,
         knobs, _) = inputs
        out, lse = output
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (causal, scale, border, bschedule, btm, btn, knobs)
        ctx.save_lse = save_lse

    def backward(ctx, dout, _dlse):
        if not ctx.save_lse:
            raise RuntimeError(f"{fam.name} attention: this output was computed without the "
                               "log-sum-exp (no input required grad when it ran); call it "
                               "again with grad enabled to differentiate it")
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = backward_op(dout, q, k, v, out, lse, *ctx.args)
        return (dq, dk, dv) + (None,) * 13

    torch.library.register_autograd(name, backward, setup_context=setup_context)

    @torch.library.custom_op(f"{name}_out", mutates_args=("out",))
    def out_op(q: Tensor, k: Tensor, v: Tensor, out: Tensor, causal: bool, order: str,
               schedule: Optional[str], tile_m: Optional[int], tile_n: Optional[int],
               scale: Optional[float], knobs: str, kv_lengths: Optional[Tensor] = None) -> None:
        fam.forward(q, k, v, out, False, causal, order, schedule, _tiles(tile_m, tile_n), scale,
                    kv_lengths, **_knobs(knobs))

    @out_op.register_fake
    def _(q, k, v, out, causal, order, schedule, tile_m, tile_n, scale, knobs, kv_lengths=None):
        fam.check(q, k, v, causal, out, kv_lengths)

    return attention_op


def make_attention(fam: Family) -> Callable:
    """``fam``'s ``attention()``: the shared arguments (``SHARED``), then ``fam.knobs``."""
    attention_op = register(fam)
    out_op = getattr(torch.ops.sawtooth, f"{fam.name}_attention_out")
    defaults = dict(fam.knobs)

    def attention(q, k, v, *, causal=False, order="linear", schedule=None, tiles=None,
                  scale=None, out=None, kv_lengths=None, backward_order=None,
                  backward_schedule=None, backward_tiles=None, **knobs):
        if knobs:
            unknown = knobs.keys() - defaults.keys()
            if unknown:
                raise TypeError(f"attention() got unexpected keyword {sorted(unknown)[0]!r}; "
                                f"the {fam.name} family's own knobs are "
                                f"{', '.join(defaults) or 'none'}")
            knobs = {**defaults, **knobs}
        else:
            knobs = defaults
        if _needs_grad(q, k, v):
            if kv_lengths is not None:
                raise BadInput("attention(kv_lengths=...) has no backward (a decode call over a "
                               "cache) and q, k or v requires grad: call it under "
                               "torch.no_grad(), or pass no lengths to train")
            if out is not None:
                raise BadInput("attention(out=...) cannot be differentiated and q, k or v "
                               "requires grad: drop out= (the result is then differentiable) "
                               "or call it under torch.no_grad()")
            fam.check_training(knobs)
            border = order if backward_order is None else backward_order
            if not torch.compiler.is_compiling():
                return _EagerAttention.apply(fam, (causal, order, schedule, tiles, scale,
                                                   border, backward_schedule, backward_tiles,
                                                   knobs), q, k, v)
            o, s, tm, tn = op_spelling(order, schedule, tiles)
            bo, bs, btm, btn = op_spelling(border, backward_schedule, backward_tiles)
            return attention_op(q, k, v, causal, o, s, tm, tn, _scale_arg(scale), True, bo, bs,
                                btm, btn, knob_text(knobs))[0]
        if torch.compiler.is_compiling():
            o, s, tm, tn = op_spelling(order, schedule, tiles)
            if out is None:
                return attention_op(q, k, v, causal, o, s, tm, tn, _scale_arg(scale), False, o,
                                    None, None, None, knob_text(knobs), kv_lengths)[0]
            out_op(q, k, v, out, causal, o, s, tm, tn, _scale_arg(scale), knob_text(knobs),
                   kv_lengths)
            return out
        return fam.forward(q, k, v, out, False, causal, order, schedule, tiles, scale,
                           kv_lengths, **knobs)[0]

    params = list(inspect.signature(attention).parameters.values())[:-1]
    params += [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=d)
               for n, d in defaults.items()]
    attention.__signature__ = inspect.Signature(params)
    attention.__qualname__ = attention.__name__ = "attention"
    attention.family = fam
    return attention


ATTENTION_DOC = """Attention ``softmax(q kᵀ · scale) v`` with the {family} kernel family, as a
PyTorch operator (eager, CUDA graphs, ``torch.compile(fullgraph=True)``, autograd).

q: [B, H, S_q, D]; k, v: [B, H_kv, S_kv, D] (H_kv divides H: GQA/MQA); fp16 or bf16 on one CUDA
GPU; D in (64, 128); the last dimension contiguous. ``causal`` masks top-left aligned (SDPA's
``is_causal``). ``order``: "linear", "sawtooth[X]", "reverse", "blockparity" or a
``spec.ScanOrder``: the K/V scan of the forward and, unless ``backward_order`` names another,
the scan of the backward's passes. ``schedule``: "grid", "tile<X>", "static<P>", "static<P>h",
"snake<P>", "lpt<P>", "glpt<G>", a ``spec.CtaSchedule`` or None (the family's default);
``tiles``: (TILE_M, TILE_N) or None. ``backward_schedule``: "grid" or "static<P>" (None: the
default); ``backward_tiles``: (TILE_M query rows, TILE_N keys) of the backward's tiles (None:
the default). ``scale``: SDPA's ``scale=`` (None: 1/sqrt(D)). ``out``: write the result there
(no gradient then). ``kv_lengths``: an int32 tensor [B] on q's device, each sequence's cache
length (keys from it on are ignored; ``causal`` then aligns each sequence's last query row with
its last valid key, as FlashAttention's ``cache_seqlens``); read on the device only (eager,
``torch.compile`` and CUDA graphs alike), for inference calls of at most 16 query rows per head
(the decode kernels). With grad enabled and q, k or v requiring grad, the forward also stores the
log-sum-exp and the result is differentiable. Returns the output tensor.

Knobs of this family: {knobs}
"""

"""``kernels.attention``: the cuTile family behind the one front (``spec.front``).
The user's examples are in the ``kernels`` package docstring.

The operators are ``sawtooth::cutile_attention`` (returns (out, lse)), ``..._out`` and
``..._backward``, registered by ``spec.front.register``. The forward is
``kernels.host.backend.attention`` (the training build ``fmha_fwd_lse`` stores the log-sum-exp
in ``spec.front.lse_buffer``: [B, H, S_q] fp32 with rows padded to 16 bytes, so the backward's
loads of it are TMA copies); the backward is ``kernels.host.backward.attention_backward`` (Δ,
dK/dV scanning Q tiles, dQ scanning K/V tiles, both in the call's backward order; without a
mask at D=128, and at D=64 from 2048 query rows on, one pass that makes both, unless
``torch.use_deterministic_algorithms``).
Knobs: ``occupancy`` (CTAs per SM hint; None: the configuration's), ``arch`` (None: the GPU
present; a named arch must be it), ``level`` (the tuning ladder 1..6; the backward needs >= 2).
"""
from __future__ import annotations

from kernels.host import backend, backward
from spec.family import UnsupportedVariant
from spec.front import ATTENTION_DOC, Family, lse_buffer, make_attention


class CutileFront(Family):
    name = "cutile"
    knobs = {"occupancy": None, "arch": None, "level": 6}

    def forward(self, q, k, v, out, save_lse, causal, order, schedule, tiles, scale,
                kv_lengths=None, occupancy=None, arch=None, level=6):
        lse = backward.stat_buffer(q) if save_lse else None
        out = backend.attention(q, k, v, causal=causal, order=order, schedule=schedule,
                                tiles=tiles, occupancy=occupancy, arch=arch, level=level,
                                out=out, scale=scale, lse=lse, kv_lengths=kv_lengths)
        return out, lse

    def train_forward(self, q, k, v, causal, order, schedule, tiles, scale, border, bschedule,
                      btiles, occupancy=None, arch=None, level=6):
        """The forward's launch looked up once; the backward prepared on it
        (``backward.plan_for``)."""
        launch = backend.launch_for(q, k, v, causal, order, schedule, tiles, occupancy, arch,
                                    level, None, scale, True)
        out, lse = launch.empty_like(q), lse_buffer(q)
        launch(q, k, v, out, lse)
        return out, lse, backward.plan_for(launch, causal=causal, scale=scale, order=border,
                                           schedule=bschedule, tiles=btiles, level=level)

    def backward(self, dout, q, k, v, out, lse, causal, scale, order, schedule, tiles,
                 occupancy=None, arch=None, level=6):
        return backward.attention_backward(dout, q, k, v, out, lse, causal=causal, scale=scale,
                                           order=order, schedule=schedule, tiles=tiles)

    def check_training(self, knobs):
        if knobs["level"] < 2:
            raise UnsupportedVariant(f"level={knobs['level']} has no backward (the log-sum-exp "
                                     "the backward reads needs level >= 2): use level >= 2, or "
                                     "call it under torch.no_grad()")


attention = make_attention(CutileFront())
attention.__doc__ = ATTENTION_DOC.format(
    family="cuTile", knobs="``occupancy`` (CTAs per SM; None: the configuration's), ``arch`` "
    "(None: the GPU present), ``level`` (tuning ladder 1..6, default 6; a gradient needs >= 2).")

"""``cuda_baseline.attention``: the CUDA family behind the one front (``spec.front``).
The user's examples are in the ``cuda_baseline`` package docstring.

The operators are ``sawtooth::cuda_attention`` (returns (out, lse)), ``..._out`` and
``..._backward``, registered by ``spec.front.register``; their fake implementations also check
the CUDA kernels' stride rule (``cuda_baseline.host.backend.check_strides``; the 16-byte
alignment of the addresses is checked by the real call). The forward is
``cuda_baseline.host.launch.attention`` (one prepared parameter block, one driver launch per
repeated call) or, for training, ``training.forward`` (the build that stores the log-sum-exp,
[B, H, S_q] fp32); the backward is ``training.backward`` (Δ, dK/dV scanning Q tiles in the
call's backward order, dQ summed inside it).
Knobs: ``stages`` (the forward's K/V pipeline depth, ``spec.variant.STAGE_RANGE``; None: the
double buffer; training builds only the default) and ``backward_options`` (the backward's
opt-in build options, ``cuda_baseline.build.bwd_source.BwdOption`` names joined by +).
"""
from __future__ import annotations

from functools import lru_cache

from cuda_baseline.build.bwd_source import BWD_OPTION_NAMES, parse_bwd_options
from cuda_baseline.host import launch, training
from cuda_baseline.host.backend import check_strides
from spec.family import BadInput
from spec.front import ATTENTION_DOC, Family, make_attention
from spec.ops import resolve_scale
from spec.variant import DEFAULT_STAGES


@lru_cache(maxsize=None)
def _options(text):
    """``backward_options`` checked when the forward runs (not first at the backward)."""
    if text is not None:
        try:
            parse_bwd_options(text)
        except (ValueError, AttributeError, TypeError):
            raise BadInput(f"backward_options={text!r}: names of "
                           f"{', '.join(BWD_OPTION_NAMES)} joined by + (e.g. 'onepart+dqsq'), "
                           "or None") from None
    return text


class CudaFront(Family):
    name = "cuda"
    knobs = {"stages": None, "backward_options": None}

    def forward(self, q, k, v, out, save_lse, causal, order, schedule, tiles, scale,
                kv_lengths=None, stages=None, backward_options=None):
        if save_lse:
            if kv_lengths is not None:
                raise BadInput("kv_lengths= runs on the decode kernels only, which have no "
                               "gradient: call it under torch.no_grad() or with inputs that do "
                               "not require grad")
            return training.forward(q, k, v, causal, order, schedule, tiles,
                                    resolve_scale(scale, q.shape[-1]))
        return launch.attention(q, k, v, causal=causal, order=order, schedule=schedule,
                                tiles=tiles, stages=stages, out=out, scale=scale,
                                kv_lengths=kv_lengths), None

    def backward(self, dout, q, k, v, out, lse, causal, scale, order, schedule, tiles,
                 stages=None, backward_options=None):
        return training.backward(dout, q, k, v, out, lse, causal, order, schedule,
                                 resolve_scale(scale, q.shape[-1]), tiles, backward_options)

    def grad_like(self, t):
        return t.new_empty(t.shape)           # training.backward returns contiguous gradients

    def check(self, q, k, v, causal, out=None, kv_lengths=None):
        super().check(q, k, v, causal, out, kv_lengths)
        check_strides(q, k, v, out)

    def check_training(self, knobs):
        stages = knobs["stages"]
        if stages is not None and stages != DEFAULT_STAGES:
            raise BadInput(f"stages={stages} has no training build; leave stages None to train")
        _options(knobs["backward_options"])


attention = make_attention(CudaFront())
attention.__doc__ = ATTENTION_DOC.format(
    family="raw CUDA", knobs="``stages`` (K/V pipeline depth; None: the double buffer; a "
    "gradient needs the default), ``backward_options`` (opt-in backward build options, "
    "e.g. 'onepart+dqv4').")

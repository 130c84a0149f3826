"""NaN-poisoned allocations for the gradient tests (audit G3, G4).

``poisoned_allocations()`` replaces ``torch.empty``, ``torch.empty_like`` and
``torch.empty_strided`` for the duration of a ``with`` block: every floating-point CUDA tensor
they return is filled with NaN first and recorded. Code under test that allocates its outputs and
scratch (the gradients, the fp32 split partials, Δ, the log-sum-exp, the fp32 dQ accumulator)
therefore starts from NaN whatever the caching allocator would have handed it, and
``unwritten(made, S_q)`` names every recorded buffer that still holds a NaN afterwards (a stat
buffer's row padding past ``S_q``, which no kernel writes, aside). Call the code once outside the
block first, so that cached launch set-ups (which may allocate placeholders they never write)
are built before it.
"""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def poisoned_allocations():
    import torch
    real = {n: getattr(torch, n) for n in ("empty", "empty_like", "empty_strided")}
    made: list = []

    def wrap(name):
        def alloc(*a, **kw):
            t = real[name](*a, **kw)
            if t.is_cuda and t.is_floating_point() and t.numel():
                t.fill_(float("nan"))
                made.append(t)
            return t
        return alloc
    for n in real:
        setattr(torch, n, wrap(n))
    try:
        yield made
    finally:
        for n, f in real.items():
            setattr(torch, n, f)


def unwritten(made, S_q: int) -> list[str]:
    """The recorded buffers holding a NaN: 'shape dtype: N NaN' each. A 3-D fp32 buffer whose
    last dimension is ``S_q`` padded up to a multiple of 4 (a stat buffer allocated with its
    padding) is checked over its first ``S_q`` columns only."""
    import torch
    bad = []
    pad = (S_q + 3) // 4 * 4
    for t in made:
        v = t
        if t.dim() == 3 and t.dtype == torch.float32 and t.shape[-1] == pad != S_q:
            v = t[..., :S_q]
        n = int(torch.isnan(v).sum())
        if n:
            bad.append(f"{tuple(t.shape)} {t.dtype}: {n} NaN")
    return bad

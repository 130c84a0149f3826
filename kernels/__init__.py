"""cuTile Python (``cuda.tile``) FlashAttention forward family of the study.

    import torch
    from kernels import attention
    q, k, v = (torch.randn(2, 8, 1000, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = attention(q, k, v, causal=True)            # eager, CUDA graphs, torch.compile alike
    out = attention(q, k, v, order="sawtooth", schedule="static132")    # a study variant

- ``kernels.attention`` (``kernels.op``): the user function, a ``torch.library`` custom op
  (``sawtooth::cutile_attention``) under ``torch.compile``, one cache lookup and one launch per
  repeated eager call (``kernels.backend.attention``).

- ``kernels.fmha``: the kernel body (one ``*_impl`` for every variant) and the ``@ct.kernel`` entry,
  with the CTA → work mapping and the K/V index map selected by ``ct.Constant`` codes that mirror
  ``spec.OrderKind`` / ``spec.ScheduleKind`` / ``spec.WorkOrder``.
- ``kernels.backend``: ``CutileFamily`` (the ``spec.family.KernelFamily`` protocol) and the
  user-facing ``attention(q, k, v, causal=..., order=..., schedule=...)``.
- ``kernels.fmha_bwd`` / ``kernels.backward``: the backward kernels (Δ, dK/dV scanning Q tiles,
  dQ scanning K/V tiles; spec orders and grid/persistent schedules) and their host side; the
  forward's training build that stores the log-sum-exp is ``kernels.fmha.fmha_fwd_lse``.
- ``kernels.signatures``: JIT-like export signatures for compile-only checks without a GPU.
- ``kernels.toolchain``: tileiras / ptxas checks with actionable messages.
- ``kernels.config``: the measured per-arch defaults, ``kernels/configs/<arch>.json`` (written by
  ``python -m experiments.tuning.tune --arch h100``).
- ``kernels.resources`` / ``kernels.warm``: build resources (spills) and parallel precompilation.
- ``kernels.authors_toolchain``: what each build does per K/V step (``kernels.sass_loops``: MMAs,
  spills, loads per SASS loop), compiled with the paper authors' cuda-tile 1.0.x and the
  project's (``kernels.compile_worker`` in each toolchain's venv, ``kernels.toolchain_venv``,
  ``kernels.cpu_driver``: a libcuda stand-in for machines without a driver).

Importing this package does not import ``cuda.tile`` or ``torch``; the submodules that need them
import them lazily or at their own import (``kernels.attention`` is a lazy attribute: the first
access imports ``kernels.op``, which imports torch and registers the operators).
"""
from spec.install import require_gpu_extra

from .config import LEVELS, KernelConfig, default_config, load_arch_configs  # noqa: F401


def __getattr__(name: str):
    if name == "attention":
        require_gpu_extra(f"{__name__}.attention")
        from .op import attention
        globals()["attention"] = attention       # later accesses skip this hook
        return attention
    raise AttributeError(f"module 'kernels' has no attribute {name!r}")

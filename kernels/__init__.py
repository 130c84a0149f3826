"""cuTile Python (``cuda.tile``) FlashAttention forward family of the study.

- ``kernels.fmha``: the kernel body (one ``*_impl`` for every variant) and the ``@ct.kernel`` entry,
  with the CTA → work mapping and the K/V index map selected by ``ct.Constant`` codes that mirror
  ``spec.OrderKind`` / ``spec.ScheduleKind`` / ``spec.WorkOrder``.
- ``kernels.backend``: ``CutileFamily`` (the ``spec.family.KernelFamily`` protocol) and the
  user-facing ``attention(q, k, v, causal=..., order=..., schedule=...)``.
- ``kernels.signatures``: JIT-like export signatures for compile-only checks without a GPU.
- ``kernels.toolchain``: tileiras / ptxas checks with actionable messages.
- ``kernels.config``: the measured per-arch defaults, ``kernels/configs/<arch>.json`` (written by
  ``python -m experiments.tune --arch h100``).
- ``kernels.resources`` / ``kernels.warm``: build resources (spills) and parallel precompilation.

Importing this package does not import ``cuda.tile`` or ``torch``; the submodules that need them
import them lazily or at their own import.
"""
from .config import KernelConfig, LEVELS, default_config, load_arch_configs  # noqa: F401

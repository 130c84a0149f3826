"""cuTile Python (``cuda.tile``) FlashAttention forward family of the study.

- ``kernels.fmha``: the kernel body (one ``*_impl`` for every variant) and the ``@ct.kernel`` entry,
  with the CTA → work mapping and the K/V index map selected by ``ct.Constant`` codes that mirror
  ``spec.OrderKind`` / ``spec.ScheduleKind`` / ``spec.WorkOrder``.
- ``kernels.backend``: ``CutileBackend`` (the ``spec.backend.AttentionBackend`` protocol) and the
  user-facing ``attention(q, k, v, causal=..., order=..., schedule=...)``.
- ``kernels.signatures``: JIT-like export signatures for compile-only checks without a GPU.
- ``kernels.toolchain``: tileiras / ptxas checks with actionable messages.
- ``kernels.tune``: ``python -m kernels.tune --arch h100`` writes ``kernels/configs/<arch>.json``.
- ``kernels.bench``: correctness + timing beside PyTorch SDPA's flash and cuDNN backends.

Importing this package does not import ``cuda.tile`` or ``torch``; the submodules that need them
import them lazily or at their own import.
"""
from .config import KernelConfig, LEVELS, default_config, load_arch_configs  # noqa: F401

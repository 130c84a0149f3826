"""cuTile Python (``cuda.tile``) FlashAttention family of the study (forward and backward).

    import torch
    from kernels import attention
    q, k, v = (torch.randn(2, 8, 1000, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = attention(q, k, v, causal=True)            # eager, CUDA graphs, torch.compile alike
    out = attention(q, k, v, order="sawtooth", schedule="static132")    # a study variant

Rooms by job (imports go down: host → rules, build → device; ``paper_builds`` beside host):

- ``kernels.device``: the kernel bodies (``fmha``: the forward, one ``*_impl`` for every variant;
  ``fmha_bwd``: Δ, dK/dV, dQ), the CTA → work scheduler (``work``) and the tactic bits
  (``tactics``), selected by ``ct.Constant`` codes that mirror ``spec.OrderKind`` /
  ``spec.ScheduleKind`` / ``spec.WorkOrder``.
- ``kernels.build``: export signatures for compile-only checks without a GPU (``signatures``),
  build resources and spills (``resources``), tileiras / ptxas checks (``toolchain``).
- ``kernels.rules``: the measured per-arch defaults (``config``, ``rules/configs/<arch>.json``,
  written by ``python -m experiments.tuning.tune``) and the rules that pick a forward and a
  backward configuration for a problem (``choice``, ``backward_config``, ``backward_choice``).
- ``kernels.host``: ``CutileFamily`` (``backend``: the ``spec.family.KernelFamily`` protocol), the
  backward's launches (``backward``), the user's ``attention()`` (``op``: ``torch.library``
  operators ``sawtooth::cutile_attention*``; one cache lookup and one launch per repeated eager
  call) and parallel precompilation (``warm``).
- ``kernels.paper_builds``: the paper authors' builds under their toolchain, per-step SASS
  costs; off the kernel path.

Importing this package does not import ``cuda.tile`` or ``torch``; the submodules that need them
import them lazily or at their own import (``kernels.attention`` is a lazy attribute: the first
access imports ``kernels.host.op``, which imports torch and registers the operators).
"""
from spec.install import lazy_attributes

from .rules.config import LEVELS, KernelConfig, default_config, load_arch_configs  # noqa: F401

__getattr__ = lazy_attributes(__name__, {"attention": "host.op"})

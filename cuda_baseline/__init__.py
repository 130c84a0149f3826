"""Raw CUDA split-Q FlashAttention family, compiled at run time through ``cupy.RawModule``.

    import torch
    from cuda_baseline import attention
    q, k, v = (torch.randn(2, 8, 1000, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    out = attention(q, k, v, causal=True)            # eager, CUDA graphs, torch.compile alike
    out = attention(q, k, v, order="sawtooth", schedule="static132", tiles=(80, 80))

The CUDA C++ twin of the cuTile family (kernels/): one templated kernel (device/flash_fwd.cuh, entry
in device/flash_fwd.cu) whose scan order, CTA schedule, tiles, head dim, causal mask, element type
and trace build are template parameters named like the spec's enums. ``attention(q, k, v, ...)`` is
the user function (``cuda_baseline.host.op``: a ``torch.library`` custom op,
``sawtooth::cuda_attention``, under ``torch.compile``; one cache lookup and one driver launch per
repeated eager call, ``cuda_baseline.host.launch``); ``CudaFamily`` implements
spec.family.KernelFamily. Importing this package needs neither a GPU, CuPy nor torch (``attention``
is a lazy attribute: the first access imports torch and registers the operators); compiling and
launching do.
"""
from spec.install import lazy_attributes

from .build.source import TESTED_TILES, Instance, Resources
from .host.backend import CompileError, CudaFamily, Prepared, check_variant, instance_for

__all__ = ["CompileError", "CudaFamily", "Prepared", "attention", "check_variant",
           "instance_for", "Instance", "Resources", "TESTED_TILES"]


__getattr__ = lazy_attributes(__name__, {"attention": "host.op"})

"""Raw CUDA split-Q FlashAttention family, compiled at run time through ``cupy.RawModule``.

The CUDA C++ twin of the cuTile family (kernels/): one templated kernel (flash_fwd.cuh, entry in
flash_fwd.cu) whose scan order, CTA schedule, tiles, head dim, causal mask, element type and trace
build are template parameters named like the spec's enums. ``attention(q, k, v, ...)`` is the user
function; ``CudaFamily`` implements spec.family.KernelFamily. Importing this package needs
neither a GPU nor CuPy; compiling and launching do.
"""
from .backend import CompileError, CudaFamily, Prepared, attention, check_variant, instance_for
from .source import Instance, Resources, TESTED_TILES

__all__ = ["CompileError", "CudaFamily", "Prepared", "attention", "check_variant",
           "instance_for", "Instance", "Resources", "TESTED_TILES"]

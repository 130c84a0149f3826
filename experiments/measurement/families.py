"""The kernel families by name (``spec.Backend``): the one place that imports them (lazily: they
need a GPU stack), so studies, the profiling target, tuning and tests pick a family by its name."""
from __future__ import annotations

from spec import Backend
from spec.family import KernelFamily


def family(backend: Backend, arch: str | None = None) -> KernelFamily:
    """The ``KernelFamily`` named ``backend``; ``arch`` must be the GPU present (None: any)."""
    if backend == Backend.CUTILE:
        from kernels.host.backend import CutileFamily
        return CutileFamily(arch)
    if backend == Backend.CUDA:
        from cuda_baseline.host.backend import CudaFamily
        return CudaFamily(arch)
    raise ValueError(f"no kernel family {backend!r}; known: "
                     f"{', '.join(b.value for b in Backend)}")

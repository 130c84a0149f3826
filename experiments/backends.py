"""The kernel families by ``spec.Backend``: one place that imports them (lazily: they need a GPU
stack) so studies, the profiling target and tests pick a backend by name."""
from __future__ import annotations

from spec import Backend


def get_backend(backend: Backend, arch: str | None = None):
    if backend == Backend.CUTILE:
        from kernels.backend import CutileBackend
        return CutileBackend(arch=arch)
    if backend == Backend.CUDA:
        from cuda_baseline.backend import CudaBackend
        return CudaBackend()
    raise ValueError(f"no backend {backend!r}")

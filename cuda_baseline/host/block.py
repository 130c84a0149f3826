"""``Block``: one prepared driver launch of a CUDA kernel (a parameter block laid out once, the
tensor addresses written per call), shared by the forward's, the training path's and the
decode's launches (``cuda_baseline.host.launch``, ``.training``, ``.decode``). Nothing here
imports torch or CuPy at import time."""
from __future__ import annotations

import struct
import threading


class Block:
    """One prepared launch: the kernel's function handle, its grid, block and shared memory, and
    its parameter block (one 8-byte slot per parameter, ``params`` pointing at each;
    ``cuLaunchKernel`` reads each parameter's own size from its slot, little-endian) whose first
    ``n_ptrs`` slots, the tensor addresses, are written per call. The driver copies the
    parameters at launch, so reusing the block is safe, also under CUDA-graph capture; a lock
    keeps two threads from writing it at once."""

    __slots__ = ("fn", "grid", "threads", "smem", "device", "slots", "view", "params", "pack",
                 "lock", "launch_kernel", "raw_stream")

    def __init__(self, fn, grid: int, threads: int, smem: int, args: tuple, n_ptrs: int,
                 device: int):
        import cupy
        import numpy as np
        import torch
        self.fn, self.grid, self.threads, self.smem, self.device = fn, grid, threads, smem, device
        self.slots = np.zeros(len(args), dtype=np.uint64)
        for i, a in enumerate(args):                    # numpy scalars, in kernel order
            self.slots.view(np.uint8)[8 * i:8 * i + a.nbytes] = np.frombuffer(a.tobytes(),
                                                                               np.uint8)
        self.view = memoryview(self.slots).cast("B")
        self.params = np.array([self.slots.ctypes.data + 8 * i for i in range(len(args))],
                               dtype=np.uint64)
        self.pack = struct.Struct(f"<{n_ptrs}Q").pack_into
        self.lock = threading.Lock()
        self.launch_kernel = cupy.cuda.driver.launchKernel
        self.raw_stream = torch._C._cuda_getCurrentRawStream

    def __call__(self, *ptrs: int) -> None:
        with self.lock:
            self.pack(self.view, 0, *ptrs)
            self.launch_kernel(self.fn, self.grid, 1, 1, self.threads, 1, 1, self.smem,
                               self.raw_stream(self.device), self.params.ctypes.data, 0)

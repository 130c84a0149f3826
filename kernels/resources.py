"""Compile a variant to a cubin and read its resources (registers, stack, spills, occupancy).

Uses ``export_kernel`` with a JIT-like signature (``kernels.signatures``). Without a GPU:
``cuobjdump -res-usage`` (pip package ``nvidia-cuda-cuobjdump``) plus a SASS instruction count
(``resources``). On the GPU: the driver's attributes of the loaded cubin (``load_build``), which
``CutileFamily.prepare`` reports so that every measured cuTile case records its spills.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Resources:
    regs: int
    stack: int
    shared: int
    spill_stores: int
    spill_loads: int
    sass: dict          # instruction counts: HGMMA, UTMALDG, LDL, STL, ...

    def __str__(self) -> str:
        return (f"REG {self.regs} STACK {self.stack} SHARED {self.shared} "
                f"HGMMA {self.sass.get('HGMMA', 0)} UTMALDG {self.sass.get('UTMALDG', 0)} "
                f"LDL {self.sass.get('LDL', 0)} STL {self.sass.get('STL', 0)}")


def find_cuobjdump() -> str | None:
    """cuobjdump from the pip wheel (nvidia-cuda-cuobjdump) or PATH."""
    try:
        import nvidia.cu13 as cu13
        for root in cu13.__path__:
            p = Path(root) / "bin" / "cuobjdump"
            if p.exists():
                return str(p)
    except ImportError:
        pass
    return shutil.which("cuobjdump")


def compile_cubin(case, arch: str, occupancy=None, worker_warps=None) -> bytes:
    from cuda.tile.compilation import export_kernel

    from . import fmha
    from .toolchain import explain_compile_error
    kern = fmha.get_kernel(occupancy, worker_warps)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        try:
            export_kernel(kern, [case.signature()], path, gpu_code=arch, output_format="cubin")
        except Exception as e:  # noqa: BLE001 - rewrapped with a fix hint when it is the toolchain
            raise explain_compile_error(e) from e
        return Path(path).read_bytes()


_RES = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)")
_OPS = ("HGMMA", "HMMA", "UTMALDG", "UTMASTG", "LDG", "STG", "LDL", "STL", "MUFU", "BAR")


def read_resources(cubin: bytes, cuobjdump: str | None = None) -> Resources:
    tool = cuobjdump or find_cuobjdump()
    if tool is None:
        raise FileNotFoundError("cuobjdump not found: pip install nvidia-cuda-cuobjdump")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        Path(path).write_bytes(cubin)
        res = subprocess.run([tool, "-res-usage", path], capture_output=True, text=True,
                             check=True).stdout
        # SASS needs nvdisasm (pip nvidia-cuda-nvdisasm); the counts are optional extras
        sass = subprocess.run([tool, "-sass", path], capture_output=True, text=True).stdout
    m = _RES.search(res)
    if not m:
        raise RuntimeError(f"could not parse cuobjdump -res-usage output:\n{res}")
    counts = {}
    for line in sass.splitlines():
        mm = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9]*)", line)
        if mm:
            op = mm.group(1)
            if op in _OPS:
                counts[op] = counts.get(op, 0) + 1
    spill_st = int(re.search(r"(\d+) bytes spill stores", res).group(1)) if "spill stores" in res else 0
    spill_ld = int(re.search(r"(\d+) bytes spill loads", res).group(1)) if "spill loads" in res else 0
    return Resources(int(m.group(1)), int(m.group(2)), int(m.group(3)), spill_st, spill_ld, counts)


def resources(case, arch: str, occupancy=None, worker_warps=None) -> Resources:
    return read_resources(compile_cubin(case, arch, occupancy, worker_warps))


@dataclass(frozen=True)
class LoadedBuild:
    """A cuTile build as the driver sees it on the GPU present: the facts ``CutileFamily.prepare``
    reports (``spec.family.PREPARED_FIELDS``)."""

    symbol: str
    threads: int          # the thread count the build requires (REQNTID), as the driver reports it
    registers: int
    local_bytes: int      # per-thread local memory (stack, spills)
    smem_bytes: int       # static shared memory per CTA
    ctas_per_sm: int      # cuOccupancyMaxActiveBlocksPerMultiprocessor at that thread count


def load_build(case, arch: str, occupancy=None, worker_warps=None,
               device_index: int = 0) -> LoadedBuild:
    """Export ``case`` (a ``kernels.signatures.CompileCase``) for ``arch`` with the JIT's
    specialisation facts, load the cubin with the driver and read its attributes and occupancy.
    The JIT-like export is the cubin the compile-only tests check (``kernels.signatures``); the
    disk cache of cuda.tile makes a second export of the same case a lookup."""
    import cupy
    symbol = case.signature().symbol
    cubin = compile_cubin(case, arch, occupancy, worker_warps)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        Path(path).write_bytes(cubin)
        with cupy.cuda.Device(device_index):
            fn = cupy.RawModule(path=path).get_function(symbol)
            threads = int(fn.max_threads_per_block)
            per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
                fn.kernel.ptr, threads, 0)
            return LoadedBuild(symbol, threads, int(fn.num_regs), int(fn.local_size_bytes),
                               int(fn.shared_size_bytes), int(per_sm))

"""Compile a variant to a cubin and read its resources (registers, stack, spills, occupancy).

Uses ``export_kernel`` with a JIT-like signature (``kernels.build.signatures``). Without a GPU:
``cuobjdump --dump-resource-usage`` (pip package ``nvidia-cuda-cuobjdump``), instruction counts
of the PTX embedded in the cubin and, where nvdisasm is installed, of the SASS (``resources``). On
the GPU: the driver's attributes of the loaded cubin (``load_build``), which
``CutileFamily.prepare`` reports so that every measured cuTile case records its spills.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Resources:
    """What ``cuobjdump --dump-resource-usage`` prints per kernel (``REG``, ``STACK``: the stack
    frame, where ptxas puts spilled registers, ``SHARED``, ``LOCAL``: local memory per thread)
    plus instruction counts. It prints no spill byte counts (those are ptxas's ``-v`` report), so
    a spill shows here as ``stack`` or ``local`` above 0 and as LDL/STL in the SASS.

    ``ptx`` counts instructions of the PTX that tileiras embeds in the cubin (its
    ``.nv_debug_ptx_txt`` section, ``embedded_ptx``): always there, no extra tool needed.
    ``sass`` counts SASS instructions when asked (``sass=True``: 0.5 s a cubin, the rest 5 ms),
    which needs nvdisasm (pip ``nvidia-cuda-nvdisasm``); None without."""

    regs: int
    stack: int
    shared: int
    local: int
    ptx: dict                    # TMA, WGMMA, LD_LOCAL, ST_LOCAL (``ptx_counts``)
    sass: dict | None            # HGMMA, UTMALDG, LDL, STL, ...
    threads: int | None = None   # the CTA size the kernel requires (``required_threads``)

    @property
    def spills(self) -> bool:
        return bool(self.stack or self.local)

    def __str__(self) -> str:
        sass = "no SASS" if self.sass is None else (
            f"HGMMA {self.sass.get('HGMMA', 0)} UTMALDG {self.sass.get('UTMALDG', 0)} "
            f"LDL {self.sass.get('LDL', 0)} STL {self.sass.get('STL', 0)}")
        return (f"REG {self.regs} STACK {self.stack} SHARED {self.shared} LOCAL {self.local} "
                f"THREADS {self.threads} PTX tma {self.ptx.get('TMA_LOAD', 0)} wgmma "
                f"{self.ptx.get('WGMMA', 0)}; {sass}")


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


def _export_cubin(kern, case, arch: str) -> bytes:
    """``kern`` exported for ``case``'s JIT-like signature as an ``arch`` cubin."""
    from cuda.tile.compilation import export_kernel

    from kernels.build.toolchain import explain_compile_error
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        try:
            export_kernel(kern, [case.signature()], path, gpu_code=arch, output_format="cubin")
        except Exception as e:  # noqa: BLE001 - rewrapped with a fix hint when it is the toolchain
            raise explain_compile_error(e) from e
        return Path(path).read_bytes()


def compile_cubin(case, arch: str, occupancy=None, worker_warps=None) -> bytes:
    from kernels.device import fmha
    return _export_cubin(fmha.get_kernel(occupancy, worker_warps), case, arch)


EIATTR_REQNTID = 0x10
"""The ``.nv.info.<kernel>`` attribute holding ``.reqntid`` (x, y, z), as ``cuobjdump -elf``
names it."""
_EIFMT_SVAL = 0x04


def required_threads(cubin: bytes) -> int | None:
    """Threads per CTA a cubin's kernel requires (its ``.reqntid``), read from the ELF's
    ``.nv.info.<kernel>`` records; None when the kernel states none.

    Why it matters: the occupancy of a build is a function of the CTA size it is *launched* with.
    ``CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`` is the largest size the registers allow (512 for
    the sawtooth study's 128-register cuTile builds), not the launch size; asked at 512 threads the
    driver answers 1 CTA per SM, while ncu shows those builds launched with 256 threads and 2 CTAs
    per SM (limit 2 by registers and by shared memory, ``profiles/h100/occupancy-20261125``).
    Each record is a 4-byte header (format, attribute, 16-bit value or payload size); only the
    ``EIFMT_SVAL`` format carries a payload."""
    for name, off, size in elf_sections(cubin):
        if not name.startswith(b".nv.info."):
            continue
        i = off
        while i + 4 <= off + size:
            fmt, attr, val = struct.unpack_from("<BBH", cubin, i)
            if fmt == _EIFMT_SVAL and attr == EIATTR_REQNTID:
                x, y, z = struct.unpack_from("<III", cubin, i + 4)
                return x * y * z
            i += 4 + (val if fmt == _EIFMT_SVAL else 0)
    return None


PTXAS_RESOURCES = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")
_OPS = ("HGMMA", "HMMA", "UTMALDG", "UTMASTG", "LDG", "STG", "LDL", "STL", "MUFU", "BAR")


PTX_SECTION = b".nv_debug_ptx_txt"
_PTX_OPS = {"TMA_LOAD": re.compile(r"cp\.async\.bulk\.tensor\.\w+\.shared::\w+\.global"),
            "TMA_STORE": re.compile(r"cp\.async\.bulk\.tensor\.\w+\.global\.shared"),
            "TMA_REDUCE": re.compile(r"cp\.reduce\.async\.bulk\.tensor"),
            "ATOMIC": re.compile(r"\b(?:atom|red)\.(?:global|shared|relaxed|acq|release|gpu)"),
            "WGMMA": re.compile(r"wgmma\.mma_async"),
            "MMA_SYNC": re.compile(r"\bmma\.sync"),
            "LD_LOCAL": re.compile(r"\bld\.local"), "ST_LOCAL": re.compile(r"\bst\.local")}


def elf_sections(cubin: bytes):
    """(name, offset, size) of every section of a 64-bit ELF."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not a 64-bit ELF cubin")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names = sections[shstrndx][4]
    for name_off, _, _, _, off, size in sections:
        start = names + name_off
        yield cubin[start:cubin.index(b"\0", start)], off, size


def embedded_ptx(cubin: bytes) -> str | None:
    """The PTX text tileiras embeds in the cubin (section ``.nv_debug_ptx_txt``), or None."""
    for name, off, size in elf_sections(cubin):
        if name == PTX_SECTION:
            return cubin[off:off + size].decode("utf-8", "replace")
    return None


def ptx_counts(ptx: str) -> dict:
    """Occurrences of the instructions that decide a Hopper build's path (``_PTX_OPS``): TMA
    tensor loads and stores (``cp.async.bulk.tensor``: UTMALDG / UTMASTG in SASS), warpgroup
    MMAs (``wgmma.mma_async``: HGMMA), warp MMAs (``mma.sync``: HMMA) and local loads/stores."""
    return {op: len(rx.findall(ptx)) for op, rx in _PTX_OPS.items()}


def read_resources(cubin: bytes, cuobjdump: str | None = None, sass=False) -> Resources:
    tool = cuobjdump or find_cuobjdump()
    if tool is None:
        raise FileNotFoundError("cuobjdump not found: pip install nvidia-cuda-cuobjdump")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        Path(path).write_bytes(cubin)
        res = subprocess.run([tool, "--dump-resource-usage", path], capture_output=True,
                             text=True, check=True).stdout
        # SASS needs nvdisasm (pip nvidia-cuda-nvdisasm): without it cuobjdump fails
        sass = sass and subprocess.run([tool, "-sass", path], capture_output=True, text=True)
    m = PTXAS_RESOURCES.search(res)
    if not m:
        raise RuntimeError(f"could not parse cuobjdump --dump-resource-usage output:\n{res}")
    counts = None
    if sass and sass.returncode == 0:
        counts = {}
        for line in sass.stdout.splitlines():
            mm = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9]*)", line)
            if mm and mm.group(1) in _OPS:
                counts[mm.group(1)] = counts.get(mm.group(1), 0) + 1
    ptx = embedded_ptx(cubin)
    if ptx is None:
        raise RuntimeError(f"the cubin has no {PTX_SECTION.decode()} section: tileiras no longer "
                           "embeds its PTX; update kernels.build.resources.embedded_ptx")
    regs, stack, shared, local = (int(g) for g in m.groups())
    return Resources(regs, stack, shared, local, ptx_counts(ptx), counts,
                     required_threads(cubin))


def resources(case, arch: str, occupancy=None, worker_warps=None, sass=False) -> Resources:
    return read_resources(compile_cubin(case, arch, occupancy, worker_warps), sass=sass)


LAUNCH_FACTS_DIR = "sawtooth-launch-facts"
"""Where ``launch_facts`` keeps what it read off exported cubins: a directory beside cuda.tile's
own cubin cache (``$CUDA_TILE_CACHE_DIR``, by default ``~/.cache/cutile-python``); no cache when
that one is turned off."""


@functools.cache
def _toolchain_fingerprint() -> dict:
    """What an exported cubin and its cuobjdump reading depend on besides the case: the sources
    of ``kernels/`` and ``spec/`` (the kernel and the constants it imports), the installed
    cuda-tile and NVIDIA wheels, and the tileiras, ptxas and cuobjdump files that would run (path,
    size, mtime) with ``CUDA_HOME``. Read once per process."""
    import hashlib
    import importlib.metadata as md
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for path in sorted([*root.joinpath("kernels").rglob("*.py"),
                        *root.joinpath("spec").rglob("*.py")]):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    dists = sorted({(d.metadata["Name"] or "", d.version) for d in md.distributions()
                    if (d.metadata["Name"] or "").lower().startswith(("cuda-tile", "nvidia-"))})
    from cuda.tile._compile import _find_compiler_bin
    tileiras = _find_compiler_bin().path
    tools = {}
    for name, exe in (("tileiras", tileiras),
                      ("ptxas", shutil.which("ptxas", path=os.path.dirname(tileiras))
                       or shutil.which("ptxas")),
                      ("cuobjdump", find_cuobjdump())):
        st = os.stat(exe) if exe else None
        tools[name] = [exe, st.st_size, st.st_mtime_ns] if st else None
    return {"sources": h.hexdigest(), "dists": dists, "tools": tools,
            "cuda_home": os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")}


def launch_facts(case, arch: str, occupancy=None, worker_warps=None) -> tuple[int | None, int,
                                                                             int]:
    """(threads the kernel requires, registers, SHARED) of ``case``'s cubin for ``arch``, as
    ``resources`` reads them, kept on disk (``LAUNCH_FACTS_DIR``) under a key of the case, the
    arch, the hints and ``_toolchain_fingerprint``: a second run of the same builds reads them
    back instead of exporting each cubin again (about 1 s per build). Any change to the kernel
    sources or the toolchain is another key, so a stale entry is never read."""
    import hashlib
    import json
    from dataclasses import asdict

    from cutile_cache._env import get_cache_dir_from_env
    base = get_cache_dir_from_env()
    key = None
    if base is not None:
        try:
            key = hashlib.sha256(json.dumps(
                {"case": asdict(case), "arch": arch, "occupancy": occupancy,
                 "worker_warps": worker_warps, "toolchain": _toolchain_fingerprint()},
                sort_keys=True, default=str).encode()).hexdigest()
        except OSError:
            key = None                    # no toolchain to fingerprint: compile, and fail there
    path = Path(base, LAUNCH_FACTS_DIR, f"{key}.json") if key else None
    if path is not None and path.is_file():
        try:
            d = json.loads(path.read_text())
            return d["threads"], int(d["regs"]), int(d["shared"])
        except (OSError, ValueError, KeyError):
            pass                          # a broken entry: read the cubin again
    r = resources(case, arch, occupancy, worker_warps)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False,
                                             suffix=".tmp") as f:
                json.dump({"threads": r.threads, "regs": r.regs, "shared": r.shared}, f)
            os.replace(f.name, path)
        except OSError:
            pass                          # a read-only cache: nothing kept
    return r.threads, r.regs, r.shared


def compile_backward_cubin(case, arch: str, occupancy=None, worker_warps=None) -> bytes:
    """The cubin of a backward build (``kernels.build.signatures.BackwardCase``) for ``arch``."""
    from kernels.device import fmha_bwd
    return _export_cubin(fmha_bwd.get_kernel(case.kernel_name, occupancy, worker_warps), case,
                         arch)


def backward_resources(case, arch: str, occupancy=None, worker_warps=None) -> Resources:
    """Registers, stack and instruction counts of a backward build (the spill check)."""
    return read_resources(compile_backward_cubin(case, arch, occupancy, worker_warps))


@dataclass(frozen=True)
class LoadedBuild:
    """A cuTile build as the driver sees it on the GPU present: the facts ``CutileFamily.prepare``
    reports (``spec.family.PREPARED_FIELDS``)."""

    symbol: str
    threads: int          # the CTA size it is launched with: the cubin's REQNTID
    registers: int
    local_bytes: int      # per-thread local memory (stack, spills)
    smem_bytes: int       # static shared memory per CTA
    ctas_per_sm: int      # cuOccupancyMaxActiveBlocksPerMultiprocessor at that CTA size


def load_build(case, arch: str, occupancy=None, worker_warps=None,
               device_index: int = 0) -> LoadedBuild:
    """Export ``case`` (a ``kernels.build.signatures.CompileCase``) for ``arch`` with the JIT's
    specialisation facts, load the cubin with the driver and read its attributes and occupancy.
    The JIT-like export is the cubin the compile-only tests check (``kernels.build.signatures``);
    the disk cache of cuda.tile makes a second export of the same case a lookup."""
    import cupy
    symbol = case.signature().symbol
    cubin = compile_cubin(case, arch, occupancy, worker_warps)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        Path(path).write_bytes(cubin)
        with cupy.cuda.Device(device_index):
            fn = cupy.RawModule(path=path).get_function(symbol)
            threads = required_threads(cubin) or int(fn.max_threads_per_block)
            per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
                fn.kernel.ptr, threads, 0)
            return LoadedBuild(symbol, threads, int(fn.num_regs), int(fn.local_size_bytes),
                               int(fn.shared_size_bytes), int(per_sm))


def compile_decode_cubin(case, arch: str, occupancy=None) -> bytes:
    """The cubin of a split-K/V decode build (``kernels.build.signatures.DecodeCase``)."""
    from kernels.device import decode
    split, combine = decode.get_kernels(occupancy)        # the combine with its own hint
    return _export_cubin(combine if case.kernel == "combine" else split, case, arch)

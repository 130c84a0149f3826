"""The CUDA sources, the name of each instantiation, and a compile driver for nvcc.

No GPU and no CuPy needed here: CI uses this module to compile every instantiation with the
machine's ``nvcc`` and to read registers, shared memory and spills off ``-Xptxas -v``; the backend
uses the same names as ``cupy.RawModule(name_expressions=...)``.

An instantiation is ``flash_fwd<OrderKind::X, ScheduleKind::Y, WorkOrder::Z, TILE_M, TILE_N, D,
causal, DType::T, trace>`` (the default double-buffered K/V pipeline), or
``flash_fwd_staged<..., trace, STAGES>`` for another pipeline depth; enumerator names are the Python
enums' names (spec.OrderKind, spec.ScheduleKind, spec.WorkOrder, spec.DType).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from spec.orders import OrderKind
from spec.problem import DType, Tiles
from spec.schedules import ScheduleKind, WorkOrder
from spec.variant import DEFAULT_STAGES, STAGE_RANGE

SOURCE_DIR = Path(__file__).resolve().parents[1] / "device"   # the .cu / .cuh files
HEADER = SOURCE_DIR / "flash_fwd.cuh"
ENTRY = SOURCE_DIR / "flash_fwd.cu"
SCHEDULE_HEADER = SOURCE_DIR / "schedule.cuh"   # the CTA scheduler, included by HEADER

# Tile edges the family is built and tested for (the paper's 80 x 80 among them). Other multiples
# of 16 up to MAX_TILE compile too; TILE_M, TILE_N in TESTED_TILES are the ones CI and the GPU
# tests cover in full.
MAX_TILE = 256
TESTED_TILES = (Tiles(64, 64), Tiles(80, 80), Tiles(128, 64), Tiles(128, 128))
TILE_EDGES = (64, 80, 128)
# PERSISTENT and SNAKE distinguish q-major from head-major (other kinds are built as Q_MAJOR); CI
# builds the snake deal q-major only (the order whose rounds repeat Q tiles, where it matters).
SCHEDULE_FORMS = ((ScheduleKind.GRID, WorkOrder.Q_MAJOR), (ScheduleKind.TILE_X, WorkOrder.Q_MAJOR),
                  (ScheduleKind.PERSISTENT, WorkOrder.Q_MAJOR),
                  (ScheduleKind.PERSISTENT, WorkOrder.HEAD_MAJOR),
                  (ScheduleKind.SNAKE, WorkOrder.Q_MAJOR),
                  (ScheduleKind.LONGEST_FIRST, WorkOrder.Q_MAJOR),
                  (ScheduleKind.SECTIONED_LONGEST_FIRST, WorkOrder.Q_MAJOR))
BASE_OPTIONS = ("-std=c++17",)


class CompileError(RuntimeError):
    """A CUDA compilation failed; the message holds the instantiation(s) and the compiler log."""


@dataclass(frozen=True)
class Instance:
    """One template instantiation of ``flash_fwd``."""

    order: OrderKind
    schedule: ScheduleKind
    work: WorkOrder
    tiles: Tiles
    D: int
    causal: bool
    dtype: DType
    trace: bool = False
    stages: int = DEFAULT_STAGES   # K/V pipeline depth (spec.Variant.pipeline_stages)
    lse: bool = False              # the training build: also writes the log-sum-exp per row

    def __post_init__(self):
        if self.lse and (self.trace or self.stages != DEFAULT_STAGES):
            raise ValueError("the training build (lse=True) has the default pipeline depth and "
                             "no trace build")

    @property
    def name(self) -> str:
        b = lambda x: "true" if x else "false"   # noqa: E731
        if self.lse:
            return (f"flash_fwd_lse<OrderKind::{self.order.name}, "
                    f"ScheduleKind::{self.schedule.name}, WorkOrder::{self.work.name}, "
                    f"{self.tiles.m}, {self.tiles.n}, {self.D}, {b(self.causal)}, "
                    f"DType::{self.dtype.name}>")
        args = (f"OrderKind::{self.order.name}, ScheduleKind::{self.schedule.name}, "
                f"WorkOrder::{self.work.name}, {self.tiles.m}, {self.tiles.n}, {self.D}, "
                f"{b(self.causal)}, DType::{self.dtype.name}, {b(self.trace)}")
        if self.stages == DEFAULT_STAGES:
            return f"flash_fwd<{args}>"
        return f"flash_fwd_staged<{args}, {self.stages}>"

    @property
    def threads(self) -> int:
        return 32 * (self.tiles.m // (16 * mrep(self.tiles, self.D)))

    @property
    def smem_bytes(self) -> int:
        return smem_bytes(self.tiles, self.D, self.stages)


def mrep(tiles: Tiles, D: int) -> int:
    """16-row slices per warp; mirrors FwdShape::MREP in flash_fwd.cuh (checked on the GPU)."""
    acc = tiles.n // 2 + D // 2
    return 2 if (tiles.m % 32 == 0 and tiles.m >= 128 and 2 * acc <= 128) else 1


def smem_bytes(tiles: Tiles, D: int, stages: int = DEFAULT_STAGES) -> int:
    """Q tile plus ``stages`` K and V buffers, 16-bit elements (fwd_smem_bytes in the header;
    FwdShape::SMEM_BYTES for the default double buffer)."""
    return (tiles.m + 2 * stages * tiles.n) * D * 2


def source_text() -> str:
    return ENTRY.read_text()


def source_digest() -> str:
    """Hash of the kernel sources: part of the compile options, so that CuPy's on-disk cache (keyed
    on the .cu text) is invalidated when only the header changes."""
    h = hashlib.sha256(SCHEDULE_HEADER.read_bytes() + HEADER.read_bytes() + ENTRY.read_bytes())
    return h.hexdigest()[:16]


def compile_options() -> tuple[str, ...]:
    return BASE_OPTIONS + (f"-I{SOURCE_DIR}", f"-DFLASH_FWD_SOURCE={source_digest()}")


SM90_CTAS_PER_SM = {(Tiles(64, 64), 64): 3, (Tiles(64, 64), 128): 2, (Tiles(80, 80), 64): 2,
                    (Tiles(80, 80), 128): 1, (Tiles(128, 64), 64): 2, (Tiles(128, 64), 128): 1,
                    (Tiles(128, 128), 64): 1, (Tiles(128, 128), 128): 1}
"""Resident CTAs per SM of every build of a tested tile at D on an H100/H200 (the same for every
order, schedule, mask and dtype, which CI checks against ptxas; ``test_cuda_compile``): what a
plan made without a GPU uses for the persistent P of "one wave of resident CTAs"."""


def all_instances(dtypes=(DType.FP16, DType.BF16), tiles=TESTED_TILES, traces=(False, True),
                  head_dims=(64, 128)) -> list[Instance]:
    """The cross product of orders, schedule forms, tiles, D, causal, dtypes and trace builds."""
    return [Instance(o, s, w, t, d, c, dt, tr)
            for o in OrderKind for s, w in SCHEDULE_FORMS for t in tiles for d in head_dims
            for c in (False, True) for dt in dtypes for tr in traces]


def ci_instances() -> list[Instance]:
    """What CI compiles (about 700 kernels, < 3 min on 2 cores): every order x schedule form x
    causal x D x tested tile, fp16, plain and trace builds; and every kernel body (all TILE_EDGES
    pairs x D x causal x dtype) once. CUDA_COMPILE_ALL=1 compiles ``all_instances()`` instead."""
    if os.environ.get("CUDA_COMPILE_ALL") == "1":
        return all_instances()
    out = all_instances(dtypes=(DType.FP16,))
    seen = {i.name for i in out}
    for m in TILE_EDGES:
        for n in TILE_EDGES:
            for i in all_instances(dtypes=tuple(DType), tiles=(Tiles(m, n),), traces=(False,)):
                if i.order == OrderKind.LINEAR and i.schedule == ScheduleKind.GRID \
                        and i.name not in seen:
                    out.append(i)
                    seen.add(i.name)
    return out


STAGE_STUDY_TILES = Tiles(80, 80)
"""The tile of the miss-cost study (the sawtooth study's CUDA configuration)."""


def stage_instances() -> list[Instance]:
    """Every pipeline depth other than the default at the miss-cost study's configuration: linear
    and sawtooth, persistent q-major, 80 x 80 tiles, D = 64 and 128, causal and not, fp16, plain
    and trace builds; and the grid / tile-X kernels of each depth at 64 x 64 (the index
    arithmetic the GPU tests also run). CI compiles them beside ``ci_instances()``."""
    depths = [st for st in range(STAGE_RANGE[0], STAGE_RANGE[1] + 1) if st != DEFAULT_STAGES]
    out = [Instance(o, ScheduleKind.PERSISTENT, WorkOrder.Q_MAJOR, STAGE_STUDY_TILES, d, c,
                    DType.FP16, tr, st)
           for st in depths for o in (OrderKind.LINEAR, OrderKind.SAWTOOTH) for d in (64, 128)
           for c in (False, True) for tr in (False, True)]
    out += [Instance(OrderKind.SAWTOOTH, s, WorkOrder.Q_MAJOR, Tiles(64, 64), d, c, DType.FP16,
                     False, st)
            for st in depths for s in (ScheduleKind.GRID, ScheduleKind.TILE_X)
            for d in (64, 128) for c in (False, True)]
    return out


# --- nvcc driver -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Resources:
    """Per-thread registers, spill traffic and stack (local memory) of one compiled kernel."""

    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0


def nvcc_path() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for cand in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        p = Path(cand) / "bin" / "nvcc"
        if cand and p.exists():
            return str(p)
    return None


def translation_unit(instances: list[Instance]) -> str:
    """A .cu that instantiates each kernel by taking its address (what NVRTC's name expressions
    do), so nvcc compiles exactly the kernels CuPy would."""
    lines = ['#include "flash_fwd.cu"', "static void* const flash_fwd_instances[] = {"]
    lines += [f"    (void*)&{i.name}," for i in instances]
    lines += ["};", ""]
    return "\n".join(lines)


_MANGLE = re.compile(r"Compiling entry function '(\S+)'")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")
_DEMANGLE = re.compile(r"_Z(9flash_fwd|16flash_fwd_staged|13flash_fwd_lse)IL9OrderKind(\d)"
                       r"EL12ScheduleKind(\d)EL9WorkOrder(\d)ELi(\d+)ELi(\d+)ELi(\d+)ELb(\d)"
                       r"EL5DType(\d)E(?:Lb(\d)E(?:Li(\d+)E)?)?E")


def parse_resources(log: str, name_of) -> dict[str, Resources]:
    """Resources per kernel from ``-Xptxas -v`` output, keyed by ``name_of(mangled symbol)``
    (kernels it maps to None are left out)."""
    out: dict[str, Resources] = {}
    cur, spill = None, None
    for line in log.splitlines():
        if m := _MANGLE.search(line):
            cur, spill = name_of(m.group(1)), None
        elif (m := _SPILL.search(line)) and cur:
            spill = (int(m[1]), int(m[2]), int(m[3]))
        elif (m := _REGS.search(line)) and cur and spill:
            out[cur] = Resources(int(m[1]), spill[1], spill[2], spill[0])
            cur, spill = None, None
    return out


def _instance_name(sym: str) -> str | None:
    d = _DEMANGLE.search(sym)
    return None if d is None else Instance(
        OrderKind(int(d[2])), ScheduleKind(int(d[3])), WorkOrder(int(d[4])),
        Tiles(int(d[5]), int(d[6])), int(d[7]), d[8] == "1", list(DType)[int(d[9])],
        d[10] == "1", int(d[11]) if d[11] else DEFAULT_STAGES,
        lse=d[1] == "13flash_fwd_lse").name


def parse_ptxas(log: str) -> dict[str, Resources]:
    """Resources per instantiation name from ``-Xptxas -v`` output."""
    return parse_resources(log, _instance_name)


def nvcc_cubin(text: str, options, cu: Path, arch: str = "sm_90") -> str:
    """Compile the translation unit ``text`` (written to ``cu``, the cubin beside it) with nvcc
    and ``-Xptxas -v``; returns the compiler's log. Raises CompileError with the log. With
    ``$SAWTOOTH_NVCC_CACHE_DIR`` (.ci/run) a log is kept there under a hash of all it depends on
    and read back instead (no cubin then)."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise CompileError("nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    if cache := os.environ.get("SAWTOOTH_NVCC_CACHE_DIR"):
        h = hashlib.sha256(repr((text, arch, [o.replace(str(SOURCE_DIR), "") for o in options],
                                 sorted(kv for kv in os.environ.items() if "NVCC" in kv[0]),
                                 [subprocess.run([t, "--version"], capture_output=True).stdout
                                  for t in (nvcc, "gcc")])).encode())
        for f in sorted(SOURCE_DIR.glob("*.cu*")):
            h.update(f.read_bytes())
        if (kept := Path(cache, h.hexdigest())).is_file():
            return kept.read_text()
    cu.write_text(text)
    # -ftz=true: CuPy adds it to every NVRTC compile, so nvcc builds the same code
    cmd = [nvcc, f"-arch={arch}", "-cubin", "-Xptxas", "-v", "-ftz=true", *options,
           "-o", str(cu.with_suffix(".cubin")), str(cu)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise CompileError(f"nvcc failed ({' '.join(cmd)}):\n{r.stdout}{r.stderr}")
    if cache:
        os.makedirs(cache, exist_ok=True)
        (tmp := Path(f"{kept}.{os.getpid()}{cu.stem}")).write_text(r.stdout + r.stderr)
        tmp.replace(kept)
    return r.stdout + r.stderr


def compile_named(entry: str, names: list[str], options, name_of,
                  arch: str = "sm_90") -> dict[str, Resources]:
    """Compile the kernels ``names`` of the entry file ``entry`` (referenced by address so each
    template is instantiated) into one cubin with nvcc; their resources, keyed by
    ``name_of(mangled symbol)``."""
    text = "\n".join([f'#include "{entry}"', "static void* const k[] = {",
                      *[f"    (void*)&{n}," for n in names], "};", ""])
    with tempfile.TemporaryDirectory(prefix=Path(entry).stem + "_") as tmp:
        return parse_resources(nvcc_cubin(text, options, Path(tmp) / "unit.cu", arch), name_of)


def compile_nvcc(instances: list[Instance], arch: str = "sm_90", jobs: int | None = None,
                 chunk: int = 60, workdir: str | None = None) -> dict[str, Resources]:
    """Compile instances to cubins with nvcc (``jobs`` processes in parallel, ``chunk`` kernels per
    translation unit) and return their resources. Raises CompileError with the compiler's log and
    the instantiations of the failing unit."""
    if nvcc_path() is None:
        raise CompileError("nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    jobs = jobs or os.cpu_count() or 1
    parts = [instances[i:i + chunk] for i in range(0, len(instances), chunk)]
    tmp = Path(workdir or tempfile.mkdtemp(prefix="flash_fwd_"))

    def one(k: int) -> dict[str, Resources]:
        try:
            log = nvcc_cubin(translation_unit(parts[k]), compile_options(), tmp / f"unit{k}.cu",
                             arch)
        except CompileError as e:
            names = "\n  ".join(i.name for i in parts[k])
            raise CompileError(f"{e}\non the unit with:\n  {names}") from None
        return parse_ptxas(log)

    res: dict[str, Resources] = {}
    with ThreadPoolExecutor(max_workers=jobs) as ex:
        for part in ex.map(one, range(len(parts))):
            res.update(part)
    if workdir is None:
        shutil.rmtree(tmp, ignore_errors=True)
    return res

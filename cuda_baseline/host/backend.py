"""CudaFamily: the raw CUDA split-Q FlashAttention family (``spec.family.KernelFamily``).

``prepare`` validates the variant against the problem and the device, compiles the instantiation
with ``cupy.RawModule(name_expressions=...)`` (NVRTC, cached on disk by CuPy) and reads its
resources; ``run`` launches it on torch's current stream (so CUDA events time it); ``trace`` runs
the trace build, which records per CTA and step the (b, h, q_tile, kv_tile) visited and the
``%globaltimer`` at the start of the step, and per CTA the SM it ran on (``%smid``) and its start
and end stamps.

Every error is raised before any launch: bad tensors (spec.family.BadInput), a variant this
family cannot build or this device cannot run (UnsupportedVariant: tiles over the shared-memory
limit, P over the resident CTAs, ...), a failed compilation (CompileError, with the instantiation
and NVRTC's log).
"""
from __future__ import annotations

import json
import math
import multiprocessing
import os
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from cuda_baseline.build.bwd_source import BWD_TILES, BWD_TILES_D64
from cuda_baseline.build.source import (
    MAX_TILE,
    SM90_CTAS_PER_SM,
    CompileError,
    Instance,
    compile_options,
    smem_bytes,
    source_text,
)
from spec import arch as arch_registry
from spec import family
from spec.decode import DECODE_MAX_ROWS, DecodeSchedule
from spec.family import BadInput, UnsupportedVariant, device_limits, problem_from_tensors
from spec.orders import OrderKind, ScanOrder
from spec.problem import Problem, TileGrid, Tiles, cdiv
from spec.schedules import CtaSchedule, ScheduleKind, WorkOrder
from spec.variant import DEFAULT_STAGES, Backend, Training, Variant

if TYPE_CHECKING:
    from cuda_baseline.host.decode import DecodePlan

__all__ = ["CudaFamily", "Prepared", "check_strides", "decode_choice", "default_schedule",
           "default_tiles", "default_variant",
           "instance_for",
           "check_variant", "CompileError"]


def instance_for(variant: Variant, problem: Problem, trace: bool = False,
                 lse: bool = False) -> Instance:
    """The template instantiation that runs ``variant`` on ``problem`` (``lse``: the training
    build, which also writes the log-sum-exp of each query row)."""
    s = variant.schedule
    work = (s.work_order if s.kind in (ScheduleKind.PERSISTENT, ScheduleKind.SNAKE)
            else WorkOrder.Q_MAJOR)
    return Instance(variant.order.kind, s.kind, work, variant.tiles, problem.D, problem.causal,
                    problem.dtype, trace, variant.pipeline_stages, lse)


def check_variant(variant: Variant, problem: Problem, smem_limit: int | None = None) -> None:
    """Raise UnsupportedVariant, saying why, if this family cannot build ``variant`` for ``problem``
    (``smem_limit``: the device's per-block shared-memory limit, when known)."""
    if variant.backend != Backend.CUDA:
        raise UnsupportedVariant(f"variant backend is {variant.backend.value!r}; CudaFamily "
                                 "builds Backend.CUDA variants only")
    if variant.level is not None:
        raise UnsupportedVariant(f"ladder level {variant.level} is a cuTile notion; the CUDA "
                                 "family has one build per variant (leave level None)")
    t = variant.tiles
    for name, v in (("TILE_M", t.m), ("TILE_N", t.n)):
        if v > MAX_TILE:
            raise UnsupportedVariant(f"{name}={v} is over {MAX_TILE}; the CUDA family is built for "
                                     "multiples of 16 up to 256 (tested: 64, 80, 128)")
    st = variant.pipeline_stages
    need = smem_bytes(t, problem.D, st)
    if smem_limit is not None and need > smem_limit:
        raise UnsupportedVariant(
            f"tiles {t.m}x{t.n} at D={problem.D} need {need} B of shared memory (Q tile + {st} K "
            f"+ {st} V buffers), over this device's {smem_limit} B per block; use smaller tiles "
            "(e.g. 128x64 or 64x64) or fewer stages")


def check_strides(q, k, v, out=None) -> None:
    """BadInput unless every stride but the last (which ``problem_from_tensors`` requires to be
    1) is a multiple of 8 elements: each row is copied in 16-byte pieces. Reads no data
    pointer, so it runs on fake tensors too (the custom op's fake implementation)."""
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        if t is not None and any(s % 8 for s in t.stride()[:3]):
            raise BadInput(f"{name} has strides {tuple(t.stride())}: every stride must be a "
                           "multiple of 8 elements (16-byte row copies); call .contiguous()")


@dataclass(frozen=True)
class Prepared(family.Prepared):
    """A compiled instantiation ready to launch: ``spec.family.Prepared`` and the launch details."""

    instance: Instance
    kernel: Any               # cupy RawKernel
    device_index: int

    @property
    def resident_ctas(self) -> int:
        return self.ctas_per_sm * device_limits(self.device_index).num_sms


_KERNELS: dict[tuple[int, str], Any] = {}   # (device, instantiation name) -> RawKernel


def _module(names: list[str]):
    import cupy
    return cupy.RawModule(code=source_text(), options=compile_options(), name_expressions=names)


def _load(names: list[str], device_index: int) -> None:
    """Compile (or fetch from CuPy's disk cache) one module holding ``names``; register them."""
    import cupy
    with cupy.cuda.Device(device_index):
        try:
            mod = _module(names)
            mod.compile()
            for n in names:
                _KERNELS[(device_index, n)] = mod.get_function(n)
        except Exception as e:   # CuPy raises CompileException (NVRTC log) or driver errors
            listed = "\n  ".join(names)
            raise CompileError(f"compiling\n  {listed}\nfailed:\n{e}") from e


def _compile_worker(names: list[str], device_index: int) -> None:
    import cupy
    with cupy.cuda.Device(device_index):
        _module(names).compile()


GROUPS_FILE = "sawtooth-groups.json"
"""The module grouping of the instantiations compiled under one ``$CUPY_CACHE_DIR``."""


def _groups_path():
    from pathlib import Path
    d = os.environ.get("CUPY_CACHE_DIR")
    return Path(d) / GROUPS_FILE if d else None


def _groups() -> dict[str, tuple[str, ...]]:
    """{instantiation name: the names compiled in one module with it} as recorded beside an
    explicit ``$CUPY_CACHE_DIR``; empty without one (an unreadable file counts as empty: the
    grouping only decides cache hits, never what runs)."""
    path = _groups_path()
    try:
        groups = json.loads(path.read_text()) if path is not None and path.exists() else []
    except (OSError, ValueError):
        return {}
    return {n: tuple(g) for g in groups for n in g}


def _record_groups(parts: list[list[str]]) -> None:
    path = _groups_path()
    if path is None or not parts:
        return
    known = list(dict.fromkeys(_groups().values()))
    new = [tuple(p) for p in parts if tuple(p) not in known]
    if new:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps([list(g) for g in known + new]))
        os.replace(tmp, path)


def _group_of(name: str) -> list[str]:
    """The module ``name`` is loaded in: the recorded group holding it, else itself alone."""
    return list(_groups().get(name, (name,)))


def precompile(instances: Iterable[Instance], device_index: int = 0, jobs: int | None = None,
               chunk: int = 8) -> None:
    """Compile many instantiations in parallel processes (NVRTC is single-threaded), then load
    them from CuPy's disk cache into this process. Modules group ``chunk`` kernels each.

    CuPy caches a module under a key of all its names, so a process that groups the same kernels
    differently compiles them again. Under an explicit ``$CUPY_CACHE_DIR`` the groups are
    recorded there (``GROUPS_FILE``) and every later process, whatever subset it asks for, and
    each lazy ``prepare``, loads a kernel with the group it was first compiled in: one compile
    per distinct kernel per cache (the GPU suite's warm step and its shards)."""
    names = sorted({i.name for i in instances})
    recorded = _groups()
    parts = list(dict.fromkeys(recorded[n] for n in names if n in recorded))
    fresh = [n for n in names if n not in recorded]
    parts = [list(p) for p in parts] + [fresh[i:i + chunk] for i in range(0, len(fresh), chunk)]
    _record_groups(parts)
    parts = [p for p in parts if any((device_index, n) not in _KERNELS for n in p)]
    jobs = min(jobs or os.cpu_count() or 1, len(parts))
    if jobs > 1:
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as ex:
            futures = [ex.submit(_compile_worker, p, device_index) for p in parts]
            errors = [f.exception() for f in futures]
        for p, e in zip(parts, errors):
            if e is not None:
                _load(p, device_index)   # recompile here to raise CompileError with the log
    for p in parts:
        _load(p, device_index)


_STREAMS: dict[tuple[int, int], Any] = {}


def _stream(device_index: int):
    """CuPy's view of torch's current stream (one wrapper per stream, made once)."""
    import cupy
    import torch
    ptr = torch.cuda.current_stream(device_index).cuda_stream
    key = (device_index, ptr)
    if key not in _STREAMS:
        _STREAMS[key] = cupy.cuda.ExternalStream(ptr, device_index)
    return _STREAMS[key]


class CudaFamily:
    """The raw CUDA family (see the module docstring). ``arch=None`` uses the GPU present; a
    named arch must be the GPU present (the same rule as ``kernels.host.backend.CutileFamily``)."""

    name = "cuda"

    def __init__(self, arch: str | None = None):
        self.requested_arch = arch

    def prepare(self, variant: Variant, problem: Problem, lse: bool = False) -> Prepared:
        import torch
        if not torch.cuda.is_available():
            raise UnsupportedVariant("CudaFamily needs a CUDA GPU (torch.cuda.is_available() is "
                                     "False)")
        if self.requested_arch is not None:
            present = arch_registry.detect()
            want = arch_registry.get(self.requested_arch)
            if present is None or present.name != want.name:
                raise UnsupportedVariant(
                    f"arch {self.requested_arch!r} was requested, but the GPU present is "
                    f"{present.name if present else 'not in the arch registry'}; pass that arch "
                    "or arch=None")
        dev = torch.cuda.current_device()
        lim = device_limits(dev)
        if lim.compute_capability < (8, 0):
            raise UnsupportedVariant(f"{lim.name} is sm_{''.join(map(str, lim.compute_capability))}"
                                     "; the kernel needs sm_80 or newer (mma.sync bf16, cp.async)")
        check_variant(variant, problem, lim.smem_per_block_optin)
        if lse and variant.pipeline_stages != DEFAULT_STAGES:
            raise UnsupportedVariant(f"stages={variant.pipeline_stages} has no training build "
                                     "(the log-sum-exp); leave stages None to train")
        inst = instance_for(variant, problem, lse=lse)
        kernel = self._kernel(inst, dev)
        regs, local = int(kernel.num_regs), int(kernel.local_size_bytes)
        per_sm = lim.ctas_per_sm(inst.threads, regs, inst.smem_bytes)
        if per_sm < 1:
            raise UnsupportedVariant(f"{inst.name}: {inst.threads} threads x {regs} registers and "
                                     f"{inst.smem_bytes} B shared memory do not fit one SM")
        if variant.occupancy is not None and variant.occupancy != per_sm:
            raise UnsupportedVariant(
                f"occupancy={variant.occupancy} requested, but this build holds {per_sm} CTAs per "
                f"SM ({regs} registers, {inst.smem_bytes} B shared memory); leave occupancy None")
        g = TileGrid(problem, variant.tiles)
        sched = variant.schedule
        if sched.is_persistent and sched.num_ctas > per_sm * lim.num_sms:
            raise UnsupportedVariant(
                f"persistent schedule with P={sched.num_ctas} CTAs, but only "
                f"{per_sm * lim.num_sms} ({lim.num_sms} SMs x {per_sm}) can be resident at once; "
                "choose P <= that")
        if local:
            warnings.warn(f"{inst.name} uses {local} B of local memory per thread (register "
                          "spills): its L2 traffic includes spill traffic", stacklevel=2)
        return Prepared(variant, problem, sched.grid_size(g), inst.threads, regs, local,
                        inst.smem_bytes, per_sm, inst.name, inst, kernel, dev)

    def _kernel(self, inst: Instance, dev: int):
        key = (dev, inst.name)
        if key not in _KERNELS:
            _load(_group_of(inst.name), dev)
        kernel = _KERNELS[key]
        if inst.smem_bytes > 48 * 1024:   # opt in to more than the default 48 KB per block
            kernel.max_dynamic_shared_size_bytes = inst.smem_bytes
        return kernel

    # -- launches ---------------------------------------------------------------------------
    def _check_tensors(self, p: Prepared, q, k, v, out) -> None:
        got = problem_from_tensors(q, k, v, p.problem.causal, out)
        if got != p.problem:
            raise BadInput(f"tensors describe {got.label}, but the kernel was prepared for "
                           f"{p.problem.label}; prepare it for this problem")
        if q.device.index != p.device_index:
            raise BadInput(f"tensors are on cuda:{q.device.index}, the kernel was prepared on "
                           f"cuda:{p.device_index}")
        check_strides(q, k, v, out)
        for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
            if t.data_ptr() % 16:
                raise BadInput(f"{name} must start 16-byte aligned (16-byte row copies); call "
                               ".contiguous() or .clone()")

    def _args(self, p: Prepared, q, k, v, out, visits=None, times=None, steps: int = 0,
              every: int = 1, scale: float | None = None):
        pr, g = p.problem, TileGrid(p.problem, p.variant.tiles)
        i64, i32 = np.int64, np.int32
        ptr = lambda t: np.uint64(0 if t is None else t.data_ptr())   # noqa: E731
        strides = [i64(s) for t in (q, k, v, out) for s in t.stride()[:3]]
        order = p.variant.order
        return (ptr(q), ptr(k), ptr(v), ptr(out), *strides,
                i32(pr.H), i32(pr.H_kv), i32(pr.S_q), i32(pr.S_kv), i32(g.n_q), i32(g.n_kv),
                i32(g.n_work), i32(p.variant.schedule.tiles_per_cta),
                i32(p.variant.schedule.section or 1),
                i32(order.group if order.kind == OrderKind.SAWTOOTH else 1),
                np.float32(math.log2(math.e) * (1 / math.sqrt(pr.D) if scale is None else scale)),
                ptr(visits), ptr(times), i32(steps), i32(every))

    def _launch(self, p: Prepared, kernel, args) -> None:
        import cupy
        with cupy.cuda.Device(p.device_index), _stream(p.device_index):
            kernel((p.n_ctas,), (p.threads,), args, shared_mem=p.smem_bytes)

    def run(self, prepared: Prepared, q, k, v, out) -> None:
        self._check_tensors(prepared, q, k, v, out)
        self._launch(prepared, prepared.kernel, self._args(prepared, q, k, v, out))

    def trace(self, prepared: Prepared, q, k, v, out, every: int = 1) -> dict:
        """Run the trace build, recording every ``every``-th step of each CTA (1: all; the
        drift study stamps sparsely, see ``FwdParams`` in flash_fwd.cuh); returns
        ``spec.family.TRACE_KEYS``: ``visits`` int32 [n_ctas, records, 4] (b, h, q_tile,
        kv_tile, -1 padded: with ``every`` 1 the layout of spec.Visits.table()), ``time_ns``
        int64 [n_ctas, records] (%globaltimer at the start of steps 0, every, 2 every, ...),
        per CTA ``smid`` int32 [n_ctas] (the SM it ran on), ``start_ns`` and ``end_ns`` int64
        [n_ctas] (%globaltimer before its first step and after its last work item), and
        ``build``, the trace instantiation's name, and ``every``."""
        import torch
        if every < 1:
            raise BadInput(f"every={every}: record every step (1) or every k-th (k > 1)")
        self._check_tensors(prepared, q, k, v, out)
        inst = instance_for(prepared.variant, prepared.problem, trace=True)
        kernel = self._kernel(inst, prepared.device_index)
        g = TileGrid(prepared.problem, prepared.variant.tiles)
        s = prepared.variant.schedule
        items = (s.tiles_per_cta if s.kind == ScheduleKind.TILE_X
                 else cdiv(g.n_work, s.num_ctas) if s.is_persistent else 1)
        steps = cdiv(items * g.n_kv, every)          # upper bound on any CTA's records
        dev, n = q.device, prepared.n_ctas
        visits = torch.full((n * steps * 4 + n,), -1, dtype=torch.int32, device=dev)
        times = torch.full((n * (steps + 2),), -1, dtype=torch.int64, device=dev)
        self._launch(prepared, kernel,
                     self._args(prepared, q, k, v, out, visits, times, steps, every))
        torch.cuda.current_stream(dev).synchronize()
        return unpack_trace(visits.cpu().numpy(), times.cpu().numpy(), n, steps) | {
            "build": inst.name, "every": every}


def unpack_trace(visits: np.ndarray, times: np.ndarray, n_ctas: int, steps: int) -> dict:
    """The trace build's two flat buffers (FwdParams in flash_fwd.cuh: per-step records, then
    per-CTA records) as ``trace()``'s arrays; step columns no CTA used are dropped and
    ``time_ns`` is -1 wherever ``visits`` is."""
    cells = n_ctas * steps
    if visits.shape != (4 * cells + n_ctas,) or times.shape != (cells + 2 * n_ctas,):
        raise ValueError(f"trace buffers of {visits.shape} and {times.shape} elements do not "
                         f"hold {n_ctas} CTAs x {steps} steps")
    vis = visits[:4 * cells].reshape(n_ctas, steps, 4)
    ns = times[:cells].reshape(n_ctas, steps)
    used = int((vis[:, :, 0] >= 0).any(axis=0).sum())
    vis, ns = vis[:, :used], ns[:, :used]
    return {"visits": vis, "time_ns": np.where(vis[:, :, 0] >= 0, ns, -1),
            "smid": visits[4 * cells:].copy(), "start_ns": times[cells:cells + n_ctas].copy(),
            "end_ns": times[cells + n_ctas:].copy()}


# -- the defaults of attention() (cuda_baseline.host.launch) ---------------------------------------

SM90_DEFAULT_TILES = {(128, False): Tiles(64, 64)}
"""(D, causal) -> the default tiles where a measurement beat the registry's ``cuda_tiles`` on
sm_90: full attention at D=128, 64x64 grid 6.394 ms against 128x64 6.726 ms (1.05x; B=1, H=16,
S=16K, H100, profiles/h100/cuda-tiles-20261123). Causal keeps 128x64 under its LPT default
(3.302 ms, faster than any grid launch there)."""


def default_variant(problem: Problem, arch: arch_registry.Arch | None, *,
                    order: str | ScanOrder = "linear", schedule: str | CtaSchedule | None = None,
                    tiles: Tiles | tuple[int, int] | None = None,
                    stages: int | None = None, training: bool = False,
                    backward_tiles: Tiles | tuple[int, int] | None = None,
                    kv_lengths: bool = False) -> Variant | Training | DecodePlan:
    """The CUDA forward that ``attention()`` runs for ``problem`` on ``arch`` (None: no GPU, the
    H100's defaults), and the one place its defaults are resolved: ``default_tiles`` and
    ``default_schedule``, each overridden by what is given. The studies' default cases, the
    benches, the training forward and ``attention()`` all take their build from here. With
    ``training`` the result is a ``spec.variant.Training``: this forward and the backward's tiles
    (``backward_tiles``, else ``_default_backward_tiles``; the backward scans in ``order``, its
    schedule and build options are the call's).

    An inference call (``training`` False) of at most ``spec.decode.DECODE_MAX_ROWS`` query rows
    per head, or one that names ``schedule="decode[N]"``, gets the split-K/V decode kernels'
    ``cuda_baseline.host.decode.DecodePlan`` instead (``decode_choice``: when; the splits from
    the work model of ``spec.decode.choose_splits``); ``kv_lengths`` (per-sequence cache lengths
    given) needs them."""
    dec = decode_choice(problem, order=order, schedule=schedule, tiles=tiles, stages=stages,
                        save_lse=training, lengths=kv_lengths)
    if dec is not None:
        from cuda_baseline.host.decode import plan
        return plan(problem, (arch or arch_registry.get("h100")).num_sms, dec.splits)
    tiles = default_tiles(problem, arch) if tiles is None else (
        tiles if isinstance(tiles, Tiles) else Tiles(*tiles))
    order = order if isinstance(order, ScanOrder) else ScanOrder.parse(order)
    if schedule is None:
        schedule = default_schedule(problem, tiles, arch or arch_registry.get("h100"))
    elif not isinstance(schedule, CtaSchedule):
        schedule = CtaSchedule.parse(schedule)
    variant = Variant(Backend.CUDA, order, schedule, tiles, stages=stages)
    if not training:
        return variant
    if backward_tiles is None:
        return Training(variant, _default_backward_tiles(problem))
    bt = backward_tiles if isinstance(backward_tiles, Tiles) else Tiles(*backward_tiles)
    return Training(variant, bt)


def _linear(order) -> bool:
    return order == "linear" or isinstance(order, ScanOrder) and order.kind == OrderKind.LINEAR


def decode_choice(problem: Problem, *, order, schedule, tiles, stages, save_lse: bool,
                  lengths: bool = False) -> DecodeSchedule | None:
    """Whether ``default_variant`` gives this call the split-K/V decode kernels
    (``cuda_baseline.host.decode``), and with which splits; None: the split-Q forward. The
    cuTile family's rules (``kernels.host.backend.decode_choice``), so that both families route
    a call alike: the training forward (``save_lse``) always keeps the split-Q forward, whose
    log-sum-exp the backward reads; ``schedule="decode"`` / ``"decode<N>"`` asks for the decode
    kernels; with ``schedule=None`` every query block of at most ``DECODE_MAX_ROWS`` rows per head
    on the linear order with the default tiles and pipeline depth takes them (each K/V tile read
    once per GQA group, where the split-Q forward reads it once per query head through a mostly
    empty Q tile); a named split-Q schedule, another order, ``tiles`` or ``stages`` keep the
    split-Q forward. ``lengths`` (per-sequence ``kv_lengths``) needs the decode kernels: a call
    that cannot have them is refused in one line (``BadInput``)."""
    named = DecodeSchedule.parse(schedule)
    default_stages = stages is None or stages == DEFAULT_STAGES
    if named is not None:
        if save_lse:
            raise UnsupportedVariant(f"schedule={schedule!r} is an inference kernel (no "
                                     "log-sum-exp for a backward): call it under "
                                     "torch.no_grad() or pick a split-Q schedule")
        if tiles is not None or not default_stages or not _linear(order):
            raise UnsupportedVariant(f"schedule={schedule!r} takes no tiles=, stages= or scan "
                                     "order other than linear (the decode kernel's own)")
        if lengths and problem.S_q > DECODE_MAX_ROWS:
            raise BadInput(f"kv_lengths= with S_q={problem.S_q}: the decode kernels take at most "
                           f"{DECODE_MAX_ROWS} query rows per head")
        return named
    auto = (schedule is None and not save_lse and problem.S_q <= DECODE_MAX_ROWS
            and tiles is None and default_stages and _linear(order))
    if lengths and not auto:
        raise BadInput(f"kv_lengths= runs on the decode kernels only: S_q <= {DECODE_MAX_ROWS} "
                       f"(here {problem.S_q}), no gradient, schedule None or 'decode[N]', linear "
                       "order, default tiles and stages")
    return DecodeSchedule() if auto else None


def _default_backward_tiles(problem: Problem) -> Tiles:
    """The backward half of ``default_variant(training=True)``, its (TILE_M, TILE_N): 128 keys per
    CTA (8 warps of 16 keys, one CTA per SM at 230-255 registers) and 128 query rows per step at D =
    64 (``BWD_TILES_D64``), 64 at D = 128 (``BWD_TILES``), where the dK and dV accumulators alone
    take 128 registers per thread and a 128-row step's scores would not fit beside them
    (FlashAttention 2 makes the same two choices on GPUs with 144 KB of shared memory per block).
    The larger step halves the steps per K/V tile (barriers, LSE and Δ copies, dQ reduction issue)
    for the same Q-side traffic: each Q, dO tile is still read once per 128 keys."""
    return BWD_TILES_D64 if problem.D == 64 else BWD_TILES


def default_tiles(problem: Problem, arch: arch_registry.Arch | None) -> Tiles:
    """The CUDA family's default tiles for ``problem`` on ``arch`` (None: no GPU, the H100's)."""
    if arch is None:
        return SM90_DEFAULT_TILES.get((problem.D, problem.causal), Tiles(128, 64))
    if arch.sm == "sm_90":
        return SM90_DEFAULT_TILES.get((problem.D, problem.causal), arch.cuda_tiles)
    return arch.cuda_tiles


def default_schedule(problem: Problem, tiles: Tiles, arch: arch_registry.Arch) -> CtaSchedule:
    """The CUDA family's default schedule: the grid launch for full attention (equal work items;
    the hardware dispatches them as slots free up), and for causal attention longest-first (LPT)
    over one wave of resident CTAs (``SM90_CTAS_PER_SM`` on sm_90, one per SM elsewhere), at most
    one per work item. Measured on the H100 at S=16K (profiles/h100/cuda-tiles-20261123): LPT is
    1.12x (D=64) and 1.06x (D=128) the grid launch of the same 128x64 tiles, causal."""
    if not problem.causal:
        return CtaSchedule.grid()
    per_sm = SM90_CTAS_PER_SM.get((tiles, problem.D), 1) if arch.sm == "sm_90" else 1
    return CtaSchedule.longest_first(min(arch.num_sms * per_sm, TileGrid(problem, tiles).n_work))

"""The cuTile family (``spec.family.KernelFamily``) and the user-facing ``attention()``.

    >>> from kernels import backend
    >>> out = backend.attention(q, k, v, causal=True, order="sawtooth", schedule="static132")

``CutileFamily.prepare(variant, problem)`` resolves tiles / occupancy (the arch's measured defaults,
``kernels/rules/configs/<arch>.json``), the constant codes and the launch grid, and reads the
build's resources (registers, local memory, shared memory, CTAs per SM) off its JIT-like export
loaded by the driver; ``run`` launches on ``torch.cuda.current_stream()``; ``trace`` runs the trace
build and returns ``spec.family.TRACE_KEYS``. Nothing here autotunes.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kernels.rules import backward_choice
from kernels.rules.backward_config import (
    BASE,
    ONE_PASS_D64_MIN_ROWS,
    WIDE,
    BackwardConfig,
    PassConfig,
)
from kernels.rules.choice import problem_config
from kernels.rules.config import KernelConfig, persistent_ctas, registry_config
from spec import arch as arch_registry
from spec import family
from spec.decode import DECODE_MAX_ROWS, DecodeSchedule
from spec.family import BadInput, UnsupportedVariant, problem_from_tensors
from spec.ops import check_lengths, resolve_scale
from spec.orders import OrderKind, ScanOrder
from spec.problem import Problem, TileGrid, Tiles
from spec.schedules import CtaSchedule, ScheduleKind, section_heads
from spec.variant import Backend, Training, Variant

if TYPE_CHECKING:
    from kernels.host.decode import DecodeLaunch, DecodePlan

MAX_TILE = 256


@dataclass(frozen=True)
class Prepared(family.Prepared):
    """A variant ready to launch: ``spec.family.Prepared`` and the launch details."""

    arch: str
    num_sms: int
    occupancy: int | None
    worker_warps: int | None
    level: int
    consts: tuple             # constant kernel arguments without the trailing TRACE flag
    qk_scale: float
    tactic: int = 0           # the kernels.device.fmha TACTIC bits in ``consts``

    @property
    def resident_ctas(self) -> int:
        return self.ctas_per_sm * self.num_sms


def _present_arch():
    a = arch_registry.detect()
    if a is None:
        raise UnsupportedVariant("no CUDA GPU is present (torch.cuda.is_available() is False); "
                                 "the cuTile kernels need an NVIDIA GPU of compute capability "
                                 "8.0 or newer and driver r580+")
    return a


def check_arch(requested: str | None):
    """The present GPU's Arch; an error naming both when ``requested`` is another arch."""
    present = _present_arch()
    if requested is None:
        return present
    want = arch_registry.get(requested)     # UnknownArch lists the known names
    same = want.name == present.name        # detect() maps the device onto the registry
    if not same:
        raise UnsupportedVariant(
            f"arch {requested!r} ({want.marketing_name}, {want.sm}) was requested, but the GPU "
            f"present is {present.marketing_name} ({present.name}, sm_"
            f"{present.compute_capability[0]}{present.compute_capability[1]}); pass "
            f"arch={present.name!r} or arch=None")
    return present


def compile_hints(variant: Variant, problem: Problem, arch: str, level: int = 6,
                  defaults: KernelConfig | None = None) -> tuple[int | None, int | None]:
    """(occupancy, num_worker_warps) hints a variant is compiled with on ``arch`` (no GPU needed):
    the variant's own occupancy, else that of the configuration measured with its tiles
    (``defaults``, else the arch's measured default for the problem's shape class), else the
    registry's (``registry_config``: a hint tuned for other tiles is not carried over, e.g. the
    occupancy 2 of 64x128 tiles onto a 128x128 study build, where it costs a stack); neither below
    ladder level 5."""
    if level < 5:
        return None, None
    base = defaults or problem_config(arch, problem)
    if variant.tiles != base.tiles:
        base = registry_config(arch, variant.tiles)
    occupancy = variant.occupancy if variant.occupancy is not None else base.occupancy
    return occupancy, base.worker_warps


def compiled_ctas_per_sm(variant: Variant, problem: Problem, arch) -> tuple[int, str]:
    """CTAs per SM of the build ``prepare`` would launch on ``arch`` (an ``Arch``), without its
    GPU: the cubin exported for ``arch.sm`` with the same compile hints, its registers and shared
    memory (``cuobjdump``) and required CTA size (``required_threads``) under the arch's
    published limits (``spec.family.published_limits``). Returns (CTAs per SM, a note naming
    those resources). On the H100 this gives the 2 per SM ncu shows for the sawtooth study's
    ``occ2`` builds (256 threads, 128 registers, 98 KB).

    ``cuobjdump``'s SHARED already holds the 1 KB the system reserves per CTA: for all four of
    those builds it is the driver's static shared size plus exactly 1024 B (91312 / 90288, 99520 /
    98496, 74920 / 73896 B; ``profiles/h100/occupancy-20261125/probe.txt.xz``), so the static size
    passed on is SHARED minus the reserve, which ``ctas_per_sm`` adds back. The cubin's facts are
    kept on disk between runs (``kernels.build.resources.launch_facts``)."""
    from kernels.build.resources import launch_facts
    from kernels.build.signatures import CompileCase
    level = variant.level if variant.level is not None else 6
    occupancy, worker_warps = compile_hints(variant, problem, arch.name, level)
    threads, regs, shared = launch_facts(CompileCase.of(variant, problem, level=level), arch.sm,
                                         occupancy, worker_warps)
    if threads is None:
        raise RuntimeError(f"{variant.id(problem)}: the {arch.sm} cubin states no CTA size")
    limits = family.published_limits(arch)
    static = shared - limits.reserved_smem_per_block
    per_sm = limits.ctas_per_sm(threads, regs, static)
    return per_sm, (f"resident CTAs from the {arch.sm} cubin: {threads} threads, {regs} "
                    f"registers, {static} B static shared -> {per_sm} per SM")


class CutileFamily:
    """cuTile FlashAttention forward family. ``arch=None`` uses the GPU present; a named arch must
    be the GPU present. The tuning-ladder level is the variant's (``Variant.level``, None: 6).
    ``defaults`` replaces the arch's measured configuration as the source of the compile hints
    (``experiments.tuning.tune`` prepares every candidate configuration this way)."""

    name = "cutile"

    def __init__(self, arch: str | None = None, defaults: KernelConfig | None = None):
        self.requested_arch = arch
        self.defaults = defaults

    # --------------------------------------------------------------------------------------
    def prepare(self, variant: Variant, problem: Problem, tactic: int | None = None) -> Prepared:
        """``tactic``: the kernel's TACTIC bits (``kernels.device.tactics``); None takes the
        variant's (``Variant.tactic``), else the ``defaults`` configuration's (0 without one),
        and a scan order other than linear always gets 0 (the studies' builds)."""
        if variant.backend != Backend.CUTILE:
            raise UnsupportedVariant(f"variant backend {variant.backend.value!r}; this is the "
                                     "cutile backend")
        arch = check_arch(self.requested_arch)
        tiles = variant.tiles
        for name, v in (("TILE_M", tiles.m), ("TILE_N", tiles.n)):
            if v & (v - 1) or v > MAX_TILE:
                raise UnsupportedVariant(f"{name}={v}: cuTile tiles must be powers of two up to "
                                         f"{MAX_TILE} (e.g. 64 or 128)")
        level = variant.level if variant.level is not None else 6
        if level not in range(1, 7):
            raise UnsupportedVariant(f"tuning-ladder level {level!r}; accepted: 1..6")
        occupancy, worker_warps = compile_hints(variant, problem, arch.name, level, self.defaults)
        sched = variant.schedule
        g = TileGrid(problem, tiles)
        import torch

        from kernels.build.resources import load_build
        from kernels.build.signatures import CompileCase
        from kernels.device import fmha
        if tactic is None:
            tactic = variant.tactic or (self.defaults.tactic if self.defaults is not None else 0)
        if variant.order.kind != OrderKind.LINEAR:
            tactic = 0
        case = CompileCase.of(variant, problem, level=level, tactic=tactic)
        consts = case.constants()[:-1]           # the trace flag is passed at launch
        b = load_build(case, arch.sm, occupancy, worker_warps, torch.cuda.current_device())
        return Prepared(variant, problem, sched.grid_size(g), b.threads, b.registers,
                        b.local_bytes, b.smem_bytes, b.ctas_per_sm, b.symbol, arch.name,
                        arch.num_sms, occupancy, worker_warps, level, consts,
                        fmha.qk_scale_for(problem.D, level), tactic)

    def _launch(self, p: Prepared, q, k, v, out, trace_buf, trace: bool) -> None:
        import cuda.tile as ct
        import torch

        from kernels.build.toolchain import explain_compile_error
        from kernels.device import fmha
        got = problem_from_tensors(q, k, v, p.problem.causal, out)
        if replace(got, causal=p.problem.causal) != p.problem:
            raise BadInput(f"tensors describe {got.label}, but the kernel was prepared for "
                           f"{p.problem.label}")
        kern = fmha.get_kernel(p.occupancy, p.worker_warps)
        args = (q, k, v, out, trace_buf, p.qk_scale) + p.consts + (bool(trace),)
        try:
            ct.launch(torch.cuda.current_stream(), (p.n_ctas, 1, 1), kern, args)
        except Exception as e:  # noqa: BLE001 - only toolchain failures are rewrapped
            err = explain_compile_error(e)
            if err is e:
                raise
            raise err from e

    def run(self, prepared: Prepared, q, k, v, out) -> None:
        self._launch(prepared, q, k, v, out, _dummy_trace(q.device), trace=False)

    def trace(self, prepared: Prepared, q, k, v, out, every: int = 1) -> dict:
        """Run the trace build; returns ``spec.family.TRACE_KEYS``: ``visits`` int32
        [n_ctas, max_steps + 1, 4] padded with -1 (one spare step column: a kernel that visits
        more than the spec leaves a mark there), ``build``, the trace build's symbol, and the timing
        and placement keys None (cuTile has no timer or SM-id intrinsic). It records every step:
        ``every`` other than 1 is refused (a stride only thins timing stamps, which it has none
        of)."""
        if every != 1:
            raise BadInput(f"every={every}: the cuTile trace build records every step's visit "
                           "and no timing; sparse stamps are the CUDA trace build's")
        import torch

        from spec.trace import visit_order
        g = TileGrid(prepared.problem, prepared.variant.tiles)
        steps = visit_order(g, prepared.variant.schedule, prepared.variant.order).table().shape[1]
        buf = torch.full((prepared.n_ctas, steps + 1, 4), -1, dtype=torch.int32, device=q.device)
        self._launch(prepared, q, k, v, out, buf, trace=True)
        torch.cuda.synchronize()
        from kernels.build.signatures import CompileCase
        build = CompileCase.of(prepared.variant, prepared.problem, trace=True,
                               level=prepared.level, tactic=prepared.tactic).signature().symbol
        return {"visits": buf.cpu().numpy(), "time_ns": None, "smid": None, "start_ns": None,
                "end_ns": None, "build": build, "every": 1}


_DUMMIES: dict = {}


def _dummy_trace(device):
    import torch
    key = str(device)
    if key not in _DUMMIES:
        _DUMMIES[key] = torch.zeros((1, 1, 4), dtype=torch.int32, device=device)
    return _DUMMIES[key]


# ------------------------------------------------------------------------------------------
# the plain function: one lookup and one launch per repeated call
# ------------------------------------------------------------------------------------------
_FAMILIES: dict = {}
_LAUNCHES: dict = {}


def default_schedule(problem: Problem, cfg: KernelConfig, tiles: Tiles,
                     arch: arch_registry.Arch) -> CtaSchedule:
    """The schedule a configuration names for ``problem`` on ``arch``: the grid launch, the grid
    launch longest first within L2 sections of heads (``spec.schedules.section_heads``), or P
    persistent CTAs (``kernels.rules.config.persistent_ctas``) in q-major order (grid-stride or
    snake deal) or longest causal rows first (LPT)."""
    if cfg.schedule == "grid":
        return CtaSchedule.grid()
    if cfg.schedule == "glpt":
        return CtaSchedule.sectioned_longest_first(section_heads(problem, arch.l2_bytes))
    p = persistent_ctas(cfg, TileGrid(problem, tiles).n_work, arch.num_sms)
    persistent = {"persistent": CtaSchedule.persistent, "snake": CtaSchedule.snake,
                  "lpt": CtaSchedule.longest_first}
    return persistent[cfg.schedule](p)


def default_variant(problem: Problem, arch: arch_registry.Arch, *,
                    order: str | ScanOrder = "linear", schedule: str | CtaSchedule | None = None,
                    tiles: Tiles | tuple[int, int] | None = None, occupancy: int | None = None,
                    level: int = 6, training: bool = False,
                    backward_schedule: str | CtaSchedule | None = None,
                    backward_tiles: Tiles | tuple[int, int] | None = None,
                    backward_one_pass: bool | None = None,
                    kv_lengths: bool = False) -> Variant | Training | DecodePlan:
    """The cuTile forward that ``attention()`` runs for ``problem`` on ``arch``, and the one place
    its defaults are resolved: the configuration the arch's rule chooses for the problem
    (``kernels.rules.choice.problem_config``: tiles, occupancy hint, schedule, tactic bits), its
    schedule (``default_schedule``), each overridden by what is given. The studies' default
    cases, the benches and ``attention()`` all take their build from here. The tactic bits go
    with the configuration's tiles on the linear scan from ladder level 4 (the studies' other
    orders are built without them); the occupancy is the hint the build is compiled with
    (``compile_hints``: the configuration's for its tiles, the registry's for others, none below
    level 5).

    With ``training`` the result is a ``spec.variant.Training``: this forward and the backward's
    configuration (``_default_backward``: each pass's tiles and hints from the fitted backward
    rule, ``order`` for both passes' scans, as ``attention(order=...)`` runs them,
    ``backward_schedule`` (None: the grid launch) and ``backward_tiles`` for both passes when
    given; ``backward_one_pass`` True or False forces the one pass or the two).

    An inference call (``training`` False) of at most ``spec.decode.DECODE_MAX_ROWS`` query rows
    per head, or one that names ``schedule="decode[N]"``, gets the split-K/V decode kernels'
    ``kernels.host.decode.DecodePlan`` instead (``decode_choice``: when; the splits from the
    work model of ``spec.decode.choose_splits``); ``kv_lengths`` (per-sequence cache lengths
    given) needs them."""
    dec = decode_choice(problem, order=order, schedule=schedule, tiles=tiles, level=level,
                        save_lse=training, lengths=kv_lengths)
    if dec is not None:
        from kernels.host.decode import plan
        return plan(problem, arch.num_sms, dec.splits)
    cfg = problem_config(arch.name, problem)
    tiles = cfg.tiles if tiles is None else tiles if isinstance(tiles, Tiles) else Tiles(*tiles)
    order = order if isinstance(order, ScanOrder) else ScanOrder.parse(order)
    if schedule is None:
        schedule = default_schedule(problem, cfg, tiles, arch)
    elif not isinstance(schedule, CtaSchedule):
        schedule = CtaSchedule.parse(schedule)
    tactic = (cfg.tactic if level >= 4 and tiles == cfg.tiles and order.kind == OrderKind.LINEAR
              else 0)
    variant = Variant(Backend.CUTILE, order, schedule, tiles, occupancy,
                      None if level == 6 else level, tactic=tactic)
    if occupancy is None:
        variant = replace(variant, occupancy=compile_hints(variant, problem, arch.name, level,
                                                           cfg)[0])
    if not training:
        return variant
    return Training(variant, _default_backward(problem, order, backward_schedule, backward_tiles,
                                               backward_one_pass))


def _default_backward(problem: Problem, order: ScanOrder,
                      schedule: str | CtaSchedule | None = None,
                      tiles: Tiles | tuple[int, int] | None = None,
                      one_pass: bool | None = None) -> BackwardConfig:
    """The backward half of ``default_variant(training=True)``. Without a mask, at D=128 and at
    D=64 from ``ONE_PASS_D64_MIN_ROWS`` query rows on: the one pass (``BackwardConfig.one_pass``)
    on ``BASE`` at D=128, ``WIDE`` at D=64, each build checked spill-free with its dQ reduce.
    Measured with ``explorations/fused_bwd_probe.py`` (H200, profiles/h200/bwd-onepass-20261129)
    against the two passes: at D=128 0.71-0.86x on all five such problems (rule.txt.xz); at D=64
    (wide64.txt.xz) 0.88-0.95x at S = 3000-4096 and 1.03-1.28x at S = 197-1000, the one pass's two
    extra launches and its dQ reduce outweighing the two MMAs a pair it saves on short
    sequences (2048: the power of two above the crossover, ~1550 interpolated in log S). Causal:
    1.00-1.83x over every tile, schedule and CTA count tried, never taken. Otherwise
    the two passes, each with the tiles and hints of least predicted time under the fitted rule
    (``kernels.rules.backward_choice.fitted_rule``; ``BASE`` for both where it has no
    constants). ``order`` and ``schedule`` (None: the grid launch) for both passes, ``tiles``
    replacing both passes' tiles; ``one_pass`` True or False overrides the choice."""
    if schedule is None:
        schedule = CtaSchedule.grid()
    elif not isinstance(schedule, CtaSchedule):
        schedule = CtaSchedule.parse(schedule)
    rule = backward_choice.fitted_rule()
    if one_pass is None:
        one_pass = not problem.causal and (problem.D == 128
                                           or problem.S_q >= ONE_PASS_D64_MIN_ROWS)
    if one_pass:
        dkdv = dq = BASE if problem.D == 128 else WIDE
    else:
        dkdv, dq = (rule.choose(problem) if rule is not None else None) or (BASE, BASE)
    if tiles is not None:
        tiles = tiles if isinstance(tiles, Tiles) else Tiles(*tiles)
        dkdv, dq = replace(dkdv, tiles=tiles), replace(dq, tiles=tiles)
    return BackwardConfig(*(PassConfig(c.tiles, c.occupancy, c.worker_warps, order, schedule)
                            for c in (dkdv, dq)), one_pass=one_pass)


def default_residency(problem: Problem, arch: arch_registry.Arch) -> int:
    """Resident CTAs per SM of the configuration ``default_variant`` takes for ``problem``: the
    one measured with it, else its occupancy hint, else 1 (the studies' capacity of a default
    case)."""
    cfg = problem_config(arch.name, problem)
    return cfg.ctas_per_sm or cfg.occupancy or 1


def family_for(problem: Problem, arch: arch_registry.Arch) -> "CutileFamily":
    """A family that compiles any problem with the hints ``problem`` resolves to (the warm-up
    compiles a real problem's builds on a smaller one with the same JIT facts)."""
    return CutileFamily(defaults=problem_config(arch.name, problem))


class Launch:
    """One prepared launch of ``attention()``: what a repeated call with the same launch key
    does, and nothing else (the tensors were checked when the key was first seen; shapes,
    strides, dtypes and devices are in the key, so they are the checked ones).

    ``ct.launch`` takes the raw stream handle of torch's current stream on the tensors' device
    (``torch._C._cuda_getCurrentRawStream``: about 0.3 us, where ``torch.cuda.current_stream()``
    builds a Python stream object each call).

    ``scale`` is the softmax scale (None: 1/sqrt(D)); with ``save_lse`` the launch is the
    training build (``fmha.fmha_fwd_lse``, same constants) and a call passes the fp32 LSE
    buffer it fills; ``backward_plans`` then holds the backward prepared for it
    (``kernels.host.backward.plan_for``), so a training step looks its launch key up once."""

    __slots__ = ("prepared", "grid", "kernel", "tail", "device", "empty_like", "raw_stream",
                 "launch", "save_lse", "backward_plans")

    def __init__(self, prepared: Prepared, device_index: int, scale: float | None = None,
                 save_lse: bool = False):
        import cuda.tile as ct
        import torch

        from kernels.device import fmha
        self.prepared = prepared
        self.grid = (prepared.n_ctas, 1, 1)
        self.save_lse = save_lse
        self.kernel = fmha.get_kernel(prepared.occupancy, prepared.worker_warps, save_lse)
        qk_scale = fmha.qk_scale_for(prepared.problem.D, prepared.level, scale)
        if save_lse:
            self.tail = (qk_scale,) + prepared.consts
        else:
            self.tail = (_dummy_trace(torch.device("cuda", device_index)), qk_scale) \
                + prepared.consts + (False,)
        self.device = device_index
        self.empty_like = torch.empty_like
        self.raw_stream = torch._C._cuda_getCurrentRawStream
        self.launch = ct.launch
        self.backward_plans: dict = {}

    def __call__(self, q, k, v, out, lse=None) -> None:
        args = (q, k, v, out) if lse is None else (q, k, v, out, lse)
        try:
            self.launch(self.raw_stream(self.device), self.grid, self.kernel, args + self.tail)
        except Exception as e:  # noqa: BLE001 - only toolchain failures are rewrapped
            from kernels.build.toolchain import explain_compile_error
            err = explain_compile_error(e)
            if err is e:
                raise
            raise err from e


def _linear(order) -> bool:
    return order == "linear" or isinstance(order, ScanOrder) and order.kind == OrderKind.LINEAR


def decode_choice(problem: Problem, *, order, schedule, tiles, level: int, save_lse: bool,
                  lengths: bool = False) -> DecodeSchedule | None:
    """Whether ``default_variant`` gives this call the split-K/V decode kernels
    (``kernels.host.decode``), and with which splits; None: the split-Q forward.

    Decode is an inference path: the training forward (``save_lse``) always takes the split-Q
    forward, whose log-sum-exp layout the backward reads. A call asks for it by name with
    ``schedule="decode"`` / ``"decode<N>"``; with ``schedule=None`` it is taken for every query
    block of at most ``spec.decode.DECODE_MAX_ROWS`` rows per head on the linear order with the
    default tiles and ladder level, and any named split-Q schedule ("grid", "static132", ...),
    an order other than linear, ``tiles`` or ``level`` keep the split-Q forward (the studies'
    builds stay reachable). Why always at S_q ≤ 16, not only when the split-Q grid cannot fill
    the GPU: the split-Q forward also lost at a filled grid (B = 64, H = 32/8, S_kv = 2048:
    0.55x SDPA on an H200), because each CTA's 64- or 128-row Q tile holds 1..16 real rows and
    each query head of a group reads the group's K/V again; the decode kernel reads each K/V
    tile once per group and, with one split, is the grid launch without that waste.
    ``lengths`` (per-sequence ``kv_lengths``) needs the decode kernels."""
    named = DecodeSchedule.parse(schedule)
    if named is not None:
        if save_lse:
            raise UnsupportedVariant(f"schedule={schedule!r} is an inference kernel (no "
                                     "log-sum-exp for a backward): call it under "
                                     "torch.no_grad() or pick a split-Q schedule")
        if tiles is not None or level != 6 or not _linear(order):
            raise UnsupportedVariant(f"schedule={schedule!r} takes no tiles=, level= or scan "
                                     "order other than linear (the decode kernel's own)")
        return named
    auto = (schedule is None and not save_lse and problem.S_q <= DECODE_MAX_ROWS
            and tiles is None and level == 6 and _linear(order))
    if lengths and not auto:
        raise UnsupportedVariant(
            "kv_lengths= runs on the decode kernels only: S_q <= "
            f"{DECODE_MAX_ROWS}, no gradient, schedule None or 'decode[N]', linear order, "
            "default tiles and level")
    return DecodeSchedule() if auto else None


def _new_launch(q, k, v, out, causal, order, schedule, tiles, occupancy, arch, level,
                scale=None, save_lse=False, lengths=None) -> "Launch | DecodeLaunch":
    """Check the tensors (``spec.family.problem_from_tensors``), resolve the configuration
    (the arch's measured defaults for the problem's shape class unless given) and prepare it:
    the decode launch when ``decode_choice`` says so."""
    problem = problem_from_tensors(q, k, v, causal, out)
    scale = resolve_scale(scale, problem.D) if scale is not None else None
    if lengths is not None:
        check_lengths(lengths, q)
    if save_lse and level < 2:
        raise UnsupportedVariant(f"level={level}: the training forward (log-sum-exp for the "
                                 "backward pass) needs tuning-ladder level 2 or above (exp2)")
    chosen = default_variant(problem, check_arch(arch), order=order, schedule=schedule,
                             tiles=tiles, occupancy=occupancy, level=level, training=save_lse,
                             kv_lengths=lengths is not None)
    import torch
    if isinstance(chosen, Training):                        # the training forward
        chosen = chosen.forward
    if not isinstance(chosen, Variant):                     # the decode kernels' plan
        from kernels.host.decode import DecodeLaunch
        with torch.cuda.device(q.device):
            return DecodeLaunch(chosen, q.device.index, scale, bottom_right=lengths is not None)
    fam = _FAMILIES.get(arch) or _FAMILIES.setdefault(arch, CutileFamily(arch))
    with torch.cuda.device(q.device):
        return Launch(fam.prepare(chosen, problem), q.device.index, scale, save_lse)


def attention(q, k, v, *, causal: bool = False, order: str | ScanOrder = "linear",
              schedule: str | CtaSchedule | None = None,
              tiles: Tiles | tuple[int, int] | None = None, occupancy: int | None = None,
              arch: str | None = None, level: int = 6, out=None, scale: float | None = None,
              lse=None, kv_lengths=None):
    """Attention forward ``softmax(q kᵀ · scale) v`` with the cuTile kernel family.

    q: [B, H, S_q, D]; k, v: [B, H_kv, S_kv, D] (H_kv divides H); fp16 or bf16 on one CUDA GPU;
    D in (64, 128); any strides with the last dimension contiguous (a [B, S, H, D] tensor
    transposed to [B, H, S, D] needs no copy). ``causal`` masks top-left aligned (query row r
    sees keys 0..r, as SDPA's ``is_causal``). ``order``: "linear", "sawtooth[X]", "reverse",
    "blockparity" or a ScanOrder. ``schedule``: "grid", "tile<X>", "static<P>", "static<P>h",
    "snake<P>", "lpt<P>", "glpt<G>", a CtaSchedule, or None for the measured default. The
    defaults are those of the arch and the problem's shape class
    (``kernels.rules.choice.problem_config``), read from ``kernels/rules/configs/<arch>.json``;
    ``tiles`` (a Tiles or (TILE_M, TILE_N)) and ``occupancy`` override them. ``scale`` is SDPA's
    ``scale=`` (None: 1/sqrt(D)). ``lse``, an fp32 [B, H, S_q] tensor (last dimension
    contiguous), selects the training build, which also stores each row's log-sum-exp there
    (``kernels.device.fmha``; the backward pass reads it). Returns ``out`` (allocated like q when
    not given). This function does not differentiate: ``kernels.attention`` does.

    The host path: the first call with a given launch key (shapes, strides, dtypes and devices
    of the tensors, and every argument) checks the tensors, resolves the configuration and
    compiles or loads the build; a repeated call builds the key, looks it up and launches. This
    is the eager path; ``kernels.attention`` wraps it in a ``torch.library`` custom op for
    ``torch.compile``.

    Decode (``decode_choice``): without ``lse``, a query block of at most 16 rows per head runs
    the split-K/V decode kernels (``kernels.host.decode``) unless a split-Q schedule, order,
    tiles or level is named; ``schedule="decode"`` / ``"decode<N>"`` asks for them (N splits).
    ``kv_lengths``, an int32 tensor [B] on q's device, gives each sequence's cache length (keys
    from it on are ignored; causal then aligns each sequence's last query row with its last
    key, as FlashAttention's ``cache_seqlens``); it is never read on the host."""
    launch = launch_for(q, k, v, causal, order, schedule, tiles, occupancy, arch, level, out,
                        scale, lse is not None, kv_lengths)
    if out is None:
        out = launch.empty_like(q)
    if kv_lengths is None:
        launch(q, k, v, out, lse)
    else:
        launch(q, k, v, out, lse, kv_lengths)
    return out


def launch_for(q, k, v, causal=False, order="linear", schedule=None, tiles=None,
               occupancy=None, arch=None, level=6, out=None, scale=None,
               save_lse=False, kv_lengths=None) -> "Launch | DecodeLaunch":
    """The cached ``Launch`` of an ``attention()`` call with these arguments (prepared on the
    first call with its launch key); ``launch(q, k, v, out)`` runs it."""
    try:
        key = (q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device,
               v.shape, v.stride(), v.dtype, v.device, causal, order, schedule, tiles,
               occupancy, arch, level,
               None if out is None else (out.shape, out.stride(), out.dtype, out.device),
               scale, save_lse,
               None if kv_lengths is None else (kv_lengths.shape, kv_lengths.dtype,
                                                kv_lengths.device))
        launch = _LAUNCHES.get(key)
    except (AttributeError, TypeError):   # not tensors, or an unhashable argument
        problem_from_tensors(q, k, v, causal, out)      # names the tensor that is not one
        if kv_lengths is not None:
            check_lengths(kv_lengths, q)
        resolve_scale(scale, q.shape[-1])               # names a scale that is not a number
        raise BadInput(f"tiles={tiles!r}, order={order!r}, schedule={schedule!r}: pass a Tiles "
                       "or a (TILE_M, TILE_N) tuple, and strings or spec objects") from None
    if launch is None:
        launch = _new_launch(q, k, v, out, causal, order, schedule, tiles, occupancy, arch, level,
                             scale, save_lse, kv_lengths)
        _LAUNCHES[key] = launch
    return launch


__all__ = ["CutileFamily", "Launch", "Prepared", "attention", "launch_for", "BadInput",
           "UnsupportedVariant",
           "OrderKind", "ScheduleKind"]

"""The plans of the studies: for each arch, the cases (problem x variant x resident CTAs) a study
runs.

A plan is pure data: the same cases drive measurement (kernels, ncu, CUDA events) and simulation
(spec traces through the L2 simulator). Sequence lengths are per-arch presets: GB10 uses the
paper's numbers; other GPUs scale S with their L2 so that K/V per head stands in the same relation
to the cache as on GB10 (the effect under study depends on that ratio, not on S itself).
"""
from __future__ import annotations

from analysis.models.steptime import BuildCosts
from spec import Arch, Backend, CtaSchedule, Problem, ScanOrder, Tiles, Variant, get_arch
from spec.case import Case
from spec.paper import AUTHORS_CUDA_TILE, AUTHORS_OCCUPANCY, PAPER_S, paper_build
from spec.schedules import WorkOrder, section_heads
from spec.variant import BackwardPass


def misscost_ctas(arch: Arch) -> int:
    """Attention CTAs of the miss-cost study: about three quarters of the SMs, a multiple of 8
    (the SM granularity of a green-context split on Hopper); the other SMs run the DRAM
    streamer (experiments.instruments.streamer). H100: 96 attention SMs, 36 streaming."""
    return max(8, (3 * arch.num_sms // 4) // 8 * 8)


CUTILE_STUDY_OCCUPANCY = 2  # the seed kernel's hint: spill-free on sm_90, two CTAs per SM
"""On GB10 the sawtooth study simulates the paper's builds (``spec.paper.AUTHORS_OCCUPANCY``: one
CTA per SM, so the tile-based launch keeps 48 CTAs resident, not 96); elsewhere it keeps
occupancy 2 (at 255 registers the causal builds spill on sm_90: 680-1888 B of stack)."""
PAPER_L2 = get_arch("gb10").l2_bytes

SM90_BUILDS: dict[tuple[str, str, bool, int], BuildCosts] = {
    ("persistent", "linear", True, 1): BuildCosts(8.0, 680, 140560),
    ("persistent", "sawtooth", True, 1): BuildCosts(200.0, 1888, 189808),
}
"""What this project's causal cuTile 64x64 D=64 builds do per step on sm_90 at occupancy 1
(cuda-tile 1.7, 255 registers; at occupancy 2 none spills): LDL + STL per thread in the bulk step
loop (linear 4 + 4, sawtooth 100 + 100; the diagonal tile's loop, once per item, aside), stack
bytes per thread and shared memory per CTA. Keyed by (schedule, order, causal, occupancy); the
builds-toolchains run (``analysis.data.steps``) holds them, and test_steptime checks the two
agree."""


def build_costs(case: Case, arch: Arch) -> BuildCosts:
    """What the build ``case`` stands for on ``arch`` does per step, as read off its cubin: on
    GB10 the paper's cuTile builds compiled with ``AUTHORS_TOOLCHAIN`` (the registered
    builds-toolchains run), on sm_90 this project's spilling builds (``SM90_BUILDS``); nothing
    known (the family's defaults) otherwise."""
    v = case.variant
    if v.backend != Backend.CUTILE:
        return BuildCosts()
    sched = "persistent" if v.schedule.is_persistent else "tile"
    if arch.name == "gb10":
        from analysis.data.steps import step_costs
        name = paper_build("static" if sched == "persistent" else "tile2",
                           v.order.label).id(case.problem.causal)
        b = step_costs()[(name, AUTHORS_CUDA_TILE, arch.sm)]
        return BuildCosts(b.bulk_spill_per_step, b.stack, b.shared,
                          f"build {name}, cuda-tile {b.cuda_tile} / tileiras {b.tileiras}")
    if arch.sm == "sm_90":
        return SM90_BUILDS.get((sched, v.order.label, case.problem.causal, v.occupancy or 1),
                               BuildCosts())
    return BuildCosts()


def scaled_seq(arch: Arch, s_paper: int = PAPER_S, quantum: int = 32768) -> int:
    """S giving K/V per head the same size relative to this arch's L2 as ``s_paper`` on GB10."""
    if arch.name == "gb10":
        return s_paper
    return max(quantum, round(s_paper * arch.l2_bytes / PAPER_L2 / quantum) * quantum)


def _twins(backend: Backend, schedule: CtaSchedule, tiles: Tiles,
           occupancy: int | None = None) -> list[Variant]:
    """The linear variant and its sawtooth twin; everything else identical (a fair comparison)."""
    return [Variant(backend, order, schedule, tiles, occupancy)
            for order in (ScanOrder.linear(), ScanOrder.sawtooth())]


def sawtooth_plan(arch: Arch) -> list[Case]:
    """The paper's main study (F8, F9, F10): linear vs sawtooth.

    cuTile: B=8, H=1, D=64, 64×64 tiles, fp16, occupancy hint 2 (the seed kernel's; on sm_90 it
    is also what keeps these builds spill-free, see tests/cpu/kernels/test_study_builds.py); Static
    (one persistent CTA per SM, q-major) and Tile-based (X=2 consecutive Q tiles per CTA, grid
    launch); causal and non-causal.
    CUDA: B in {1, 2, 4, 8}, H=1, D=64, 80×80 tiles, one persistent CTA per SM, non-causal.
    On GB10 the cuTile builds are the paper's (``AUTHORS_OCCUPANCY``).
    """
    s = scaled_seq(arch)
    p = arch.num_sms
    occ = AUTHORS_OCCUPANCY if arch.name == "gb10" else CUTILE_STUDY_OCCUPANCY
    cases = []
    for causal in (False, True):
        prob = Problem(B=8, H=1, S_q=s, D=64, causal=causal)
        mode = "causal" if causal else "noncausal"
        for v in _twins(Backend.CUTILE, CtaSchedule.persistent(p), Tiles(64, 64), occ):
            cases.append(Case(prob, v, p, f"cutile-{mode}-static"))
        for v in _twins(Backend.CUTILE, CtaSchedule.tile_x(2), Tiles(64, 64), occ):
            cases.append(Case(prob, v, arch.resident_ctas(occ), f"cutile-{mode}-tile2"))
    for b in (1, 2, 4, 8):
        prob = Problem(B=b, H=1, S_q=s, D=64)
        for v in _twins(Backend.CUDA, CtaSchedule.persistent(p), Tiles(80, 80)):
            cases.append(Case(prob, v, p, "cuda-batch"))
    return cases


def backward_plan(arch: Arch) -> list[Case]:
    """The backward's scan order: each main kernel of the cuTile backward alone (dK/dV: a CTA
    owns K/V tiles and scans Q, dO, LSE, Δ; dQ: a CTA owns Q tiles and scans K/V, as the
    forward), linear vs sawtooth, on the sawtooth study's problem class (B=8, H=1, D=64,
    S = ``scaled_seq``, fp16, 64×64 tiles, occupancy 2) with one persistent CTA per SM (each
    owning several tiles, the Static schedule of the forward study); causal and not. Then the
    dQ pass again with 64x128 tiles (K/V tiles of 128 rows), its spill-free twins."""
    s, p = scaled_seq(arch), arch.num_sms
    cases = []
    for causal in (False, True):
        prob = Problem(B=8, H=1, S_q=s, D=64, causal=causal)
        mode = "causal" if causal else "noncausal"
        for bwd in BackwardPass:
            for order in (ScanOrder.linear(), ScanOrder.sawtooth()):
                v = Variant(Backend.CUTILE, order, CtaSchedule.persistent(p), Tiles(64, 64),
                            CUTILE_STUDY_OCCUPANCY, bwd=bwd)
                cases.append(Case(prob, v, p, f"{bwd.value}-{mode}"))
    # the dQ twins at 64x64 keep a stack frame (656 B; causal 2432 vs 4056 B); with 128-row K/V
    # tiles both twins compile spill-free with equal registers (tests/cpu/kernels/
    # test_backward_study_builds.py): the fair dQ comparison, a coarser step of the same scan
    for causal in (False, True):
        prob = Problem(B=8, H=1, S_q=s, D=64, causal=causal)
        mode = "causal" if causal else "noncausal"
        for order in (ScanOrder.linear(), ScanOrder.sawtooth()):
            v = Variant(Backend.CUTILE, order, CtaSchedule.persistent(p), Tiles(64, 128),
                        CUTILE_STUDY_OCCUPANCY, bwd=BackwardPass.DQ)
            cases.append(Case(prob, v, p, f"dq-{mode}-n128"))
    return cases


def dqpair_plan(arch: Arch) -> list[Case]:
    """The backward finding repeated: the fair dQ pair of the backward study
    (64x128 tiles, one persistent CTA per SM, occupancy 2, B=8, H=1, D=64, fp16), linear and
    sawtooth with a reverse-order control (the same single scan direction as linear, walked
    backwards: no reuse between consecutive items), causal and not, at the sawtooth study's S
    (K/V per head above the L2) and at S where K+V per head is half the L2 (sawtooth has
    nothing to win there)."""
    p = arch.num_sms
    cases = []
    for s in (scaled_seq(arch), kv_scaled_seqs(arch, 0.5, 0.5, 1)[0]):
        for causal in (False, True):
            prob = Problem(B=8, H=1, S_q=s, D=64, causal=causal)
            mode = "causal" if causal else "noncausal"
            for order in (ScanOrder.linear(), ScanOrder.sawtooth(), ScanOrder.reverse()):
                v = Variant(Backend.CUTILE, order, CtaSchedule.persistent(p), Tiles(64, 128),
                            CUTILE_STUDY_OCCUPANCY, bwd=BackwardPass.DQ)
                cases.append(Case(prob, v, p, f"dqpair-{mode}"))
    return cases


def spills_plan(arch: Arch) -> list[Case]:
    """A build that spills beside its twin that does not, same access stream: the causal cuTile
    Static pairs (B=8, 64x64, D=64, one persistent CTA per SM, the sawtooth study's length) at
    occupancy 1, where sm_90 builds spill inside the step loop (``SM90_BUILDS``), and at
    occupancy 2, where they do not. What the spills do to each CTA's step, to the misses of a
    causal launch (whose CTAs bunch or drift by their speed) and to the sawtooth-vs-linear time
    comparison: the H100 test of the paper's GB10 builds, whose causal linear twins spill."""
    prob = Problem(B=8, H=1, S_q=scaled_seq(arch), D=64, causal=True)
    cases = []
    for occ in (AUTHORS_OCCUPANCY, CUTILE_STUDY_OCCUPANCY):
        for v in _twins(Backend.CUTILE, CtaSchedule.persistent(arch.num_sms), Tiles(64, 64), occ):
            cases.append(Case(prob, v, arch.num_sms, f"spills-static-occ{occ}"))
    return cases


def hints_plan(arch: Arch) -> list[Case]:
    """The occupancy hint of the paper's cuTile builds: the sawtooth study's
    non-causal cuTile cases (B=8, 64x64, Static on every SM and Tile-based X=2, linear and
    sawtooth) at ``AUTHORS_OCCUPANCY`` beside the study's ``CUTILE_STUDY_OCCUPANCY`` twins. At
    occupancy 1 a Tile-based launch keeps one CTA per SM resident instead of two, so half as many
    concurrent scans share each K/V tile; the question is what that does to the misses, and to
    time, against each order. Causal builds are left out: at occupancy 1 they spill on sm_90."""
    prob = Problem(B=8, H=1, S_q=scaled_seq(arch), D=64)
    cases = []
    for occ in (AUTHORS_OCCUPANCY, CUTILE_STUDY_OCCUPANCY):
        for v in _twins(Backend.CUTILE, CtaSchedule.persistent(arch.num_sms), Tiles(64, 64), occ):
            cases.append(Case(prob, v, arch.num_sms, f"hints-static-occ{occ}"))
        for v in _twins(Backend.CUTILE, CtaSchedule.tile_x(2), Tiles(64, 64), occ):
            cases.append(Case(prob, v, arch.resident_ctas(occ), f"hints-tile2-occ{occ}"))
    return cases


def kv_scaled_seqs(arch: Arch, lo: float, hi: float, n: int, D: int = 64,
                   quantum: int = 2048) -> list[int]:
    """``n`` sequence lengths whose K+V per head spans ``lo``..``hi`` times the arch's L2."""
    per_token = 2 * D * 2                                  # K and V rows, fp16
    first, last = lo * arch.l2_bytes / per_token, hi * arch.l2_bytes / per_token
    step = (last - first) / max(1, n - 1)
    return sorted({max(quantum, round((first + i * step) / quantum) * quantum) for i in range(n)})


def _cuda_linear(p: int, order: ScanOrder | None = None) -> Variant:
    return Variant(Backend.CUDA, order or ScanOrder.linear(), CtaSchedule.persistent(p),
                   Tiles(80, 80))


def traffic_plan(arch: Arch) -> list[Case]:
    """F3, F4, T2: L2 sector accesses vs S = 2^11 .. (the arch's scaled 128K), CUDA kernel with
    the paper's 80×80 tiles, one persistent CTA per SM, B = H = 1, causal and non-causal."""
    top = scaled_seq(arch)
    seqs = [1 << k for k in range(11, 20) if (1 << k) <= top]
    return [Case(Problem(1, 1, s, 64, causal=c), _cuda_linear(arch.num_sms), arch.num_sms,
                 "traffic-causal" if c else "traffic-noncausal")
            for c in (False, True) for s in seqs]


def divergence_plan(arch: Arch) -> list[Case]:
    """F5: L2 misses vs S where K+V per head crosses the L2 (0.5x .. 2x of it; GB10: the paper's
    64K .. 128K), linear and sawtooth, for the cold-miss line and the C_eff fit."""
    if arch.name == "gb10":
        seqs = list(range(65536, 131072 + 1, 4096))
    else:
        seqs = kv_scaled_seqs(arch, 0.5, 2.0, 13)
    return [Case(Problem(1, 1, s, 64), _cuda_linear(arch.num_sms, o), arch.num_sms,
                 f"divergence-{o.label}")
            for o in (ScanOrder.linear(), ScanOrder.sawtooth()) for s in seqs]


def active_sm_counts(arch: Arch) -> list[int]:
    """Persistent CTA counts 1 .. SM count: powers of two plus the SM count and its halves."""
    ps = {1 << k for k in range(arch.num_sms.bit_length()) if (1 << k) <= arch.num_sms}
    return sorted(ps | {arch.num_sms, arch.num_sms // 2, 3 * arch.num_sms // 4})


def l1l2_plan(arch: Arch) -> list[Case]:
    """F1, F2, T1: L1/L2 counters vs persistent CTA count at two sequence lengths (the paper's
    32K and 128K on GB10, scaled with L2 elsewhere), CUDA kernel, B = H = 1, 80×80 tiles."""
    return [Case(Problem(1, 1, s, 64), _cuda_linear(p), p, f"l1l2-s{s}")
            for s in (scaled_seq(arch, 32768), scaled_seq(arch)) for p in active_sm_counts(arch)]


def active_sms_plan(arch: Arch) -> list[Case]:
    """F6: misses, hits and hit rate vs persistent CTA count at the long sequence, linear and
    sawtooth (the paper shows linear; the sawtooth twin is our extension)."""
    s = scaled_seq(arch)
    return [Case(Problem(1, 1, s, 64), _cuda_linear(p, o), p, f"active-{o.label}")
            for o in (ScanOrder.linear(), ScanOrder.sawtooth()) for p in active_sm_counts(arch)]


def ladder_plan(arch: Arch) -> list[Case]:
    """The NVIDIA cuTile FMHA tuning ladder, levels 1..6, at B=1, H=16, S=16K, D=128 and D=64,
    non-causal, grid launch, the arch's measured default tiles; timed beside SDPA."""
    cases = []
    for D in (128, 64):
        prob = Problem(1, 16, 16384, D)
        for level in range(1, 7):
            v = Variant(Backend.CUTILE, ScanOrder.linear(), CtaSchedule.grid(), arch.cutile_tiles,
                        level=level)
            cases.append(Case(prob, v, arch.resident_ctas(arch.cutile_occupancy), f"ladder-d{D}"))
    return cases


def scaling_plan(arch: Arch) -> list[Case]:
    """TFLOPS vs S = 1K .. 128K, B=1, H=16, fp16, D = 64 and 128, causal and not: the best
    default cuTile and CUDA builds (grid launch, the arch's default tiles) beside both SDPA
    backends."""
    cases = []
    for D in (64, 128):
        for causal in (False, True):
            for k in range(10, 18):
                prob = Problem(1, 16, 1 << k, D, causal=causal)
                panel = f"scaling-d{D}-{'causal' if causal else 'noncausal'}"
                for backend, tiles in ((Backend.CUTILE, arch.cutile_tiles),
                                       (Backend.CUDA, arch.cuda_tiles)):
                    v = Variant(backend, ScanOrder.linear(), CtaSchedule.grid(), tiles)
                    cases.append(Case(prob, v, arch.num_sms, panel))
    return cases


LONG_S = 131072   # "long" for every arch here: K+V of one head at D=128 is 64 MiB, above any L2


def longseq_plan(arch: Arch) -> list[Case]:
    """The best sawtooth-aware configuration per (D, causal) at a long sequence, beside cuDNN:
    B=1, H=16, S=128K, fp16. Each family at its arch default tiles (cuTile: the measured
    kernels/rules/configs entry, CUDA: the registry's), linear and sawtooth under the grid launch,
    tile-X 2 and a persistent launch of one wave of resident CTAs; timed only."""
    cases = []
    for D in (64, 128):
        for causal in (False, True):
            prob = Problem(1, 16, LONG_S, D, causal=causal)
            panel = f"longseq-d{D}-{'causal' if causal else 'noncausal'}"
            for backend, tiles, resident in (
                    (Backend.CUTILE, arch.cutile_tiles, arch.resident_ctas(arch.cutile_occupancy)),
                    (Backend.CUDA, arch.cuda_tiles, arch.num_sms)):
                for sched in (CtaSchedule.grid(), CtaSchedule.tile_x(2),
                              CtaSchedule.persistent(resident)):
                    for v in _twins(backend, sched, tiles):
                        cases.append(Case(prob, v, resident, panel))
    return cases


def reuse_plan(arch: Arch) -> list[Case]:
    """Reuse distances and miss-ratio curves of one head (B = H = 1) at the sawtooth study's
    sequence length: cuTile Static 64×64 and CUDA 80×80 (one persistent CTA per SM), causal and
    not, linear vs sawtooth vs the block-parity ablation."""
    s, p = scaled_seq(arch), arch.num_sms
    orders = (ScanOrder.linear(), ScanOrder.sawtooth(), ScanOrder.block_parity())
    cases = []
    for causal in (False, True):
        prob = Problem(1, 1, s, 64, causal=causal)
        mode = "causal" if causal else "noncausal"
        for backend, tiles in ((Backend.CUTILE, Tiles(64, 64)), (Backend.CUDA, Tiles(80, 80))):
            for o in orders:
                v = Variant(backend, o, CtaSchedule.persistent(p), tiles)
                cases.append(Case(prob, v, p, f"reuse-{backend.value}-{mode}"))
    return cases




def cuda_tiles_plan(arch: Arch) -> list[Case]:
    """The CUDA tile sweep at B=1, H=16, S=16K, fp16, D in {64, 128}, causal and not: every
    tested tile shape with the grid launch and linear order, and at the registry's default tile
    the persistent linear and sawtooth builds in q-major (the paper's Static) and head-major work
    order, the longest-first (LPT) launch, with P = one wave of resident CTAs
    (``SM90_CTAS_PER_SM`` on sm_90, one per SM elsewhere; the ``ctas_per_sm`` rows say what the
    build got), and the sectioned longest-first grid: the shape suite's persistent-vs-grid
    comparison."""
    from cuda_baseline.build.source import SM90_CTAS_PER_SM, TESTED_TILES
    cases = []
    for D in (64, 128):
        per_sm = SM90_CTAS_PER_SM.get((arch.cuda_tiles, D), 1) if arch.sm == "sm_90" else 1
        p = arch.num_sms * per_sm
        for causal in (False, True):
            prob = Problem(1, 16, 16384, D, causal=causal)
            panel = f"cuda-tiles-d{D}-{'causal' if causal else 'noncausal'}"
            for t in TESTED_TILES:
                v = Variant(Backend.CUDA, ScanOrder.linear(), CtaSchedule.grid(), t)
                cases.append(Case(prob, v, p, panel))
            twins = [v for work in (WorkOrder.Q_MAJOR, WorkOrder.HEAD_MAJOR)
                     for v in _twins(Backend.CUDA, CtaSchedule.persistent(p, work),
                                     arch.cuda_tiles)]
            longest = [Variant(Backend.CUDA, ScanOrder.linear(), sched, arch.cuda_tiles)
                       for sched in (CtaSchedule.longest_first(p),
                                     CtaSchedule.sectioned_longest_first(
                                         section_heads(prob, arch.l2_bytes)))]
            cases += [Case(prob, v, p, panel) for v in twins + longest]
    return cases


DRIFT_FEW_CTAS = (2, 4, 8, 16)
"""The few-CTA launches of the drift study (B=1): whether a handful of CTAs, with memory
bandwidth to spare, stay in step over millions of steps (the active-sms study's P=4..16)."""


def drift_plan(arch: Arch) -> list[Case]:
    """CTA drift: the sawtooth study's CUDA configuration (persistent, one CTA per SM, 80×80
    tiles, D=64, H=1, the arch's scaled S), non-causal and causal, linear and sawtooth, at B=1
    and B=4, and at B=1 with ``DRIFT_FEW_CTAS`` persistent CTAs; each case runs its trace build,
    which stamps %globaltimer at every step."""
    s = scaled_seq(arch)
    cases = []
    for causal in (False, True):
        for b, p in [(1, arch.num_sms), (4, arch.num_sms)] + [(1, n) for n in DRIFT_FEW_CTAS]:
            prob = Problem(B=b, H=1, S_q=s, D=64, causal=causal)
            for v in _twins(Backend.CUDA, CtaSchedule.persistent(p), Tiles(80, 80)):
                cases.append(Case(prob, v, p, f"drift-{'causal' if causal else 'noncausal'}"))
    return cases


MISSCOST_STAGES = (1, None, 3)
"""K/V pipeline depths of the miss-cost study: no lookahead, the default double buffer, three."""


def misscost_plan(arch: Arch) -> list[Case]:
    """Where does a miss cost time: linear vs sawtooth, CUDA 80x80 D=64, B=H=1, one
    persistent CTA on each of ``misscost_ctas`` SMs, over K/V pipeline depth {1, 2, 3} x S
    (K+V per head 0.5x the L2, and the sawtooth study's S, 1.28x the L2 on an H100) x causal.
    The available-bandwidth axis is not a case field: the measure hook
    (``experiments.instruments.streamer.measure_misscost``) times every case with the streamer off
    and at each ``experiments.instruments.streamer.LEVELS`` intensity on the SMs left free, and
    records the streamer's own bandwidth; ncu counters (misses, DRAM bytes) are taken without the
    streamer (ncu serialises kernels). Attention CTAs: ``misscost_ctas``. About 5-6
    minutes on an H100; three repeats are three invocations (three run directories)."""
    p = misscost_ctas(arch)
    below = kv_scaled_seqs(arch, 0.5, 0.5, 1)[0]
    cases = []
    for causal in (False, True):
        mode = "causal" if causal else "noncausal"
        for s in (below, scaled_seq(arch)):
            prob = Problem(B=1, H=1, S_q=s, D=64, causal=causal)
            for st in MISSCOST_STAGES:
                for order in (ScanOrder.linear(), ScanOrder.sawtooth()):
                    v = Variant(Backend.CUDA, order, CtaSchedule.persistent(p), Tiles(80, 80),
                                stages=st)
                    cases.append(Case(prob, v, p, f"misscost-{mode}-st{v.pipeline_stages}"))
    return cases


CONVOY_STAGES = (1, 2, 3, 4)
"""K/V pipeline depths of the convoy grid: no lookahead, then one, two and three tiles ahead."""
CONVOY_KV_L2 = (0.5, 1.0, 1.5)
"""K+V per head over the arch's L2 in the convoy grid: below, at and above the cache."""
CONVOY_FEW_KV_L2 = (1.0,)
"""Where the grid's second CTA count (GB10's SM count) is measured."""


def convoy_plan(arch: Arch) -> list[Case]:
    """The convoy validation grid: does the simulator predict the L2 misses of the
    CUDA twin, whose CTAs are exactly the persistent CTAs the simulator places, across the
    convoy states? CUDA 80x80 D=64, B=H=1, linear and sawtooth, causal and not, over K/V
    pipeline depth ``CONVOY_STAGES`` x K+V per head ``CONVOY_KV_L2`` of the L2, with
    ``misscost_ctas`` persistent CTAs (the other SMs run the DRAM streamer); and the same at
    GB10's CTA count (48) at ``CONVOY_FEW_KV_L2``. Measured through the misscost hook with the
    streamer off and at its highest intensity (``experiments.instruments.streamer.measure_convoy``;
    one CTA count per invocation: ``--filter static96`` / ``--filter static48``). Its halves
    (``convoy_half``): fitted on the many-CTA cases below and above the L2, judged on the
    at-L2 and few-CTA cases."""
    few = get_arch("gb10").num_sms
    cases = []
    for p, fractions in ((misscost_ctas(arch), CONVOY_KV_L2), (few, CONVOY_FEW_KV_L2)):
        for causal in (False, True):
            mode = "causal" if causal else "noncausal"
            for frac in fractions:
                s = kv_scaled_seqs(arch, frac, frac, 1)[0]
                prob = Problem(B=1, H=1, S_q=s, D=64, causal=causal)
                for st in CONVOY_STAGES:
                    for order in (ScanOrder.linear(), ScanOrder.sawtooth()):
                        v = Variant(Backend.CUDA, order, CtaSchedule.persistent(p),
                                    Tiles(80, 80), stages=st)
                        cases.append(Case(prob, v, p, f"convoy-{mode}-p{p}-kv{frac:g}"))
    return cases


def convoy_half(case: Case, arch: Arch) -> str:
    """``fit`` or ``judged``: the half of the convoy grid a case belongs to, fixed before any
    of it was measured (the many-CTA cases whose K/V is below or above the L2 fit; the at-L2
    and few-CTA cases judge)."""
    fit_seqs = {kv_scaled_seqs(arch, f, f, 1)[0] for f in (CONVOY_KV_L2[0], CONVOY_KV_L2[-1])}
    many = case.variant.schedule.num_ctas == misscost_ctas(arch)
    return "fit" if many and case.problem.S_q in fit_seqs else "judged"

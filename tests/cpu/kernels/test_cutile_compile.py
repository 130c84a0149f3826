"""Compile-only checks of the cuTile family (no GPU): every variant builds for sm_90, sm_100 and
sm_121 through ``export_kernel`` with JIT-like signatures, and the resources of the cubins are sane:
the per-arch default configurations have no stack / spills, and every sawtooth build uses no more
registers and stack than its linear twin (a spilling sawtooth build reads local memory through L2
and would fake a cache effect).

Skips locally without cuda-tile + tileiras + cuobjdump; fails in CI (REQUIRE_COMPILE=1).
Set CUDA_TILE_CACHE_DIR outside the repository to reuse compiles across runs.
"""
from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from tests.conftest import require_toolchain

pytestmark = [pytest.mark.compile, pytest.mark.slow]


def _available() -> bool:
    if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.tile") is None:
        return False
    try:
        from kernels.build.resources import find_cuobjdump
        from kernels.build.toolchain import inspect
        return inspect().tileiras is not None and find_cuobjdump() is not None
    except Exception:  # noqa: BLE001
        return False


@pytest.fixture(scope="module")
def toolchain():
    require_toolchain(_available(), "cuda-tile + tileiras + cuobjdump (pip install "
                      "'cuda-tile[tileiras]' nvidia-cuda-cuobjdump)")


ORDERS = {"linear": (0, 1), "sawtooth": (1, 1), "reverse": (2, 1), "blockparity": (3, 1)}
SCHEDS = {"grid": (0, 0, 1), "tile2": (1, 0, 2), "static": (2, 0, 1), "statich": (2, 1, 1),
          "lpt": (3, 0, 1), "snake": (5, 0, 1)}
ARCHS = {"sm_90": "h100", "sm_100": "b200", "sm_121": "gb10"}


def _case(arch_name, D, causal, order, sched, dtype="fp16", S=4096, trace=False, level=6):
    from kernels.build.signatures import CompileCase
    from kernels.rules.config import default_config
    cfg = default_config(arch_name, D, causal)
    o, g = ORDERS[order]
    s, w, x = SCHEDS[sched]
    case = CompileCase(B=1, H=16, H_kv=16, S_q=S, S_kv=S, D=D, dtype=dtype, causal=causal,
                       tile_m=cfg.tile_m, tile_n=cfg.tile_n, order=o, group=g, sched=s, work=w,
                       tiles_per_cta=x, trace=trace, level=level)
    return case, cfg


def _matrix():
    """Pairwise (tests/pairwise.py) over arch × order × schedule code × mask: every order meets
    every schedule code (the full 24), and every arch meets every order, every schedule code and
    both masks. The GPU suite runs every order × schedule on sm_90. The sawtooth group factor X
    only changes a constant divisor (covered on the GPU)."""
    from tests.pairwise import pairwise
    for order, sched, sm, causal in pairwise([list(ORDERS), list(SCHEDS), list(ARCHS),
                                              [False, True]]):
        yield pytest.param(sm, causal, sched, order,
                           id=f"{sm}-{order}-{sched}-{'causal' if causal else 'full'}")


@pytest.mark.parametrize("sm, causal, sched, order", list(_matrix()))
def test_every_variant_compiles(toolchain, sm, causal, sched, order):
    from kernels.build.resources import compile_cubin
    D = 128 if causal else 64                    # both head dims, without doubling CI time
    case, cfg = _case(ARCHS[sm], D, causal, order, sched)
    cubin = compile_cubin(case, sm, cfg.occupancy, cfg.worker_warps)
    assert cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("sm", list(ARCHS))
def test_trace_build_and_ladder_compile(toolchain, sm):
    from kernels.build.resources import compile_cubin
    for level in (1, 3, 6):
        case, cfg = _case(ARCHS[sm], 64, True, "sawtooth", "static", S=1000, level=level)
        assert compile_cubin(case, sm, cfg.occupancy if level >= 5 else None)[:4] == b"\x7fELF"
    case, cfg = _case(ARCHS[sm], 64, True, "sawtooth", "tile2", S=1000, trace=True)
    assert compile_cubin(case, sm, cfg.occupancy, cfg.worker_warps)[:4] == b"\x7fELF"


def _default_sched(cfg) -> str:
    return "grid" if cfg.schedule == "grid" else "static"


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_sm90_defaults_do_not_spill_and_sawtooth_costs_nothing(toolchain, D, causal):
    from kernels.build.resources import resources
    res = {}
    for order in ("linear", "sawtooth"):
        for sched in ("static", "grid"):
            for dtype in ("fp16", "bf16"):
                if dtype == "bf16" and order == "sawtooth":
                    continue
                case, cfg = _case("h100", D, causal, order, sched, dtype=dtype)
                r = resources(case, "sm_90", cfg.occupancy, cfg.worker_warps)
                res[order, sched, dtype] = r
                print(f"sm_90 D={D} causal={causal} {order} {sched} {dtype} "
                      f"{cfg.tile_m}x{cfg.tile_n} occ{cfg.occupancy} ww{cfg.worker_warps}: {r}")
    default = _default_sched(cfg)
    for (order, sched, dtype), r in res.items():
        if sched == default:
            assert not r.spills and r.ptx["LD_LOCAL"] == r.ptx["ST_LOCAL"] == 0, \
                f"default {order}/{sched}/{dtype} D={D} causal={causal} spills: {r}"
    for sched in ("static", "grid"):
        lin, saw = res["linear", sched, "fp16"], res["sawtooth", sched, "fp16"]
        assert saw.regs <= lin.regs and saw.stack <= lin.stack, \
            f"{sched} D={D} causal={causal}: sawtooth {saw} vs linear {lin}"


@pytest.mark.parametrize("D,causal", [(64, False), (64, True), (128, True)],
                         ids=["d64.full", "d64.causal", "d128.causal"])
def test_tactic_trials_compile_without_spills(toolchain, D, causal):
    """Every kernel-tactic trial the sweep times (``experiments.tuning.candidates.tactic_trials``)
    builds for sm_90 with the hints the tuner gives it and no stack, at a ragged length (masked
    diagonal and masked end)."""
    from experiments.tuning.candidates import tactic_trials
    from kernels.build.resources import resources
    from kernels.build.signatures import CompileCase
    from kernels.host.backend import compile_hints, default_schedule
    from spec import Backend, Problem, ScanOrder, Variant, get_arch
    arch = get_arch("h100")
    pr = Problem(B=1, H=8, S_q=3001, S_kv=3001, D=D, dtype="bf16", causal=causal)
    for c in tactic_trials(D, causal):
        cfg = c.config()
        v = Variant(Backend.CUTILE, ScanOrder.linear(), default_schedule(pr, cfg, cfg.tiles, arch),
                    cfg.tiles, c.occupancy)
        occ, ww = compile_hints(v, pr, arch.name, 6, cfg)
        r = resources(CompileCase.of(v, pr, tactic=cfg.tactic), "sm_90", occ, ww)
        print(f"{c.label}: {r}")
        assert not r.spills and r.ptx["LD_LOCAL"] == r.ptx["ST_LOCAL"] == 0, f"{c.label}: {r}"


@pytest.mark.parametrize("S", [256, 577])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_prefetch_trials_compile_without_spills_at_short_d64(toolchain, S, causal):
    """The next-item Q prefetch (TACTIC_PREFETCH_Q) on the short D=64 batches it is timed on:
    every prefetch trial builds for sm_90 without stack, keeps at least the CTAs per SM of its
    TACTIC=0 twin (registers and shared memory, H100 limits), and has more TMA load sites than
    the twin (a Q load before the item loop and one before each epilogue replace the load at the
    top of each item), so the bit reaches the code."""
    from experiments.tuning.candidates import tactic_trials
    from kernels.build.resources import resources
    from kernels.build.signatures import CompileCase
    from kernels.device.tactics import TACTIC_PREFETCH_Q
    from kernels.host.backend import compile_hints, default_schedule
    from kernels.rules.config import KernelConfig
    from spec import Backend, Problem, ScanOrder, Variant, get_arch
    from spec.family import published_limits
    arch = get_arch("h100")
    limits = published_limits(arch)
    pr = Problem(B=32, H=12, S_q=S, S_kv=S, D=64, dtype="fp16", causal=causal)
    trials = [c for c in tactic_trials(64, causal) if c.tactic & TACTIC_PREFETCH_Q]
    assert trials, "no prefetch trial among the persistent candidates"
    for c in trials:
        res = {}
        for tactic in (c.tactic, c.tactic & ~TACTIC_PREFETCH_Q):
            cfg = KernelConfig(c.tile_m, c.tile_n, c.occupancy, c.worker_warps, c.schedule,
                               tactic=tactic)
            v = Variant(Backend.CUTILE, ScanOrder.linear(),
                        default_schedule(pr, cfg, cfg.tiles, arch), cfg.tiles, c.occupancy)
            occ, ww = compile_hints(v, pr, arch.name, 6, cfg)
            res[tactic] = r = resources(CompileCase.of(v, pr, tactic=tactic), "sm_90", occ, ww)
            print(f"{c.label} tactic {tactic} S={S}: {r}")
        pre, base = res[c.tactic], res[c.tactic & ~TACTIC_PREFETCH_Q]
        assert not pre.spills and pre.ptx["LD_LOCAL"] == pre.ptx["ST_LOCAL"] == 0, \
            f"{c.label} S={S}: {pre}"
        fit = [limits.ctas_per_sm(r.threads, r.regs, r.shared) for r in (pre, base)]
        assert fit[0] >= fit[1], f"{c.label} S={S}: {fit[0]} CTAs per SM, twin {fit[1]}"
        assert pre.ptx["TMA_LOAD"] > base.ptx["TMA_LOAD"], f"{c.label}: {pre} vs {base}"


def test_prefetch_bit_leaves_one_item_schedules_alone(toolchain):
    """The prefetch exists only in the persistent item loop: on the grid schedule (one item per
    CTA) a build with the bit is the build without it, SASS byte for byte."""
    from kernels.build.resources import compile_cubin, elf_sections
    from kernels.device.tactics import TACTIC_PREFETCH_Q
    texts = []
    for tactic in (0, TACTIC_PREFETCH_Q):
        case, cfg = _case("h100", 64, True, "linear", "grid", S=577)
        case = dataclasses.replace(case, tactic=tactic)
        cubin = compile_cubin(case, "sm_90", cfg.occupancy, cfg.worker_warps)
        texts.append(b"".join(cubin[o:o + n] for name, o, n in sorted(elf_sections(cubin))
                              if name.startswith(b".text.")))
    assert texts[0] and texts[0] == texts[1]


def test_signature_carries_jit_facts(toolchain):
    """Without the JIT's alignment facts sm_90 loses TMA; with them the loads are TMA tensor
    copies and the products warpgroup MMAs. Checked on the PTX tileiras embeds in every cubin
    (``cp.async.bulk.tensor`` is UTMALDG in SASS, ``wgmma.mma_async`` HGMMA), and the SASS
    (nvdisasm, from the compile extra: a skip without it, a failure under REQUIRE_COMPILE).
    A signature without the alignment facts (base address divisible by 1) loses TMA: the check
    can fail."""
    from dataclasses import replace

    from kernels.build.resources import resources
    case, cfg = _case("h100", 64, False, "linear", "static")
    r = resources(case, "sm_90", cfg.occupancy, cfg.worker_warps, sass=True)
    assert r.ptx["TMA_LOAD"] > 0 and r.ptx["WGMMA"] > 0 and r.ptx["MMA_SYNC"] == 0, r
    from tests.conftest import require_toolchain
    require_toolchain(r.sass is not None, "nvdisasm (pip nvidia-cuda-nvdisasm, the compile extra)")
    assert r.sass.get("UTMALDG", 0) > 0 and r.sass.get("HGMMA", 0) > 0, r
    bare = resources(replace(case, aligned=False), "sm_90", cfg.occupancy, cfg.worker_warps)
    assert bare.ptx["TMA_LOAD"] == 0, f"an unaligned signature still uses TMA: {bare}"


def test_occupancy_is_taken_at_the_launch_size_from_the_cubin(toolchain):
    """The sawtooth study's cuTile ``occ2`` builds require 256 threads (``.reqntid``); at that
    size, with cuobjdump's SHARED less the 1 KB reserve it includes (98496 B: the driver's static
    size of the loaded build, ``profiles/h100/occupancy-20261125/probe.txt.xz``), the H100's limits
    give 2 CTAs per SM, what ncu shows for them (block size 256, block limit 2), not the driver's
    1 at the register-limited 512. On GB10 the study simulates the authors' builds (occupancy 1,
    ``AUTHORS_OCCUPANCY``): 255 registers, one CTA per SM, though the causal sawtooth build's
    73868 B of static shared memory alone would not forbid a second on sm_121's 100 KB."""
    from experiments.registry.plans import sawtooth_plan
    from kernels.build.resources import compile_cubin, required_threads
    from kernels.build.signatures import CompileCase
    from kernels.host.backend import compiled_ctas_per_sm
    from spec import get_arch
    h100, gb10 = get_arch("h100"), get_arch("gb10")
    tile2 = {(a.name, c.variant.order.label, c.problem.causal): c
             for a in (h100, gb10) for c in sawtooth_plan(a)
             if c.variant.backend.value == "cutile" and c.variant.schedule.kind.name == "TILE_X"}
    c = tile2["h100", "linear", False]
    cubin = compile_cubin(CompileCase.of(c.variant, c.problem), "sm_90", c.variant.occupancy)
    assert required_threads(cubin) == 256
    per_sm, note = compiled_ctas_per_sm(c.variant, c.problem, h100)
    assert per_sm == 2 and "98496 B static shared" in note
    per_sm = {k[1]: compiled_ctas_per_sm(v.variant, v.problem, gb10) for k, v in tile2.items()
              if k[0] == "gb10" and k[2]}
    assert {k: v[0] for k, v in per_sm.items()} == {"linear": 1, "sawtooth": 1}
    assert "255 registers" in per_sm["sawtooth"][1]
    assert "73868 B static shared" in per_sm["sawtooth"][1]

"""Compile-only checks of the cuTile training builds (no GPU): the forward that stores the
log-sum-exp and the backward kernels (dQ, dK/dV, the split's sum) build for sm_90 through
``export_kernel`` with JIT-like signatures (``kernels.build.signatures.BackwardCase``), and every
backward configuration the default can choose (``kernels.rules.backward_choice``'s candidates
less its ``SPILLING`` table, and the base) does not spill (at most an 8-byte stack frame, which
the D=128 non-causal dK/dV grid build of the base has, and no local loads in its PTX): a spilling
build reads its local memory through L2 and would fake a locality effect in the backward study as
it would in the forward's. A sawtooth or persistent backward build uses no more registers and
stack than its linear grid twin. The trace builds of both passes (``bwd_dkdv_trace``,
``bwd_dq_trace``) compile under their own symbols and store the record.

Skips locally without cuda-tile + tileiras + cuobjdump; fails in CI (REQUIRE_COMPILE=1).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tests.cpu.kernels.test_cutile_compile import toolchain  # noqa: F401 - the fixture

pytestmark = [pytest.mark.compile, pytest.mark.slow]


def _cubin(case, occupancy=None, worker_warps=None) -> bytes:
    from kernels.build.resources import compile_backward_cubin
    return compile_backward_cubin(case, "sm_90", occupancy, worker_warps)


def _case(kernel, D, causal, pc, S=4096, **kw):
    from kernels.build.signatures import BackwardCase
    kw = {"tile_m": pc.tiles.m, "tile_n": pc.tiles.n} | kw
    return BackwardCase(kernel=kernel, D=D, dtype="bf16" if D == 128 else "fp16", causal=causal,
                        S_q=S, S_kv=S, **kw)


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_backward_candidates_spill_where_the_rule_says_and_nowhere_else(toolchain, D, causal):  # noqa: F811
    """Every candidate of each pass at the key: spill-free unless ``SPILLING`` lists it there
    (then the rule never takes it), so every build the default can choose, and the base, is
    spill-free; a toolchain that changes one fails here, naming it."""
    from kernels.build.resources import read_resources
    from kernels.host.backend import default_variant
    from kernels.host.backward import BASE
    from kernels.rules.backward_choice import CANDIDATES, SPILLING, cfg_label
    from spec import Problem, get_arch
    wrong = []
    for kernel in ("dkdv", "dq"):
        listed = SPILLING.get((kernel, D, causal), frozenset())
        for label, pc in CANDIDATES.items():
            r = read_resources(_cubin(_case(kernel, D, causal, pc), pc.occupancy,
                                      pc.worker_warps))
            print(f"sm_90 D={D} causal={causal} {kernel} {label}: {r}")
            assert r.ptx["WGMMA"] > 0 and r.ptx["TMA_LOAD"] > 0, f"{kernel}: no wgmma/TMA: {r}"
            spills = r.stack > 8 or r.ptx["LD_LOCAL"] > 0
            if spills != (label in listed):
                wrong.append(f"{kernel} {label} {'spills' if spills else 'spill-free'}: {r}")
        assert cfg_label(BASE) not in listed
        chosen = default_variant(Problem(1, 16, 4096, D, causal=causal), get_arch("h100"),
                                 training=True).backward
        assert cfg_label(getattr(chosen, kernel)) not in listed
    assert not wrong, "kernels.rules.backward_choice.SPILLING is wrong: " + "; ".join(wrong)
    cfg = default_variant(Problem(1, 16, 4096, D, causal=causal), get_arch("h100"),
                          training=True).backward
    from kernels.host.backward import SUM_TILE_N
    r = read_resources(_cubin(_case("split_sum", D, causal, cfg.dkdv, tile_n=SUM_TILE_N,
                                    split=4, H_kv=2)))
    assert not r.spills, f"split_sum: {r}"


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_sawtooth_and_persistent_dkdv_cost_nothing(toolchain, D, causal):  # noqa: F811
    """The dK/dV builds the scan-order study compares (default tiles, persistent CTAs, linear vs
    sawtooth Q scan) do not spill and use the same registers. (The dQ pass with persistent CTAs
    does spill on causal problems at these tiles, 0.2-4 KB of stack: the study keeps dQ on the
    grid launch.)"""
    from kernels.build.resources import read_resources
    from kernels.host.backend import default_variant
    from spec import Problem, get_arch
    from spec.orders import OrderKind
    from spec.schedules import ScheduleKind
    kernel = "dkdv"
    pc = getattr(default_variant(Problem(1, 16, 4096, D, causal=causal), get_arch("h100"),
                                 training=True).backward, kernel)
    res = {}
    for order in (OrderKind.LINEAR, OrderKind.SAWTOOTH):
        for sched in (ScheduleKind.GRID, ScheduleKind.PERSISTENT):
            case = _case(kernel, D, causal, pc, order=int(order), sched=int(sched))
            res[order, sched] = read_resources(_cubin(case, pc.occupancy, pc.worker_warps))
    base = res[OrderKind.LINEAR, ScheduleKind.GRID]
    for key, r in res.items():
        assert r.regs <= base.regs and r.stack <= max(base.stack, 8), \
            f"{kernel} {key}: {r} vs linear grid {base}"
        assert r.stack <= 8 and r.ptx["LD_LOCAL"] == 0, f"{kernel} {key} spills: {r}"


def test_training_forward_builds(toolchain):  # noqa: F811
    """The forward with the log-sum-exp store (``fmha_fwd_lse``) builds with the inference
    forward's constants and stores LSE with TMA."""
    import cuda.tile as ct
    from cuda.tile.compilation import (
        CallingConvention,
        KernelSignature,
        ScalarConstraint,
        export_kernel,
    )

    from kernels.build.resources import read_resources
    from kernels.build.signatures import CompileCase, jit_like_array
    from kernels.device import fmha
    from kernels.rules.config import default_config
    for D, causal in ((64, False), (128, True)):
        cfg = default_config("h100", D, causal)
        case = CompileCase(D=D, causal=causal, tile_m=cfg.tile_m, tile_n=cfg.tile_n, S_q=1000,
                           S_kv=1000)
        q = jit_like_array((1, 16, 1000, D), ct.float16)
        lse = jit_like_array((1, 16, 1000), ct.float32, strides=(16 * 1000, 1000, 1))
        params = [q, q, q, q, lse, ScalarConstraint(ct.float32)] + list(case.constants()[:-1])
        sig = KernelSignature(params, CallingConvention.cutile_python_v2()) \
            .with_mangled_symbol("fmha_fwd_lse")
        kern = fmha.get_kernel(cfg.occupancy, cfg.worker_warps, save_lse=True)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "k.cubin")
            export_kernel(kern, [sig], path, gpu_code="sm_90", output_format="cubin")
            r = read_resources(Path(path).read_bytes())
        print(f"fmha_fwd_lse D={D} causal={causal}: {r}")
        assert r.ptx["TMA_STORE"] >= 2 and not r.spills, r


@pytest.mark.parametrize("D", [64, 128])
def test_split_dkdv_builds_do_not_spill(toolchain, D):  # noqa: F811
    """The dK/dV build that writes fp32 partial sums (grouped heads dealt over several items,
    ``kernels.host.backward.group_split``) compiles and does not spill with the default tiles."""
    from kernels.build.resources import read_resources
    from kernels.host.backend import default_variant
    from spec import Problem, get_arch
    pc = default_variant(Problem(1, 32, 4096, D, H_kv=1, causal=True), get_arch("h100"),
                         training=True).backward.dkdv
    case = _case("dkdv", D, True, pc, H=32, H_kv=1, split=16)
    r = read_resources(_cubin(case, pc.occupancy, pc.worker_warps))
    assert r.stack <= 8 and r.ptx["LD_LOCAL"] == 0 and r.ptx["TMA_STORE"] >= 2, r


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_one_pass_builds(toolchain, causal):  # noqa: F811
    """The one-pass backward (``BackwardConfig.one_pass``) on ``BASE``: the dK/dV build with
    its dQ MMA reduces dQ by TMA (``cp.reduce.async.bulk.tensor``, no per-element atomics),
    and does not spill at D=128
    where the default takes it, with and without the group split (at D=64 causal, which the
    default never takes, it has a 16-24 byte stack), nor on 64 x 64 tiles with two CTAs per SM
    at D=128 (its dQ made in two halves along D); at D=64 ``WIDE`` (128 x 128), the default's
    one pass there, has no more stack than BASE. Its ``bwd_prep`` and ``bwd_dq_cast`` build
    spill-free."""
    from kernels.build.resources import read_resources
    from kernels.host.backward import BASE, SUM_TILE_N, PassConfig
    from kernels.rules.backward_config import WIDE
    from spec.problem import Tiles
    for D in (64, 128):
        for split, H_kv in ((1, 16), (4, 2)):
            r = read_resources(_cubin(_case("dkdv", D, causal, BASE, H_kv=H_kv, split=split,
                                            one_pass=True), BASE.occupancy, BASE.worker_warps))
            two = read_resources(_cubin(_case("dkdv", D, causal, BASE, H_kv=H_kv, split=split),
                                        BASE.occupancy, BASE.worker_warps))
            print(f"one pass D={D} causal={causal} split={split}: {r}; two passes' dK/dV {two}")
            assert r.ptx["TMA_REDUCE"] > 0 == two.ptx["TMA_REDUCE"], r
            assert r.ptx["ATOMIC"] == 0 and r.ptx["WGMMA"] > two.ptx["WGMMA"], (r, two)
            if D == 128 or not causal:
                assert not r.spills, r
        if D == 128:   # dQ in two halves along D: the two-CTA 64 x 64 build has no stack
            pc = PassConfig(Tiles(64, 64), 2)
            r = read_resources(_cubin(_case("dkdv", D, causal, pc, one_pass=True), 2))
            assert not r.spills and r.ptx["TMA_REDUCE"] > 0, r
        else:          # WIDE, the default's one pass at D=64: BASE's stack at most
            for split, H_kv in ((1, 16), (4, 2)):
                r = read_resources(_cubin(_case("dkdv", D, causal, WIDE, H_kv=H_kv, split=split,
                                                one_pass=True), 1, 8))
                assert r.ptx["TMA_REDUCE"] > 0 and r.ptx["LD_LOCAL"] == 0, r
                assert (r.stack <= 16) if causal else not r.spills, r
        for kernel in ("prep", "dq_cast"):
            r = read_resources(_cubin(_case(kernel, D, False, BASE, tile_m=SUM_TILE_N)))
            assert not r.spills, f"{kernel}: {r}"


@pytest.mark.parametrize("kernel", ["dkdv", "dq"])
def test_trace_builds_compile_and_store_the_record(toolchain, kernel):  # noqa: F811
    """The trace build of each pass in the GPU trace test's configuration (64 x 128 tiles,
    occupancy 1, 8 worker warps; sawtooth on 5 head-major persistent CTAs, causal and not)
    compiles for sm_90 as its own kernel and has more TMA stores than the plain build (the
    record); the plain build keeps its symbol."""
    from dataclasses import replace

    from kernels.build.resources import elf_sections, read_resources
    from kernels.build.signatures import BackwardCase
    for causal in (False, True):
        plain = BackwardCase(kernel=kernel, H=4, H_kv=2, S_q=333, S_kv=333 if causal else 461,
                             causal=causal, tile_m=64, tile_n=128, order=1, sched=2, work=1)
        res = {}
        for case in (plain, replace(plain, trace=True, n_ctas=5)):
            cubin = _cubin(case, 1, 8)
            text = [n for n, _, _ in elf_sections(cubin) if n.startswith(b".text.")]
            assert len(text) == 1 and text[0].startswith(
                f".text.bwd_{case.kernel_name}_".encode()), text
            res[case.trace] = read_resources(cubin)
            print(f"sm_90 {kernel} causal={causal} trace={case.trace}: {res[case.trace]}")
        assert res[True].ptx["TMA_STORE"] > res[False].ptx["TMA_STORE"], res

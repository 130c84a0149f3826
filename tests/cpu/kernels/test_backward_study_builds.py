"""The builds the backward study compares (``experiments.registry.plans.backward_plan``: each
pass persistent, occupancy 2, linear vs sawtooth; 64x64 tiles, and the dQ pass again at 64x128),
compiled for sm_90: which pairs are a fair comparison of the scan order. The findings
(analysis/findings/backward.py) and the committed run's README rest on these facts; if a toolchain
changes them, this fails and the study must be measured again.

- dK/dV non-causal: spill-free, linear and sawtooth identical in registers, stack and shared
  memory (the clean pair).
- dQ, persistent, 64x64: both orders keep a stack frame (spills); the causal dK/dV sawtooth build
  a larger one than its linear twin (its two masked loops).
- dQ, persistent, 64x128 (K/V tiles of 128 rows), causal and not: spill-free, linear and sawtooth
  equal in registers and stack; shared memory equal non-causal, within 64 B causal (both far
  under the half of an SM's shared memory that two CTAs per SM leave each): the fair dQ pairs.
  The causal dK/dV pass has no fair pair among occupancy 1/2, worker warps None/4/8 and tiles
  64x64/128x64/64x128 (every spill-free pair differs in shared memory by 18 KB or more).

Skips without cuda-tile + tileiras + cuobjdump; fails in CI (REQUIRE_COMPILE=1)."""
from __future__ import annotations

import pytest

from tests.cpu.kernels.test_cutile_compile import toolchain  # noqa: F401 - the fixture

pytestmark = [pytest.mark.compile, pytest.mark.slow]


def _resources():
    from experiments.registry.plans import backward_plan
    from kernels.build.resources import backward_resources
    from kernels.build.signatures import BackwardCase
    from spec import get_arch
    out = {}
    for c in backward_plan(get_arch("h100")):
        v, p = c.variant, c.problem
        case = BackwardCase(kernel=v.bwd.value, B=p.B, H=p.H, H_kv=p.H_kv, D=p.D,
                            dtype=p.dtype.value, causal=p.causal,
                            S_q=p.S_q, S_kv=p.S_kv, tile_m=v.tiles.m, tile_n=v.tiles.n,
                            order=int(v.order.kind), sched=int(v.schedule.kind))
        out[v.bwd.value, p.causal, v.order.label, v.tiles.n] = backward_resources(case, "sm_90",
                                                                                  v.occupancy)
    return out


def test_which_backward_study_pairs_are_fair(toolchain):  # noqa: F811
    r = _resources()
    for k, res in sorted(r.items()):
        print(k, res)
    lin, saw = r["dkdv", False, "linear", 64], r["dkdv", False, "sawtooth", 64]
    assert not lin.spills and not saw.spills
    assert (lin.regs, lin.stack, lin.shared) == (saw.regs, saw.stack, saw.shared)
    for causal in (False, True):
        for order in ("linear", "sawtooth"):
            assert r["dq", causal, order, 64].stack > 0
    assert r["dkdv", True, "sawtooth", 64].stack > r["dkdv", True, "linear", 64].stack
    for causal in (False, True):
        lin, saw = r["dq", causal, "linear", 128], r["dq", causal, "sawtooth", 128]
        assert not lin.spills and not saw.spills and lin.stack == saw.stack == 0
        assert lin.regs == saw.regs
        assert abs(lin.shared - saw.shared) <= (0 if not causal else 64)
        assert max(lin.shared, saw.shared) <= 228 * 1024 // 2

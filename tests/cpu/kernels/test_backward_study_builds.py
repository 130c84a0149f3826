"""The builds the backward study compares (``experiments.registry.plans.backward_plan``: each
pass persistent, 64x64 tiles, occupancy 2, linear vs sawtooth), compiled for sm_90: which pairs
are a fair comparison of the scan order. The findings (analysis/findings/backward.py) and the
committed run's README rest on these facts; if a toolchain changes them, this fails and the
study must be measured again.

- dK/dV non-causal: spill-free, linear and sawtooth identical in registers, stack and shared
  memory (the clean pair).
- dQ, persistent: both orders keep a stack frame (spills); the causal dK/dV sawtooth build a
  larger one than its linear twin (its two masked loops).

Skips without cuda-tile + tileiras + cuobjdump; fails in CI (REQUIRE_COMPILE=1)."""
from __future__ import annotations

import pytest

from tests.cpu.kernels.test_cutile_compile import toolchain  # noqa: F401 - the fixture

pytestmark = [pytest.mark.compile, pytest.mark.slow]


def _resources():
    from experiments.registry.plans import backward_plan
    from kernels.resources import backward_resources
    from kernels.signatures import BackwardCase
    from spec import get_arch
    out = {}
    for c in backward_plan(get_arch("h100")):
        v, p = c.variant, c.problem
        case = BackwardCase(kernel=v.bwd.value, B=p.B, H=p.H, H_kv=p.H_kv, D=p.D, dtype=p.dtype.value, causal=p.causal,
                            S_q=p.S_q, S_kv=p.S_kv, tile_m=v.tiles.m, tile_n=v.tiles.n,
                            order=int(v.order.kind), sched=int(v.schedule.kind))
        out[v.bwd.value, p.causal, v.order.label] = backward_resources(case, "sm_90",
                                                                        v.occupancy)
    return out


def test_which_backward_study_pairs_are_fair(toolchain):  # noqa: F811
    r = _resources()
    for k, res in sorted(r.items()):
        print(k, res)
    lin, saw = r["dkdv", False, "linear"], r["dkdv", False, "sawtooth"]
    assert not lin.spills and not saw.spills
    assert (lin.regs, lin.stack, lin.shared) == (saw.regs, saw.stack, saw.shared)
    for causal in (False, True):
        for order in ("linear", "sawtooth"):
            assert r["dq", causal, order].stack > 0
    assert r["dkdv", True, "sawtooth"].stack > r["dkdv", True, "linear"].stack

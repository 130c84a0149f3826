"""The builds a study measures must be fair: every cuTile variant of the sawtooth study on sm_90
compiles without stack or spills, and each sawtooth build uses the same registers as its linear
twin. A spilling build reads local memory through L2 and would fake (or hide) a cache effect: the
64×64 causal builds spill at occupancy 1 (255 registers, 720-1888 B of stack) but not under the
seed's occupancy-2 hint, which is why the study pins it."""
from __future__ import annotations

import pytest

from experiments.studies import get_study
from spec import Backend, get_arch
from tests.cpu.test_cutile_compile import _available
from tests.conftest import require_toolchain

pytestmark = pytest.mark.compile

CASES = [c for c in get_study("sawtooth").plan(get_arch("h100"))
         if c.variant.backend == Backend.CUTILE]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_sawtooth_study_cutile_builds_do_not_spill(case):
    require_toolchain(_available(), "cuda-tile + tileiras + cuobjdump")
    from kernels.backend import compile_hints
    from kernels.resources import resources
    from kernels.signatures import CompileCase
    occ, warps = compile_hints(case.variant, case.problem, "h100")
    res = resources(CompileCase.of(case.variant, case.problem), "sm_90", occ, warps)
    assert res.stack == 0 and res.spill_loads == 0 and res.spill_stores == 0, str(res)
    if case.variant.order.label != "linear":
        twin = next(c for c in CASES if c.panel == case.panel and c.variant.order.label == "linear")
        base = resources(CompileCase.of(twin.variant, twin.problem), "sm_90", occ, warps)
        assert res.regs <= base.regs, f"sawtooth {res} vs linear {base}"

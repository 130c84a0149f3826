"""The builds a study compares must be fair: every cuTile variant of the sawtooth, longseq and bench
studies compiles for sm_90 without stack or spills, and each sawtooth build uses no more
registers than its linear twin. A spilling build reads local memory through L2 and fakes (or hides)
a cache effect. Two traps this has caught:

- the 64×64 causal builds spill at occupancy 1 (255 registers, 720-1888 B of stack) but not under
  the seed's occupancy-2 hint, which is why the sawtooth study pins it;
- with a ``for`` loop over work items, the linear persistent / tile-X D=128 builds at 128×128
  spilled (176 B of stack) and their sawtooth twins did not, which made sawtooth look 1.56× faster
  on the H100 (kernels/device/fmha.py docstring).

The shapes study (the shape suite: GQA, uneven S, S_q != S_kv, bf16, batched short) and every
configuration kernels/rules/configs/h100.json can name (each shape class × (D, causal) key, at the
class's representative problem, with its default schedule) are checked the same way, each
distinct build (JIT-like signature symbol and hints) compiled once."""
from __future__ import annotations

import pytest

from experiments.registry.studies import get_study
from spec import Backend, get_arch
from tests.conftest import require_toolchain
from tests.cpu.kernels.test_cutile_compile import _available

pytestmark = [pytest.mark.compile, pytest.mark.slow]

STUDIES = ("sawtooth", "longseq", "bench")   # shapes, models, hostpath: test_default_attention_...
CASES = [(s, c) for s in STUDIES for c in get_study(s).plan(get_arch("h100"))
         if c.variant.backend == Backend.CUTILE]


def _resources(case):
    from kernels.build.resources import resources
    from kernels.build.signatures import CompileCase
    from kernels.host.backend import compile_hints
    occ, warps = compile_hints(case.variant, case.problem, "h100")
    return resources(CompileCase.of(case.variant, case.problem), "sm_90", occ, warps)


@pytest.mark.parametrize("study,case", CASES, ids=lambda x: x if isinstance(x, str) else x.id)
def test_locality_study_cutile_builds_do_not_spill(study, case):
    require_toolchain(_available(), "cuda-tile + tileiras + cuobjdump")
    res = _resources(case)
    assert not res.spills and res.ptx["LD_LOCAL"] == res.ptx["ST_LOCAL"] == 0, str(res)
    if case.variant.order.label != "linear":      # bench has linear builds only
        twin = next(c for s, c in CASES if s == study and c.panel == case.panel
                    and c.problem == case.problem and c.variant.schedule == case.variant.schedule
                    and c.variant.tiles == case.variant.tiles and c.variant.order.label == "linear")
        base = _resources(twin)
        assert res.regs <= base.regs, f"sawtooth {res} vs linear {base}"


_BUILDS: dict = {}


def _distinct_resources(cases) -> dict:
    """{case id: resources} of ``cases``, each distinct build compiled once (shared cache)."""
    from kernels.build.resources import resources
    from kernels.build.signatures import CompileCase
    from kernels.host.backend import compile_hints
    out = {}
    for case in cases:
        cc = CompileCase.of(case.variant, case.problem)
        hints = compile_hints(case.variant, case.problem, "h100")
        key = (cc.signature().symbol, hints)
        if key not in _BUILDS:
            _BUILDS[key] = resources(cc, "sm_90", *hints)
        out[case.id] = _BUILDS[key]
    return out


def _spilling(found: dict) -> list[str]:
    return [f"{cid}: {r}" for cid, r in found.items()
            if r.spills or r.ptx["LD_LOCAL"] or r.ptx["ST_LOCAL"]]


@pytest.mark.parametrize("study", ["shapes", "models", "hostpath"])
def test_default_attention_study_builds_do_not_spill(study):
    """Every cuTile build the studies of ``attention()``'s defaults launch (the shape suite,
    the model families and host-path problems) is spill-free on sm_90."""
    require_toolchain(_available(), "cuda-tile + tileiras + cuobjdump")
    cases = [c for c in get_study(study).plan(get_arch("h100"))
             if c.variant.backend == Backend.CUTILE]
    assert not _spilling(_distinct_resources(cases))


def test_every_config_the_json_can_name_builds_without_spill():
    """Every configuration ``attention()`` can pick: each shape class × (D, causal) (the class's
    measured entry, or the (D, causal) default it falls back to, for keys without rule constants)
    at the class's representative problem, and every configuration the rule has constants for
    (``kernels.rules.choice``) at the long, the tiny and the uneven class's representative of its
    key (lengths that are multiples of 16 and one that is not: register allocation differs), each
    with its default schedule."""
    require_toolchain(_available(), "cuda-tile + tileiras + cuobjdump")
    from kernels.host.backend import default_schedule
    from kernels.rules.choice import BY_LABEL, load_rule
    from kernels.rules.config import ShapeClass, class_config, representative
    from spec import Case, ScanOrder, Variant
    arch = get_arch("h100")
    picks = []
    for cls in ShapeClass:
        for D in (64, 128):
            for causal in (False, True):
                p = representative(cls, D, causal)
                picks.append((p, class_config("h100", p), cls.value))
    rule = load_rule("h100")
    assert rule is not None and rule.constants
    for key, per in rule.constants.items():
        D, causal = int(key.split(".")[0][1:]), key.endswith("causal")
        for label in per:
            for cls in (ShapeClass.LONG, ShapeClass.TINY, ShapeClass.UNEVEN):
                picks.append((representative(cls, D, causal), BY_LABEL[label], f"rule {label}"))
    cases = [Case(p, Variant(Backend.CUTILE, ScanOrder.linear(),
                             default_schedule(p, cfg, cfg.tiles, arch), cfg.tiles, cfg.occupancy),
                  arch.num_sms, panel) for p, cfg, panel in picks]
    assert not _spilling(_distinct_resources(cases))

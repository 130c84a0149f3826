"""GPU tests of the cuTile forward's kernel tactics (``kernels.device.tactics``; skipped without
a GPU): every tactic against the fp32 reference on a ragged, grouped problem; the next-item Q
prefetch on every persistent schedule against the reference and, bit for bit, its TACTIC=0 twin;
``attention()`` launching the rule's tactic configuration by name."""
from __future__ import annotations

import pytest

from spec import Problem
from spec.problem import Tiles
from tests.gpu.test_cutile import _seed, _setup, _variant, problem
from tests.pairwise import pairwise

pytestmark = pytest.mark.gpu


TACTICS = [dict(masked_first=True), dict(no_bounds=True), dict(masked_first=True, no_bounds=True),
           dict(latency_k=4, latency_v=4), dict(latency_k=1, latency_v=2)]
TACTIC_TILES = [(Tiles(64, 128), 2, None), (Tiles(128, 128), 1, 8), (Tiles(128, 64), 2, None)]


TILE_IDS = {Tiles(64, 128): "64x128", Tiles(128, 128): "128x128ww8", Tiles(128, 64): "128x64"}
# pairwise (tests/pairwise.py): every tactic with every tile shape and with causal and full
TACTIC_CASES = [(c, t, *tt) for c, t, tt in pairwise([(False, True), TACTICS, TACTIC_TILES])]


def builds(arch) -> dict[str, list]:
    """Per test: the (variant, problem, trace build?, family defaults) it launches; the session
    precompile (tests/gpu/conftest.py) compiles them in parallel."""
    from kernels.device.tactics import tactic_code
    from kernels.rules.config import KernelConfig
    out = {"test_tactics_match_fp32_reference": [
        (_variant("linear", "static7", tl, occ),
         problem(128 if tl == Tiles(64, 128) else 64, c), False,
         KernelConfig(tl.m, tl.n, occ, ww, tactic=tactic_code(**t)))
        for c, t, tl, occ, ww in TACTIC_CASES]}
    out["test_prefetch_matches_fp32_reference_and_its_twin"] = [
        (_variant("linear", s, tl, 2), problem(64, c), False,
         KernelConfig(tl.m, tl.n, 2, None, tactic=code))
        for c, s, tl in PREFETCH_CASES for code in (0, tactic_code(prefetch_q=True))]
    return out


def _tactic_id(t: dict) -> str:
    return "-".join(f"{k}{v}" for k, v in t.items())


@pytest.mark.parametrize("causal,tactic,tiles,occ,ww", TACTIC_CASES,
                         ids=[f"{'causal' if c else 'full'}-{_tactic_id(t)}-{TILE_IDS[tl]}"
                              for c, t, tl, _, _ in TACTIC_CASES])
def test_tactics_match_fp32_reference(causal, tactic, tiles, occ, ww):
    """Every kernel tactic (kernels.device.fmha TACTIC bits) on a ragged problem (a masked diagonal
    and a masked end; 128x64: the first masked tile fully masked for some rows) and grouped K/V
    heads, through the tuner's path (the configuration as the family's defaults)."""
    from experiments.measurement.correctness import check
    from kernels.device.tactics import tactic_code
    from kernels.host.backend import CutileFamily
    from kernels.rules.config import KernelConfig
    pr = problem(128 if tiles == Tiles(64, 128) else 64, causal)   # the spill-free head dims
    code = tactic_code(**tactic)
    q, k, v, out = _setup(pr, _seed("tactic", causal, code, tiles.m, tiles.n))
    fam = CutileFamily(defaults=KernelConfig(tiles.m, tiles.n, occ, ww, tactic=code))
    prep = fam.prepare(_variant("linear", "static7", tiles, occ), pr)
    assert prep.tactic == code and prep.local_bytes == 0, prep
    fam.run(prep, q, k, v, out)
    res = check(out, q, k, v, causal)
    assert res.passed, f"tactic {tactic} {tiles} {pr.label}: {res}"


PREFETCH_SCHEDULES = ["static7", "static7h", "lpt7", "snake7"]
PREFETCH_TILES = [Tiles(64, 128), Tiles(128, 64)]
# pairwise: every persistent schedule with both tile shapes and with causal and full
PREFETCH_CASES = pairwise([(False, True), PREFETCH_SCHEDULES, PREFETCH_TILES])


@pytest.mark.parametrize("causal,schedule,tiles", PREFETCH_CASES,
                         ids=[f"{'causal' if c else 'full'}-{s}-{TILE_IDS[t]}"
                              for c, s, t in PREFETCH_CASES])
def test_prefetch_matches_fp32_reference_and_its_twin(causal, schedule, tiles):
    """The next-item Q prefetch (TACTIC_PREFETCH_Q) on the persistent schedules (7 CTAs: many
    items per CTA and a ragged last round, the deal reversed on odd rounds for lpt and snake)
    of a ragged, grouped D=64 problem: it matches the fp32 reference on a poisoned output, and
    it is bit for bit the build without the bit (the same K/V order within each item, only the
    Q load moved). Linear order: the family runs tactics with it only."""
    import torch

    from experiments.measurement.correctness import check
    from kernels.device.tactics import tactic_code
    from kernels.host.backend import CutileFamily
    from kernels.rules.config import KernelConfig
    pr = problem(64, causal)
    q, k, v, _ = _setup(pr, _seed("prefetch", causal, schedule, tiles.m, tiles.n))
    outs = {}
    for code in (0, tactic_code(prefetch_q=True)):
        fam = CutileFamily(defaults=KernelConfig(tiles.m, tiles.n, 2, None, tactic=code))
        prep = fam.prepare(_variant("linear", schedule, tiles, 2), pr)
        assert prep.tactic == code and prep.local_bytes == 0, prep
        outs[code] = out = torch.full_like(q, float("nan"))
        fam.run(prep, q, k, v, out)
    res = check(outs[code], q, k, v, causal)
    assert res.passed, f"prefetch {schedule} {tiles} {pr.label}: {res}"
    assert torch.equal(outs[code].view(torch.int16), outs[0].view(torch.int16))


def test_attention_launches_the_rules_tactics():
    """Where the rule's configuration carries kernel tactics (the next-item Q prefetch on a batch
    of short D=64 sequences), ``attention()`` launches that build, named by its variant id, and
    matches the fp32 reference on a poisoned output; a sawtooth call on the same problem gets
    the build without them (tactics go with the linear scan only)."""
    import torch

    import kernels
    from experiments.measurement.correctness import check
    from kernels.host.backend import _new_launch
    from kernels.rules.choice import problem_config
    from spec import get_arch
    arch = get_arch("h100")
    present = torch.cuda.get_device_name()
    if "H100" not in present and "H200" not in present:
        pytest.skip(f"the H100 rule's choices; GPU present: {present}")
    pr = next(p for p in (Problem(16, 12, 512, 64), Problem(24, 16, 512, 64),
                          Problem(32, 16, 384, 64))
              if problem_config(arch.name, p).tactic)
    q, k, v, _ = _setup(pr, _seed("rule-tactic", pr.label))
    out = torch.full_like(q, float("nan"))
    launch = _new_launch(q, k, v, out, False, "linear", None, None, None, None, 6)
    assert launch.prepared.tactic == problem_config(arch.name, pr).tactic != 0
    assert launch.prepared.variant.id(pr).endswith(f".t{launch.prepared.tactic}")
    kernels.attention(q, k, v, out=out)
    res = check(out, q, k, v, False)
    assert res.passed, f"{pr.label}: {res}"
    saw = _new_launch(q, k, v, out, False, "sawtooth", None, None, None, None, 6)
    assert saw.prepared.tactic == 0

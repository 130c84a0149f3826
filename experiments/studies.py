"""The study registry: each study is a plan of cases (problem × variant × resident CTAs) per arch.

A plan is pure data: the same cases drive measurement (kernels, ncu, CUDA events) and simulation
(spec traces through the L2 simulator). Sequence lengths are per-arch presets: GB10 uses the
paper's numbers; other GPUs scale S with their L2 so that K/V per head stands in the same relation
to the cache as on GB10 (the effect under study depends on that ratio, not on S itself).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from spec import (Arch, Backend, CtaSchedule, Problem, ScanOrder, Tiles, Variant, get_arch)
from spec.arch import MiB


@dataclass(frozen=True)
class Case:
    problem: Problem
    variant: Variant
    resident: int          # CTAs resident at once (the wavefront width)
    panel: str             # which figure panel / table group the case belongs to

    @property
    def id(self) -> str:
        """Variant id and problem label: the NVTX range of the case's profiled launch (no '@' or
        '/', which ncu's NVTX filter syntax reserves)."""
        return f"{self.variant.id(self.problem)} {self.problem.label}"


@dataclass(frozen=True)
class Study:
    name: str
    description: str
    figures: tuple[str, ...]
    plan: Callable[[Arch], list[Case]]
    measurable: bool = True           # False: simulate only (e.g. an analytic study)


PAPER_S = 131072            # the paper's sequence length on GB10
CUTILE_STUDY_OCCUPANCY = 2  # the paper's cuTile kernels carry the seed's occupancy=2 hint
PAPER_L2 = get_arch("gb10").l2_bytes


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
    is also what keeps these builds spill-free, see tests/cpu/test_study_builds.py); Static (one
    persistent CTA per SM, q-major) and Tile-based (X=2 consecutive Q tiles per CTA, grid
    launch); causal and non-causal.
    CUDA: B in {1, 2, 4, 8}, H=1, D=64, 80×80 tiles, one persistent CTA per SM, non-causal.
    """
    s = scaled_seq(arch)
    p = arch.num_sms
    occ = CUTILE_STUDY_OCCUPANCY
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


STUDIES: dict[str, Study] = {
    s.name: s
    for s in (
        Study("sawtooth", "linear vs sawtooth K/V order: misses, non-compulsory misses "
              "(cuTile Static / Tile-based, causal and not; CUDA batch sweep)",
              ("F7", "F8a", "F9a", "F10a"), sawtooth_plan),
    )
}


class UnknownStudy(ValueError):
    pass


def get_study(name: str) -> Study:
    try:
        return STUDIES[name]
    except KeyError:
        raise UnknownStudy(f"unknown study {name!r}; known: {', '.join(STUDIES)}") from None


def kv_bytes_per_head(problem: Problem) -> int:
    return 2 * problem.S_kv * problem.D * problem.dtype.nbytes


def describe_scale(arch: Arch, problem: Problem) -> str:
    kv = kv_bytes_per_head(problem)
    return (f"K+V per head {kv / MiB:.0f} MiB = {kv / arch.l2_bytes:.2f}x the "
            f"{arch.l2_mib:.0f} MiB L2 of {arch.name}")


def case_to_dict(c: Case) -> dict:
    """A JSON-able case (for the profiling target, which runs in another process)."""
    p, v = c.problem, c.variant
    return {"panel": c.panel, "resident": c.resident,
            "problem": {"B": p.B, "H": p.H, "S_q": p.S_q, "S_kv": p.S_kv, "H_kv": p.H_kv,
                        "D": p.D, "dtype": p.dtype.value, "causal": p.causal},
            "variant": {"backend": v.backend.value, "order": v.order.label,
                        "schedule": v.schedule.label, "tile_m": v.tiles.m, "tile_n": v.tiles.n,
                        "occupancy": v.occupancy}}


def case_from_dict(d: dict) -> Case:
    v = d["variant"]
    variant = Variant(Backend(v["backend"]), ScanOrder.parse(v["order"]),
                      CtaSchedule.parse(v["schedule"]), Tiles(v["tile_m"], v["tile_n"]),
                      v["occupancy"])
    return Case(Problem(**d["problem"]), variant, d["resident"], d["panel"])

"""A case: one problem run by one variant with a given number of resident CTAs.

The unit every study plans, every measurement and simulation runs, and every profiled launch is
named by (its ``id`` is the NVTX range and the key that pairs ncu kernels with cases). It lives in
the vocabulary so that the orchestrator, the profiling target and the analysis read one definition.
"""
from __future__ import annotations

from dataclasses import dataclass

from .orders import ScanOrder
from .problem import Problem, Tiles
from .schedules import CtaSchedule
from .variant import Backend, Variant


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


def case_to_dict(c: Case) -> dict:
    """A JSON-able case (for the profiling target, which runs in another process)."""
    p, v = c.problem, c.variant
    return {"panel": c.panel, "resident": c.resident,
            "problem": {"B": p.B, "H": p.H, "S_q": p.S_q, "S_kv": p.S_kv, "H_kv": p.H_kv,
                        "D": p.D, "dtype": p.dtype.value, "causal": p.causal},
            "variant": {"backend": v.backend.value, "order": v.order.label,
                        "schedule": v.schedule.label, "tile_m": v.tiles.m, "tile_n": v.tiles.n,
                        "occupancy": v.occupancy, "level": v.level, "stages": v.stages,
                        **({} if v.bwd is None else {"bwd": v.bwd.value}),
                        **({"tactic": v.tactic} if v.tactic else {})}}


def case_from_dict(d: dict) -> Case:
    v = d["variant"]
    variant = Variant(Backend(v["backend"]), ScanOrder.parse(v["order"]),
                      CtaSchedule.parse(v["schedule"]), Tiles(v["tile_m"], v["tile_n"]),
                      v["occupancy"], v.get("level"), stages=v.get("stages"),
                      bwd=v.get("bwd"), tactic=v.get("tactic", 0))
    return Case(Problem(**d["problem"]), variant, d["resident"], d["panel"])

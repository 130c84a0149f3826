"""What ``python -m experiments.tuning.tune`` chooses among, and how: the candidate configurations
of a (D, causal) key or of a shape class (tiles, occupancy, worker warps, schedule), the trial each
measurement gives, and the ranking (correctness first, then the geometric mean of the key's
problems' times)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kernels.rules.config import KernelConfig
from spec import Arch


@dataclass(frozen=True)
class Candidate:
    tile_m: int
    tile_n: int
    occupancy: int
    worker_warps: int | None
    schedule: str          # "persistent" (P = SMs × occupancy), "lpt" (the same, longest first),
    #                        "grid" or "glpt" (the grid, longest first in L2 sections)
    tactic: int = 0        # kernels.device.fmha TACTIC bits

    def config(self) -> KernelConfig:
        return KernelConfig(self.tile_m, self.tile_n, self.occupancy, self.worker_warps,
                            self.schedule, tactic=self.tactic)

    @property
    def label(self) -> str:
        return (f"{self.tile_m}x{self.tile_n} occ{self.occupancy} ww{self.worker_warps} "
                f"{self.schedule}" + (f" t{self.tactic}" if self.tactic else ""))


# Spill-free on sm_90 (cuobjdump -res-usage of JIT-like exports, linear and sawtooth): (tile_m,
# tile_n, occupancy, worker_warps[, schedules]); 128x128 with 8 worker warps at D=128 non-causal
# spills in the persistent linear build (176 B), so it is a grid-only candidate. 64x128 at
# occupancy 2 (128 registers, 83-116 KB of shared memory, no stack at either D) halves the
# masked share of a causal diagonal against 128-row tiles and keeps two CTAs per SM; 64x128 with
# 8 worker warps is spill-free at D=128 only. A candidate that spills anyway is rejected by the
# check before it is timed.
_BOTH = ("persistent", "grid")
_BASE = {
    (64, False): [(64, 64, 2, None), (128, 64, 2, None), (128, 64, 1, None), (128, 128, 1, None),
                  (128, 128, 1, 8), (64, 64, 1, 8), (64, 128, 2, None)],
    (64, True): [(64, 64, 2, None), (128, 64, 2, None), (128, 64, 1, None), (128, 128, 1, 8),
                 (64, 128, 2, None)],
    (128, False): [(64, 64, 2, None), (128, 64, 2, None), (128, 64, 1, None), (64, 64, 1, 8),
                   (128, 64, 1, 8), (128, 128, 1, 8, ("grid",)), (64, 128, 2, None),
                   (64, 128, 1, 8)],
    (128, True): [(64, 64, 1, 8), (128, 64, 1, None), (128, 128, 1, 8), (64, 64, 2, None),
                  (128, 64, 2, None), (64, 128, 2, None), (64, 128, 1, 8)],
}
SM90_CANDIDATES = {k: [Candidate(*c[:4], s) for c in v for s in (c[4] if len(c) > 4 else _BOTH)]
                   for k, v in _BASE.items()}
KEYS = tuple((D, causal) for D in (64, 128) for causal in (False, True))


def candidates(arch: Arch, D: int, causal: bool) -> list[Candidate]:
    """The key's configurations; for causal keys each grid one again with the longest causal rows
    first within L2 sections of heads (``glpt``, FlashAttention's grid LPT order)."""
    if arch.sm == "sm_90":
        base = SM90_CANDIDATES[(D, causal)]
    else:
        t = arch.cutile_tiles
        base = [Candidate(t.m, t.n, occ, None, s) for occ in (1, 2) for s in _BOTH]
    glpt = [Candidate(c.tile_m, c.tile_n, c.occupancy, c.worker_warps, "glpt")
            for c in base if causal and c.schedule == "grid"]
    return base + glpt


def class_candidates(arch: Arch, D: int, causal: bool) -> list[Candidate]:
    """A shape class's candidates for (D, causal): the key's, and for causal keys each persistent
    one again with the snake deal (balanced where a round holds whole heads: batched short
    sequences) and with the longest causal rows first (LPT, FA3's causal scheduler)."""
    base = candidates(arch, D, causal)
    twins = [Candidate(c.tile_m, c.tile_n, c.occupancy, c.worker_warps, s)
             for s in ("snake", "lpt") for c in base if causal and c.schedule == "persistent"]
    return base + twins


@dataclass(frozen=True)
class Trial:
    """One candidate's outcome: the correctness verdict, and its median time when it passed."""

    candidate: Candidate
    passed: bool
    verdict: str
    us: float | None = None
    spread: float | None = None
    per_problem: tuple = ()      # ((problem label, median us), ...) when tuned at several


def rank(cands: list[Candidate], check: Callable[[Candidate], tuple[bool, str]],
         time: Callable[[list[Candidate]], dict[Candidate, tuple[float, float]]]) -> list[Trial]:
    """Check every candidate, time only those that pass, and rank: passing candidates by median
    time (fastest first), then the failed ones (never timed, never ranked above a passing one).
    ``check(c)`` -> (passed, verdict); ``time(passing)`` -> {candidate: (median us, spread)}."""
    verdicts = {c: check(c) for c in cands}
    passing = [c for c in cands if verdicts[c][0]]
    times = time(passing) if passing else {}
    trials = {c: Trial(c, True, verdicts[c][1], *times[c]) if verdicts[c][0]
              else Trial(c, False, verdicts[c][1]) for c in cands}
    return [trials[c] for c in by_speed(trials, cands)]


def best(trials: list[Trial]) -> Candidate:
    if not trials or not trials[0].passed:
        raise TuneError("no candidate passed the correctness check: "
                        + "; ".join(f"{t.candidate.label}: {t.verdict}" for t in trials))
    return trials[0].candidate


class TuneError(RuntimeError):
    pass


def by_speed(trials: dict, cands: list[Candidate]) -> list[Candidate]:
    """Passing candidates fastest first, then the failed ones in their given order."""
    ok = sorted((c for c in cands if trials[c].passed), key=lambda c: trials[c].us)
    return ok + [c for c in cands if not trials[c].passed]


def _tac(**kw) -> int:
    from kernels.device.tactics import tactic_code
    return tactic_code(**kw)


def tactic_trials(D: int, causal: bool) -> list[Candidate]:
    """The kernel-tactic A/B of a (D, causal) key: the rule's most chosen configuration of the key
    (64x128 tiles at two CTAs per SM; causal: the grid longest first, else persistent CTAs) and,
    causal, the 128x128 one, each again with one tactic of ``kernels.device.fmha``'s TACTIC bits:
    the masked tiles first (the diagonal's K/V load issued beside the Q load, the item ending on the
    mask-free bulk), the bulk's loads unchecked (whole tiles), and other K/V load-latency hints
    (the pipeline depth the compiler gives each load); then two hint-only configurations: 64x128
    with 8 worker warps at one CTA per SM (two consumer warpgroups, FA3's shape for 128 rows
    halved), and causal 128x128 held by persistent CTAs dealt longest first. At D=64, every
    persistent configuration the rule chooses among again with the next item's Q load issued
    before the current item's epilogue (``prefetch_q``: a CTA of a short batch runs many items,
    and the load and epilogue are a large share of each), except 64x64 tiles: on sm_90 the
    carried tile spills at four CTAs per SM (96 B of stack) and at two takes the shared memory
    of the second CTA (116 KB)."""
    lat = [_tac(latency_k=k, latency_v=v) for k, v in ((4, 4), (3, 3), (1, 2))]
    if causal:
        base = Candidate(64, 128, 2, None, "glpt")
        big = Candidate(128, 128, 1, 8, "glpt")
        tactics = [_tac(masked_first=True), _tac(no_bounds=True),
                   _tac(masked_first=True, no_bounds=True)] + lat
        out = [Candidate(base.tile_m, base.tile_n, base.occupancy, None, "glpt", t)
               for t in tactics]
        out += [Candidate(big.tile_m, big.tile_n, 1, 8, "glpt", t)
                for t in (_tac(masked_first=True, no_bounds=True), lat[0], lat[1])]
        out += [Candidate(128, 128, 1, 8, "lpt")]
    else:
        out = [Candidate(64, 128, 2, None, "persistent", t) for t in [_tac(no_bounds=True)] + lat]
        out += [Candidate(64, 64, 4, None, "persistent", t) for t in (_tac(no_bounds=True), lat[0])]
    if D == 128:
        out.append(Candidate(64, 128, 1, 8, "glpt" if causal else "persistent"))
    else:
        from kernels.rules.choice import CANDIDATES
        out += [Candidate(c.tile_m, c.tile_n, c.occupancy, c.worker_warps, c.schedule,
                          c.tactic | _tac(prefetch_q=True))
                for c in CANDIDATES[causal]
                if c.schedule in PERSISTENT_SCHEDULES and (c.tile_m, c.tile_n) != (64, 64)]
    return out


PERSISTENT_SCHEDULES = ("persistent", "lpt", "snake")
"""The schedules whose CTAs loop over work items (where a next-item prefetch exists)."""

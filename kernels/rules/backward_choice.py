"""The backward's configuration rule: each pass's tiles and hints from a fitted work model of the
pass, the forward's model (``kernels.rules.choice``) applied to the two kernels of
``kernels.device.fmha_bwd``, never from the nearest tuned shape.

The two passes have different work items, so they choose independently:

- **dK/dV**: an item is one K/V tile of a K/V head (``B·H_kv·⌈S_kv/tile_n⌉`` of them, times the
  group split of ``kernels.rules.backward_config.group_split`` when the grouped heads' items leave
  SMs idle); its CTA scans the Q tiles that reach its keys (``spec.TileGrid.kv_item_steps``: all of
  them, or causal from the diagonal to the end) of each query head it is dealt. A step loads a
  Q and a dO tile and runs four MMAs (Sᵀ, dV, dPᵀ, dK), twice a forward step's, and items
  differ in length under a causal mask (the first K/V tile scans every Q tile, the last one
  few; with ``S_kv > S_q`` the keys past ``S_q`` are seen by no query and their items only
  store zeros);
- **dQ**: forward-like, an item is one Q tile of a query head (``B·H·⌈S_q/tile_m⌉``) scanning the
  K/V tiles up to the diagonal (``spec.TileGrid.item_steps``), three MMAs a step; it runs first
  and makes Δ for the dK/dV pass.

The model of a pass on a configuration: an item of ``s`` steps costs ``α + β·s`` µs on one slot
of a full GPU, with the critical path of ``kernels.rules.choice.waves_and_steps`` (equal items in
waves of ``SMs × CTAs per SM``; unequal ones the balanced share or the longest item). α, β are
fitted per pass, configuration and (D, causal) key on the model suite's tuning half (``python
-m experiments.tuning.rulefit --backward``), and each pass takes the configuration of least
predicted time. As in the forward, the choice changes only where two predictions cross, so a
problem between two tuned shapes is predicted, not assigned to either.

A key with fewer tuning problems than constants plus one shares the constants of the key of
the same D and the other mask (the rule block's ``shared``): the per-step work (MMAs of one
``tile_m × tile_n × D`` step) and the per-item work (loading and storing ``D``-wide tiles) are
the same, the causal diagonal's masked steps aside; its own problems judge the borrowed
constants out of sample. A key with no constants at all (another arch's file, a package without
data) takes ``kernels.rules.backward_config.BASE`` in both passes, the configuration every build
was first checked with. Resident CTAs per SM are the build's occupancy hint (1 for the 8-worker-warp
builds); the SM count is that of the GPU the constants were fitted on (the rule predicts that
GPU; another reads the same file).

What the model leaves out: the L2 reuse of the streamed Q/dO (dK/dV) and K/V (dQ) tiles across
the CTAs of a head, measured into β at the lengths of the fit; the group split's reduction (a
separate launch, the same for every configuration of a problem). The dQ pass's items also make
their rows' Δ (one more O tile load per item, in α since 2026-11-29; the constants were fitted
when a separate kernel made it, so each dQ item's α is low by one tile load).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from kernels.rules.backward_config import PASSES, PassConfig, group_split
from kernels.rules.choice import Quantities, waves_and_steps
from kernels.rules.config import CONFIG_DIR, config_key
from spec.problem import Problem, TileGrid, Tiles

CANDIDATES: dict[str, PassConfig] = {
    "m64n128ww8": PassConfig(Tiles(64, 128), 1, 8),
    "m64n64occ1": PassConfig(Tiles(64, 64), 1, None),
    "m64n64occ2": PassConfig(Tiles(64, 64), 2, None),
    "m128n64ww8": PassConfig(Tiles(128, 64), 1, 8),
    "m128n128ww8": PassConfig(Tiles(128, 128), 1, 8)}
"""The pass configurations the rule chooses among (grid launch, linear scan; the same set for
both passes): 8 worker warps for the tiles whose fp32 accumulators need the registers of 384
threads, 64x64 tiles at one and at two CTAs per SM. Some of their dK/dV builds spill at some
(D, causal) keys (``SPILLING``); the rule never takes those there."""


SPILLING: dict[tuple[str, int, bool], frozenset[str]] = {
    ("dkdv", 64, True): frozenset({"m64n64occ1", "m64n64occ2", "m128n64ww8"}),
    ("dkdv", 128, False): frozenset({"m64n64occ2", "m128n128ww8"}),
    ("dkdv", 128, True): frozenset({"m128n64ww8", "m128n128ww8"}),
}
"""(pass, D, causal) -> the candidates whose build spills there on sm_90 (a stack frame over 8
bytes: 16 B to 472 B; cuda-tile 1.7): never chosen, because a spilling build reads its local
memory through L2 and its time says nothing about its tiles. Every other (pass, key, candidate)
build is spill-free; tests/cpu/kernels/test_cutile_backward_compile.py compiles them all and
checks this table both ways, so a toolchain that changes a build fails there, naming it."""


def allowed(pass_: str, D: int, causal: bool) -> list[str]:
    """The candidates a pass may take at (D, causal): those whose build does not spill."""
    bad = SPILLING.get((pass_, D, causal), frozenset())
    return [lab for lab in CANDIDATES if lab not in bad]


def cfg_label(pc: PassConfig) -> str:
    """The name of a candidate (``m64n64occ2``); ValueError for a configuration that is none."""
    for label, c in CANDIDATES.items():
        if (c.tiles, c.occupancy, c.worker_warps) == (pc.tiles, pc.occupancy, pc.worker_warps):
            return label
    raise ValueError(f"{pc.label()} is not a backward candidate; known: {', '.join(CANDIDATES)}")


def pass_quantities(problem: Problem, pass_: str, pc: PassConfig, num_sms: int) -> Quantities:
    """The work model's view of one pass of ``problem`` on configuration ``pc`` (module
    docstring): items, resident CTAs per SM, and the steps of each item of one (batch, head)."""
    g = TileGrid(problem, pc.tiles)
    per_sm = pc.occupancy or 1
    if pass_ == "dq":
        return Quantities(g.n_work, num_sms, per_sm, g.item_steps(), g.n_bh)
    if pass_ != "dkdv":
        raise ValueError(f"pass {pass_!r}; one of {', '.join(PASSES)}")
    group = problem.H // problem.H_kv
    n_items = problem.B * problem.H_kv * g.n_kv
    split = group_split(n_items, group, 2 * num_sms * per_sm, num_sms)
    heads = problem.B * problem.H_kv * split
    return Quantities(n_items * split, num_sms, per_sm, g.kv_item_steps() * (group // split),
                      heads)


def work(problem: Problem, pass_: str, pc: PassConfig, num_sms: int) -> tuple[float, float]:
    """(w, s): predicted µs = ``α·w + β·s`` (``kernels.rules.choice.waves_and_steps``)."""
    return waves_and_steps(pass_quantities(problem, pass_, pc, num_sms))


@dataclass(frozen=True)
class BackwardRule:
    """Fitted constants ``{pass: {key: {label: (α µs, β µs)}}}`` (shared keys resolved)."""

    constants: dict
    num_sms: int

    def predictions(self, problem: Problem, pass_: str) -> dict[str, float]:
        """Predicted µs of each candidate with constants for the problem's key and a spill-free
        build there (``SPILLING``), for one pass."""
        consts = self.constants.get(pass_, {}).get(config_key(problem.D, problem.causal), {})
        ok = allowed(pass_, problem.D, problem.causal)
        out = {}
        for label, (a, b) in consts.items():
            if label not in ok:
                continue
            w, s = work(problem, pass_, CANDIDATES[label], self.num_sms)
            out[label] = a * w + b * s
        return out

    def choose_pass(self, problem: Problem, pass_: str) -> str | None:
        """The candidate of least predicted time (ties: the label), None without constants."""
        pred = self.predictions(problem, pass_)
        return min(pred, key=lambda k: (pred[k], k)) if pred else None

    def choose(self, problem: Problem) -> tuple[PassConfig, PassConfig] | None:
        """(dK/dV, dQ) configurations; None where either pass lacks constants for the key."""
        labels = [self.choose_pass(problem, p) for p in PASSES]
        if None in labels:
            return None
        return tuple(CANDIDATES[lab] for lab in labels)


class RuleFileError(ValueError):
    """A configs file whose rule block cannot be read; the message is one line with the fix."""


FIX = "re-run python -m experiments.tuning.rulefit --backward --arch h100 --write"


def parse_rule(block: dict | None, where: str = "configs") -> BackwardRule | None:
    """A backward configs file's ``rule`` block::

        {"num_sms": 132,
         "constants": {"dkdv": {"d64.full": {"m64n64occ2": [α, β], ...}}, "dq": ...},
         "shared": {"d64.causal": "d64.full"}, ...}

    None when the file has none; a block that names an unknown pass, key or candidate, or whose
    constants are not pairs of non-negative numbers, raises ``RuleFileError`` (one line)."""
    if not block:
        return None
    try:
        num_sms = int(block["num_sms"])
        consts: dict = {}
        for pass_, per_key in block["constants"].items():
            if pass_ not in PASSES:
                raise RuleFileError(f"{where}: rule.constants.{pass_}: not a pass "
                                    f"({', '.join(PASSES)}); {FIX}")
            consts[pass_] = {}
            for key, per in per_key.items():
                bad = sorted(set(per) - set(CANDIDATES))
                if bad:
                    raise RuleFileError(f"{where}: rule.constants.{pass_}.{key}: unknown "
                                        f"configuration {', '.join(bad)}; known: "
                                        f"{', '.join(CANDIDATES)}; {FIX}")
                pairs = {lab: (float(a), float(b)) for lab, (a, b) in per.items()}
                if any(a < 0 or b < 0 or a != a or b != b for a, b in pairs.values()):
                    raise RuleFileError(f"{where}: rule.constants.{pass_}.{key}: negative or NaN "
                                        f"constants; {FIX}")
                consts[pass_][key] = pairs
        for key, src in block.get("shared", {}).items():
            for pass_ in consts:
                if src not in consts[pass_]:
                    raise RuleFileError(f"{where}: rule.shared.{key} names {src!r}, which has no "
                                        f"{pass_} constants; {FIX}")
                consts[pass_].setdefault(key, consts[pass_][src])
    except RuleFileError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise RuleFileError(f"{where}: malformed rule block ({type(e).__name__}: {e}); "
                            f"{FIX}") from None
    return BackwardRule(consts, num_sms)


CONFIG = CONFIG_DIR / "h100-backward.json"
CONFIG_SCHEMA = 2


@lru_cache(maxsize=1)
def fitted_rule() -> BackwardRule | None:
    """The fitted rule of ``CONFIG``; None when the file is absent (a non-editable install
    without package data). A file this code cannot read is a one-line ``RuleFileError`` naming
    the command that rewrites it."""
    if not CONFIG.exists():
        return None
    try:
        doc = json.loads(CONFIG.read_text())
    except (OSError, ValueError) as e:
        raise RuleFileError(f"{CONFIG}: not readable JSON ({type(e).__name__}); {FIX}") from None
    if not isinstance(doc, dict) or doc.get("schema") != CONFIG_SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else None
        raise RuleFileError(f"{CONFIG}: schema {got!r}, this code reads {CONFIG_SCHEMA} (a "
                            f"fitted rule block, no per-key table); {FIX}")
    return parse_rule(doc.get("rule"), str(CONFIG))

"""The per-problem configuration rule: choose tiles, occupancy and schedule from a work model of
the quantities that decide a split-Q kernel's efficiency, never from the nearest tuned shape.

What decides how long a configuration takes on a problem (``spec.TileGrid``):

- **work items per SM**: ``B·H·⌈S_q/tile_m⌉`` items over the SMs, run ``CTAs per SM`` at a
  time. Below one the GPU is partly idle; just above a whole number the last wave runs nearly
  empty (the wave quantisation that decides between 64- and 128-row tiles on batches of short
  sequences);
- **K/V steps per item**: ``⌈S_kv/tile_n⌉`` (causal: up to the diagonal). Few steps and the
  per-item work (loading the Q tile, the softmax epilogue, storing O, a CTA's launch) weighs as
  much as the scan; that is where persistent CTAs, which stay resident, pay;
- **masked fraction**: tiles are computed whole, so a ragged end (S=197 computes 256×256 scores
  for 197×197 valid ones: 41% thrown away) and the causal diagonal cost steps that do no work;
  it enters through the whole-tile step counts;
- **heads sharing K/V** (``H/H_kv``) and the scan's L2 reuse enter through the per-step cost,
  which is measured per configuration on problems of every sharing.

The model: an item of ``s`` steps costs ``α + β·s`` microseconds on a slot of a full GPU (α,
β per configuration and (D, causal) key, fitted by least squares on the tuning half of the
shape suite: ``python -m experiments.tuning.rulefit``). Items of equal length (non-causal) finish
in ``⌈items/SMs⌉ / CTAs-per-SM`` waves (``waves_and_steps``); unequal ones (causal, dealt longest
first or in balanced rounds) in ``max(Σ cost / slots, longest item)``. The rule picks the
configuration of least predicted time.
Because every prediction moves smoothly with the quantities (up to the wave count the hardware
itself has), the choice changes only where two predictions cross: there are no class borders,
and a problem between two tuned shapes is predicted, not assigned to either.

What the model leaves out: the L2 outgrowing K/V per head at very long S, and the pipeline's
latency at 64-key steps (both measured into β at the lengths the fit data have, so a
configuration whose per-step cost changes with S is predicted at its average).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kernels.device.tactics import TACTIC_PREFETCH_Q
from kernels.rules.config import KernelConfig, class_config, config_key, load
from spec.problem import Problem, TileGrid

CANDIDATES: dict[bool, tuple[KernelConfig, ...]] = {
    False: (KernelConfig(64, 128, 2, None, "grid"),
            KernelConfig(64, 128, 2, None, "persistent"),
            KernelConfig(128, 128, 1, 8, "grid"),
            KernelConfig(128, 64, 2, None, "persistent"),
            KernelConfig(64, 64, 2, None, "persistent"),
            KernelConfig(64, 64, 4, None, "persistent"),
            KernelConfig(64, 128, 2, None, "persistent", tactic=TACTIC_PREFETCH_Q)),
    True: (KernelConfig(64, 128, 2, None, "glpt"),
           KernelConfig(64, 128, 2, None, "lpt"),
           KernelConfig(64, 128, 2, None, "snake"),
           KernelConfig(128, 128, 1, 8, "glpt"),
           KernelConfig(128, 64, 2, None, "snake"),
           KernelConfig(64, 128, 2, None, "snake", tactic=TACTIC_PREFETCH_Q)),
}
"""The configurations the rule chooses among, per causal: those of the tuned classes
(kernels/rules/configs/h100.json) that won anywhere, plus 64x64 and 128x64 tiles at two CTAs per SM
held by persistent CTAs (short scans: twice the items, half the steps), and 64x64 tiles at four
CTAs per SM held by persistent CTAs (D=64: 56 KB of shared memory each), where one CTA's
epilogue and Q load can hide behind three others' scans; its grid twin spills 48 B at lengths
that are not multiples of 16 (profiles/h100/sweep-20261126d), so it is not a candidate. The
64x128 persistent configurations come twice, the second with the next-item Q prefetch
(``kernels.device.tactics.TACTIC_PREFETCH_Q``): a CTA of a batch of short sequences runs many
items, and loading the next one's Q behind this one's epilogue hides a load that opens every
item (H100, D=64: 1.02x geomean over 20-27 problems, up to 1.12x on S <= 4K; 128x64 tiles gain
nothing, 0.99x: profiles/h100/sweep-20261127b, -c). All spill-free on sm_90 (the sweep records
each build's spills)."""


def config_label(cfg: KernelConfig) -> str:
    """``64x128.occ2.grid`` (worker warps and the kernel's TACTIC code added when set): the name
    a rule's constants use."""
    ww = f".ww{cfg.worker_warps}" if cfg.worker_warps else ""
    tac = f".t{cfg.tactic}" if cfg.tactic else ""
    return f"{cfg.tile_m}x{cfg.tile_n}.occ{cfg.occupancy}{ww}.{cfg.schedule}{tac}"


BY_LABEL = {config_label(c): c for cs in CANDIDATES.values() for c in cs}


@dataclass(frozen=True)
class Quantities:
    """The work model's view of one (problem, configuration) pair on an arch."""

    items: int              # work items, B·H·⌈S_q/tile_m⌉
    num_sms: int
    per_sm: int             # resident CTAs per SM the configuration keeps
    steps: np.ndarray       # K/V steps of each item of one head (length ⌈S_q/tile_m⌉)
    heads: int              # B·H: how many times ``steps`` repeats

    @property
    def slots(self) -> int:
        return self.num_sms * self.per_sm

    @property
    def uniform(self) -> bool:
        return bool(self.steps.min() == self.steps.max())


def quantities(problem: Problem, cfg: KernelConfig, num_sms: int) -> Quantities:
    g = TileGrid(problem, cfg.tiles)
    return Quantities(g.n_work, num_sms, cfg.ctas_per_sm or cfg.occupancy or 1,
                      g.item_steps(), g.n_bh)


def waves_and_steps(q: Quantities) -> tuple[float, float]:
    """(w, s) with predicted time ``α·w + β·s``: the items and K/V steps on the critical path,
    in units of one slot of a full SM.

    Equal items (non-causal): the hardware spreads CTAs over the SMs first, so the busiest SM
    holds ``⌈items/SMs⌉`` of them and runs ``per_sm`` at a time: ``w = ⌈items/SMs⌉ / per_sm``
    waves of the common length (an SM holding fewer CTAs than it can runs them faster, each
    getting more of its throughput). Unequal items (causal, dealt longest first or in balanced
    rounds): the balanced share ``Σ/slots``, or the longest item where it outlasts the share."""
    if q.uniform:
        w = math.ceil(q.items / q.num_sms) / q.per_sm
        return w, w * int(q.steps[0])
    share_w, share_s = q.items / q.slots, q.heads * float(q.steps.sum()) / q.slots
    longest = float(q.steps.max())
    return (share_w, share_s) if share_s >= longest else (1.0, longest)


def predict_us(problem: Problem, cfg: KernelConfig, alpha: float, beta: float,
               num_sms: int) -> float:
    w, s = waves_and_steps(quantities(problem, cfg, num_sms))
    return alpha * w + beta * s


@dataclass(frozen=True)
class Rule:
    """Fitted constants: ``{key: {label: (α µs, β µs)}}`` for the keys of ``config_key``."""

    constants: dict
    num_sms: int

    def predictions(self, problem: Problem) -> dict[str, float]:
        """Predicted µs of each candidate with constants for the problem's (D, causal) key."""
        consts = self.constants.get(config_key(problem.D, problem.causal), {})
        return {label: predict_us(problem, BY_LABEL[label], a, b, self.num_sms)
                for label, (a, b) in consts.items()}

    def choose(self, problem: Problem) -> KernelConfig | None:
        """The candidate of least predicted time; None where the key has no constants."""
        pred = self.predictions(problem)
        if not pred:
            return None
        return BY_LABEL[min(pred, key=lambda k: (pred[k], k))]


def parse_rule(block: dict | None, where: str = "configs") -> Rule | None:
    """A configs file's ``rule`` block (``{"num_sms": N, "constants": {key: {label: [α, β]}}}``),
    or None when the file has none; a label that names no candidate raises ValueError."""
    if not block:
        return None
    consts = {}
    for key, per in block.get("constants", {}).items():
        bad = sorted(set(per) - set(BY_LABEL))
        if bad:
            raise ValueError(f"{where}: rule.constants.{key}: unknown configuration "
                             f"{', '.join(bad)}; known: {', '.join(sorted(BY_LABEL))}; re-run "
                             "python -m experiments.tuning.rulefit")
        consts[key] = {label: (float(a), float(b)) for label, (a, b) in per.items()}
    return Rule(consts, int(block["num_sms"]))


def load_rule(arch: str) -> Rule | None:
    """The rule of ``kernels/rules/configs/<arch>.json`` (or of the arch it shares a die with);
    parsed per call, which only a new launch key makes (``kernels.host.backend``'s launch
    cache)."""
    return parse_rule(load(arch).rule, f"kernels/rules/configs/{arch}.json")


def problem_config(arch: str, problem: Problem) -> KernelConfig:
    """What ``attention()`` runs ``problem`` with on ``arch``: the rule's choice, where the arch's
    configs file has constants for the problem's (D, causal) key; else the shape class's
    configuration (``kernels.rules.config.class_config``)."""
    rule = load_rule(arch)
    cfg = rule.choose(problem) if rule is not None else None
    return cfg if cfg is not None else class_config(arch, problem)

"""One small problem per configuration the forward and backward rules can choose.

``kernels.rules.choice.problem_config`` (the forward ``attention()`` runs) and
``kernels.rules.backward_choice`` through ``kernels.host.backend.default_variant(...,
training=True)`` (each backward pass's tiles) pick a configuration per problem from fitted
constants. ``reachable(arch)`` walks a grid of problems (batch, heads, grouped heads, lengths, head
dim, mask) and records, for every (kernel, D, causal, configuration) some problem of the grid
selects, the cheapest such problem (fewest score elements B·H·S_q·S_kv). The GPU gradient matrix
(tests/gpu/test_backward_cutile.py) adds ``witnesses(arch, have)`` to its hand-written problems, so
every configuration a rule can choose runs there against the fp32 reference (audit G2);
tests/cpu/kernels/test_rule_witnesses.py checks on the CPU that the matrix covers what the rules
reach."""
from __future__ import annotations

import functools
import itertools

from spec import Problem

BATCHES = (1, 2, 4, 8, 16)
HEADS = (1, 2, 4, 8, 16, 32)
GROUPS = (1, 4)
LENGTHS = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
MAX_ELEMENTS = 1 << 31     # B·H·S_q·S_kv: the fp32 reference's scores stay under 8 GiB
DTYPE = {64: "fp16", 128: "bf16"}


def grid() -> list[Problem]:
    """The problems searched, cheapest first (then by label: deterministic)."""
    out = []
    for B, H, g, S, D, causal in itertools.product(BATCHES, HEADS, GROUPS, LENGTHS, (64, 128),
                                                   (False, True)):
        if H % g or B * H * S * S > MAX_ELEMENTS:
            continue
        out.append(Problem(B=B, H=H, H_kv=H // g, S_q=S, S_kv=S, D=D, dtype=DTYPE[D],
                           causal=causal))
    return sorted(out, key=lambda p: (p.B * p.H * p.S_q * p.S_kv, p.label))


def chosen(arch: str, p: Problem) -> dict[str, str]:
    """{kernel: configuration label} the rules choose for ``p``: "fwd", then "dkdv" and "dq"
    (the two passes) or "onepass" (the one pass, ``BackwardConfig.one_pass``)."""
    from kernels.host.backend import default_variant
    from kernels.rules.backward_choice import cfg_label
    from kernels.rules.backward_config import PassConfig
    from kernels.rules.choice import config_label, problem_config
    from spec import get_arch
    bwd = default_variant(p, get_arch("h100"), training=True).backward
    passes = (("onepass", bwd.dkdv),) if bwd.one_pass else (("dkdv", bwd.dkdv), ("dq", bwd.dq))
    plain = {name: cfg_label(PassConfig(pc.tiles, pc.occupancy, pc.worker_warps))
             for name, pc in passes}
    return {"fwd": config_label(problem_config(arch, p)), **plain}


@functools.lru_cache(maxsize=None)
def keys(arch: str, p: Problem) -> frozenset[tuple[str, int, bool, str]]:
    """The (kernel, D, causal, configuration) items ``p`` exercises."""
    return frozenset((k, p.D, p.causal, lab) for k, lab in chosen(arch, p).items())


@functools.lru_cache(maxsize=None)
def reachable(arch: str) -> dict[tuple[str, int, bool, str], Problem]:
    """Every (kernel, D, causal, configuration) a problem of ``grid()`` selects -> the cheapest
    such problem."""
    out: dict = {}
    for p in grid():
        for k in keys(arch, p):
            out.setdefault(k, p)
    return out


def witnesses(arch: str, have: list[Problem]) -> list[Problem]:
    """Problems to add to ``have`` so that every reachable item is exercised: the cheapest
    witness of each item ``have`` misses (each added problem may cover several)."""
    covered = set().union(*(keys(arch, p) for p in have))
    added: list[Problem] = []
    for item, p in sorted(reachable(arch).items(), key=lambda kv: kv[0]):
        if item in covered:
            continue
        added.append(p)
        covered |= keys(arch, p)
    return added

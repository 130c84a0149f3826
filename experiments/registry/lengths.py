"""The sequence lengths of a plan when the user names them: ``--seq`` parsed (``lengths``) and
applied to every case (``at_length``), and how K/V per head compares with the arch's L2
(``describe_scale``: the ratio the locality effect depends on, printed by ``--dry-run``)."""
from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Sequence

from spec import Arch, Problem
from spec.arch import MiB
from spec.case import Case


def at_length(cases: list[Case], seqs: Sequence[int]) -> list[Case]:
    """``cases`` with every sequence length (query and key) set to each of ``seqs`` in turn: a
    study's plan at lengths its preset does not use (``--seq``; the simulator's holdouts are
    measured this way). A plan that sweeps S (traffic, divergence) collapses to one case per
    variant and masking at each length: each case appears once."""
    if not seqs:
        raise ValueError("--seq needs at least one sequence length")
    for seq in seqs:
        if seq <= 0:
            raise ValueError(f"--seq {seq} must be a positive sequence length")
    out = [replace(c, problem=replace(c.problem, S_q=seq, S_kv=seq)) for seq in seqs
           for c in cases]
    return list(dict.fromkeys(out))


def lengths(text: str) -> tuple[int, ...]:
    """``--seq``'s argument: one length or several, comma-separated (``196608,229376``)."""
    try:
        return tuple(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a sequence length or a comma-separated list of them") from None


def kv_bytes_per_head(problem: Problem) -> int:
    return 2 * problem.S_kv * problem.D * problem.dtype.nbytes


def describe_scale(arch: Arch, problem: Problem) -> str:
    kv = kv_bytes_per_head(problem)
    return (f"K+V per head {kv / MiB:.0f} MiB = {kv / arch.l2_bytes:.2f}x the "
            f"{arch.l2_mib:.0f} MiB L2 of {arch.name}")

"""Named Nsight Compute metric sets, and metric *groups* collected one replay pass at a time.

``paper`` is the set of the Sawtooth paper (paper.md). ``hopper`` adds what matters on H100/H200:
DRAM bytes, the read-only split of the L2 tex traffic (O stores are writes), and the
``ltcfabric`` counters: Hopper's L2 is two partitions joined by a crossbar, and a sector fetched
from the far partition shows up there.

Why groups. ncu collects a metric list in as many *replay passes* as the hardware counter slots
need, and it splits the list by counter domain, not by meaning. The ``hopper`` set takes 4 passes
on an H100 (``profiler__replayer_passes`` = 4 in every committed raw export), so the hits, the
misses and the sector total of one case can come from different executions of a kernel whose
timing differs between executions: hits + misses then miss the total by up to 30%, and a hit
*rate* built from them is meaningless (Nsight Compute's metrics guide warns about exactly this).
A :class:`Group` names metrics collected together for one purpose; the collector
(``profiles.collect``) runs one ncu session per group, asks for ``profiler__replayer_passes`` in
every session and records it, and the rows of a group that needed more than one pass are flagged
``multipass=N``. Values of different groups are never combined into one ratio per repeat; checks
across groups use medians and say so.

Which sets fit one pass is found by measuring (ncu publishes no table of counter slots). On the
H100 (``profiles/h100/ncu-passes-20261123/passes.csv.xz``, ncu 2025.3.1, one CUDA kernel) these
groups took: ``dram`` 1 pass, ``lrc`` 1, ``l1`` 1 (and the three LRC coalescing counters with five
others, 1), but ``tex`` 4 and ``fabric`` 4: tex hits, misses and sectors cannot be read from one
execution there, while the local tex misses and the DRAM bytes can. So the miss count the study
compares lives in group ``dram`` (one pass, beside the DRAM fills of that same execution), the
tex sector count in ``lrc`` (one pass, beside the L1 and LRC read sectors it is compared with),
and group ``tex`` (hits, with misses and sectors as companions) exists for the hits + misses =
sectors check, whose rows carry ``multipass=4`` on an H100.

``metrics`` of a group are its *home* metrics (each metric is home in one group, which analysis
reads by default); ``also`` are companions collected again in the same session only so that a
check can compare them with the home metrics of that session.
"""
from __future__ import annotations

from dataclasses import dataclass

from spec.records import Metric

PAPER = (
    Metric.L2_SECTORS,
    Metric.L2_TEX_SECTORS,
    Metric.L2_TEX_HITS,
    Metric.L2_TEX_MISSES,
    Metric.L2_HIT_RATE,
    Metric.L1_SECTORS,
    Metric.L1_HITS,
)

HOPPER = PAPER + (
    Metric.DRAM_READ_BYTES,
    Metric.L2_TEX_READ_SECTORS,
    Metric.L2_TEX_READ_HITS,
    Metric.L2_TEX_READ_MISSES,
    Metric.L2_FABRIC_SECTORS,
    Metric.L2_FABRIC_HITS,
    Metric.L2_FABRIC_MISSES,
)

SETS: dict[str, tuple[str, ...]] = {"paper": PAPER, "hopper": HOPPER}


def get(name: str) -> tuple[str, ...]:
    try:
        return SETS[name]
    except KeyError:
        raise ValueError(f"unknown metric set {name!r}; known: {', '.join(SETS)}") from None


@dataclass(frozen=True)
class Group:
    """Metrics meant to be collected together in one replay pass."""
    name: str
    metrics: tuple[str, ...]          # home metrics
    purpose: str
    also: tuple[str, ...] = ()        # companions for a same-pass check

    @property
    def collect(self) -> tuple[str, ...]:
        """What the ncu session asks for: the metrics, companions and the pass count."""
        return self.metrics + self.also + (Metric.REPLAY_PASSES,)


GROUPS: dict[str, Group] = {g.name: g for g in (
    Group("dram", (Metric.L2_TEX_MISSES, Metric.DRAM_READ_BYTES),
          "local tex misses and DRAM fills of one execution (1 pass on an H100)"),
    Group("lrc", (Metric.LRC_READ_SECTORS, Metric.L1_XBAR_READ_SECTORS, Metric.L2_TEX_SECTORS),
          "read sectors into L1, out of the L2 Request Coalescer, and L2 tex lookups (1 pass)"),
    Group("tex", (Metric.L2_TEX_HITS,),
          "tex hits beside misses and sectors: the hits + misses = sectors check (4 passes)",
          also=(Metric.L2_TEX_MISSES, Metric.L2_TEX_SECTORS)),
    Group("fabric", (Metric.L2_FABRIC_SECTORS, Metric.L2_FABRIC_HITS, Metric.L2_FABRIC_MISSES),
          "lookups forwarded from the other partition to the line's home partition (4 passes)"),
    Group("l1", (Metric.L1_SECTORS, Metric.L1_HITS), "L1TEX lookups, zero for TMA loads (1 pass)"),
    Group("lrc_detail", (Metric.LRC_COALESCED_HW_SECTORS, Metric.LRC_COALESCED_PROG_SECTORS,
                         Metric.LRC_UNCOALESCED_SECTORS),
          "how the LRC's read sectors were coalesced: hardware, programmatic (multicast), none"),
    Group("tex_read", (Metric.L2_TEX_READ_SECTORS, Metric.L2_TEX_READ_HITS,
                       Metric.L2_TEX_READ_MISSES),
          "the read-only part of the tex lookups, O stores excluded (4 passes)"),
    Group("l2_all", (Metric.L2_SECTORS, Metric.L2_HIT_RATE),
          "all L2 clients (the paper's totals; include fabric and other engines)"),
)}

DEFAULT_GROUPS = ("dram", "lrc", "tex", "fabric", "l1")


def get_groups(names: tuple[str, ...] | list[str]) -> tuple[Group, ...]:
    """Groups by name, in the order given; an unknown or repeated name is an error."""
    unknown = [n for n in names if n not in GROUPS]
    if unknown:
        raise ValueError(f"unknown metric group(s) {', '.join(unknown)}; known: "
                         f"{', '.join(GROUPS)}")
    if len(set(names)) != len(names) or not names:
        raise ValueError(f"metric groups must be distinct and at least one, got {list(names)}")
    return tuple(GROUPS[n] for n in names)


def home_group(metric: str, groups: tuple[Group, ...]) -> str | None:
    """The group whose home metrics hold ``metric`` (None if only a companion or absent)."""
    return next((g.name for g in groups if metric in g.metrics), None)

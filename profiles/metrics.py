"""Named Nsight Compute metric sets, and metric *groups* collected one replay pass at a time.

``paper`` is the set of the Sawtooth paper (paper.md). ``hopper`` adds what matters on H100/H200:
DRAM bytes, the read-only split of the L2 tex traffic (O stores are writes), and the
``ltcfabric`` counters: Hopper's L2 is two partitions joined by a crossbar, and a sector fetched
from the far partition shows up there.

Why groups. ncu collects a metric list in as many *replay passes* as the hardware counter slots
need, and it splits the list by counter domain, not by meaning. The ``hopper`` set takes 4 passes
on an H100 (``profiler__replayer_passes`` = 4 in every committed raw export), so the hits, the
misses and the sector total of one case can come from different executions of a kernel whose
CTA placement and timing differ between executions: hits + misses then miss the total by up to
30%, and a hit *rate* built from them is meaningless (Nsight Compute's metrics guide warns about
exactly this). A :class:`Group` names metrics that must agree with each other, small enough to be
meant for ONE pass; the collector (``profiles.collect``) runs one ncu session per group, asks for
``profiler__replayer_passes`` in every session and records it, and the rows of a group that still
needed more than one pass are flagged ``multipass=N`` (whether a group fits is found by measuring,
since ncu publishes no table of counter slots). Values of different groups are never combined
into one ratio per repeat; checks across groups use medians and say so.

``metrics`` of a group are its *home* metrics (the value analysis reads by default); ``also`` are
companions collected again in the same pass only so that a check can compare them with the home
metrics of the same execution (e.g. DRAM bytes beside the tex misses of that very replay).
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
    Group("tex", (Metric.L2_TEX_SECTORS, Metric.L2_TEX_HITS, Metric.L2_TEX_MISSES),
          "L2 lookups from L1TEX/TMA in the SM's local partition: hits + misses = sectors"),
    Group("tex_read", (Metric.L2_TEX_READ_SECTORS, Metric.L2_TEX_READ_HITS,
                       Metric.L2_TEX_READ_MISSES),
          "the read-only part of the tex lookups (O stores excluded)"),
    Group("fabric", (Metric.L2_FABRIC_SECTORS, Metric.L2_FABRIC_HITS, Metric.L2_FABRIC_MISSES),
          "lookups forwarded from the other partition to the line's home partition"),
    Group("dram", (Metric.DRAM_READ_BYTES,),
          "DRAM fills, beside the local tex misses of the same pass",
          also=(Metric.L2_TEX_MISSES,)),
    Group("lrc", (Metric.LRC_READ_SECTORS, Metric.L1_XBAR_READ_SECTORS),
          "L2 Request Coalescer: read sectors before and after coalescing, beside L2 tex sectors",
          also=(Metric.L2_TEX_SECTORS,)),
    Group("l1", (Metric.L1_SECTORS, Metric.L1_HITS), "L1TEX lookups (zero for TMA loads)"),
    Group("l2_all", (Metric.L2_SECTORS, Metric.L2_HIT_RATE),
          "all L2 clients (the paper's totals; include fabric and other engines)"),
)}

DEFAULT_GROUPS = ("tex", "fabric", "dram", "lrc", "l1")


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

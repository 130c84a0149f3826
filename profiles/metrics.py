"""Named Nsight Compute metric sets.

``paper`` is the set of the Sawtooth paper (paper.md). ``hopper`` adds what matters on H100/H200:
DRAM bytes, the read-only split of the L2 tex traffic (O stores are writes), and the
``ltcfabric`` counters: Hopper's L2 is two partitions joined by a crossbar, and a sector fetched
from the far partition shows up there.
"""
from __future__ import annotations

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
    "lts__t_sectors_srcunit_tex_op_read.sum",
    "lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum",
    "lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum",
    "lts__t_sectors_srcunit_ltcfabric.sum",
    "lts__t_sectors_srcunit_ltcfabric_lookup_hit.sum",
    "lts__t_sectors_srcunit_ltcfabric_lookup_miss.sum",
)

SETS: dict[str, tuple[str, ...]] = {"paper": PAPER, "hopper": HOPPER}


def get(name: str) -> tuple[str, ...]:
    try:
        return SETS[name]
    except KeyError:
        raise ValueError(f"unknown metric set {name!r}; known: {', '.join(SETS)}") from None

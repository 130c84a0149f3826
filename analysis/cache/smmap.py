"""Which L2 partition each resident CTA slot sits on, as measured
(``experiments.instruments.smmap``).

Why it matters. On a two-partition L2 (Hopper) two CTAs that read a tile at the same time share
one copy when their SMs sit on the same partition, and hold it twice (home copy plus the reader's
local copy; the far reader counts a local lookup miss) when they do not. Which SMs a launch's CTAs
land on is not documented, so the timed simulator reads it from a measurement:
the arch's default ``smmap`` instrument run of the registry (``analysis.data``) gives, for launches
of N = 1 .. 2·SMs CTAs, the partition of the SM that CTA ``i`` ran on (partitions found by L2
latency; three launches per N agreed).

On the H100 the first 8 CTAs of every launch land on one partition (N = 2, 4, 8 share perfectly),
N = 16 puts 4 of 16 on the other side, and a full launch of 132 runs CTAs 0-15 and 64-113 on one
side, 16-63 and 114-131 on the other: contiguous runs, not the alternation ``slot % 2`` the
simulator assumed before (which put CTA 1 across the chip from CTA 0). The H200 differs in the
details (CTAs 0-7 on one side, then 8-15 mostly on the other), so each arch reads its own map.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from analysis.data import csv_rows, registry, stored

__all__ = ["slot_partitions", "slot_paired_odd", "sm_pair", "measured_map", "measured_maps",
           "measured_sms"]


def _map_file(source: str) -> Path | None:
    """The ``smmap.csv[.gz]`` that ``source`` names: a run directory of
    ``experiments.instruments.smmap`` (one chip's map: a path containing ``/``), else the registered
    default ``smmap`` instrument of the arch ``source``; None if there is none."""
    if "/" in source:
        return stored(source, "smmap.csv")
    if not registry.find(role="instrument", arch=source, study="smmap", default=True):
        return None
    return stored(registry.instrument("smmap", source).path, "smmap.csv")


@functools.cache
def _launches(source: str, column: str) -> dict[int, tuple[int, ...]]:
    """{launch CTA count N: ``column`` ("group" or "sm") of CTA 0..N-1} from the map ``source``
    names (``_map_file``; repeat 0; for N not above the SM count the one-CTA-per-SM launch).
    Empty if none."""
    path = _map_file(source)
    if path is None:
        return {}
    launches: dict[tuple[int, int], dict[int, int]] = {}
    rows = csv_rows(path, typed=False)
    for r in rows:
        if r["kind"] != "cta_sm" or r["repeat"] != "0":
            continue
        launches.setdefault((int(r["n_ctas"]), int(r["smem"])), {})[int(r["index"])] = \
            int(r[column])
    out: dict[int, tuple[int, ...]] = {}
    for (n, smem), g in sorted(launches.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        if n not in out:            # the larger shared-memory launch (one CTA per SM) first
            out[n] = tuple(g[i] for i in range(n))
    return out


def measured_map(source: str) -> dict[int, tuple[int, ...]]:
    """{launch CTA count N: partition of CTA 0..N-1}; ``source`` is an arch name (its newest
    committed map) or an ``experiments.instruments.smmap`` run directory (one chip's; see
    ``_launches``)."""
    return _launches(source, "group")


def measured_maps(arch: str) -> list[str]:
    """Every distinct map of ``arch`` measured so far: the ``experiments.instruments.smmap`` run
    directories anywhere in the arch's registered runs, one per distinct partition-per-CTA table
    (the first path in sorted order stands for its duplicates).

    Why more than one: a launch's CTA -> partition map is not a fixed property of a chip. The
    same H100 measured in two processes nine minutes apart gave two maps from 16 CTAs up
    (``profiles/h100/holdout-20261125g``: ``smmap-20261125c`` and
    ``../onepass-20261125/smmap-20261125``), and chips differ too; so where launches of one
    case disagree, the maps seen are the placement's range
    (``analysis.calibration.simcheck.validate``)."""
    out, seen = [], set()
    for d in sorted(p.parent for p in registry.find_files(arch, "smmap.csv*")):
        table = tuple(sorted(measured_map(str(d)).items()))
        if table and table not in seen:
            seen.add(table)
            out.append(str(d))
    return out


def measured_sms(source: str) -> dict[int, tuple[int, ...]]:
    """{launch CTA count N: the SM (``%smid``) of CTA 0..N-1} (``source`` as ``measured_map``)."""
    return _launches(source, "sm")


def _of_launch(m: dict[int, tuple[int, ...]], resident: int) -> tuple[int, ...]:
    """The launch of exactly ``resident`` CTAs, else the first ``resident`` CTAs of the smallest
    measured launch that is larger, else the largest launch repeated."""
    larger = [n for n in m if n >= resident]
    if larger:
        return m[min(larger)][:resident]
    big = m[max(m)]
    return tuple(big[i % len(big)] for i in range(resident))


def slot_partitions(placement: str, resident: int, partitions: int) -> np.ndarray:
    """Partition of each of ``resident`` slots: ``"alternate"`` (slot % partitions), or an arch
    name or a chip's ``experiments.instruments.smmap`` run directory whose measured map is used: the
    launch of exactly ``resident`` CTAs, else the first ``resident`` CTAs of the smallest measured
    launch that is larger, else the largest launch repeated."""
    if partitions == 1:
        return np.zeros(resident, dtype=np.int64)
    if placement == "alternate":
        return np.arange(resident, dtype=np.int64) % partitions
    m = measured_map(placement)
    if not m:
        raise ValueError(f"no measured SM placement for {placement!r} (an arch's registered "
                         f"smmap instrument, or a directory holding smmap.csv); run "
                         f"`python -m experiments.instruments.smmap` on that GPU, or use "
                         f"placement='alternate'")
    return np.asarray(_of_launch(m, resident), dtype=np.int64)


def sm_pair(sm):
    """The SM pair (2k, 2k+1) that ``%smid`` ``sm`` belongs to, ``sm // 2`` (an int or an
    array); ``sm % 2`` tells its member. The H100's timing says consecutive ids share something
    (the odd SM of a busy pair runs slower, ``slot_paired_odd``); NVIDIA does not document that
    they form a TPC, so the unit is called a pair."""
    return sm // 2


def slot_paired_odd(placement: str, resident: int) -> np.ndarray:
    """Whether each of ``resident`` slots is the slower one of a busy SM pair: on an odd SM
    whose even sibling (``%smid`` − 1) also runs a slot of the launch, or a second slot on one
    SM. Why: in the sparse-stamp traces (``profiles/h100/tracecost-20261125``, lags in
    ``profiles/h100/drift-sm-20261125b``) CTAs alone on their SM pair never drift apart (2 and 4
    CTAs, all on even SMs: 0 steps over millions), while in launches that fill pairs the odd SM
    of each pair falls behind the even one at a steady rate (8 CTAs on SMs 124-131: the four odd
    ones 700 steps behind after 1.3 M steps). All False for ``"alternate"`` (no SM ids) or an
    arch without a measured map (no pairs known)."""
    m = measured_sms(placement) if placement != "alternate" else {}
    if not m:
        return np.zeros(resident, dtype=bool)
    sms = _of_launch(m, resident)
    seen: set[int] = set()
    out = np.zeros(resident, dtype=bool)
    even_busy = {sm_pair(sm) for sm in sms if sm % 2 == 0}
    for i, sm in enumerate(sms):
        out[i] = sm in seen or (sm % 2 == 1 and sm_pair(sm) in even_busy)
        seen.add(sm)
    return out

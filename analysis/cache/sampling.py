"""Where the timed simulator samples (SHARDS, Waldspurger et al., FAST 2015) and how it hashes
half-tiles into sets: which tile ids enter the cache model at a rate R, the rate that keeps a
fixed sample size, and each half-tile's set in a W-way cache. The model and its parameters are
``analysis.cache.timesim``'s docstring."""
from __future__ import annotations

import numpy as np

from spec.trace import WorkTable


def sampled_subkeys(n_sub: int, rate: float, partitions: int = 1) -> np.ndarray:
    """SHARDS spatial sample, systematic: tile id ``k`` is in iff ``floor((k + 1)·R + 1/2) >
    floor(k·R + 1/2)`` (every ``1/R``-th id), with all ``partitions`` halves of a sampled tile
    (sub-key ``k · partitions + h``). Any run of ``n`` consecutive tile ids holds ``R·n``
    samples, rounded either way; a hashed sample holds ``R·n ± sqrt(R·n)``."""
    if rate >= 1.0:
        return np.ones(n_sub, dtype=bool)
    k = np.arange(n_sub // partitions, dtype=np.float64)
    keep = np.floor((k + 1) * rate + 0.5) > np.floor(k * rate + 0.5)
    return np.repeat(keep, partitions)


SHARDS_TARGET = 6554
"""SHARDS size rule: sample about this many half-tile ids per case (0.1 of the GB10 cuTile B=8
case's 65 536 tile ids). The sampling error grows as the sample shrinks, so a fixed sample size
(rather than a fixed rate) keeps the error measured against the exact simulator on the GB10 and
H100 cases (``explorations/simbench.py``) valid for the larger arches."""


SPREAD_SEEDS = 5
"""A sampled case of a study run (``--sample``) is simulated at this many seeds (the run's and
the next ones): its rows carry the first seed's counts and state the spread of all of them, the
sampled model's own uncertainty, measured under the model that ran
(``experiments.simulation.simulate.timed_rows``)."""


def set_index(wsub: np.ndarray, sampled: np.ndarray, cap_part: int,
              ways: int) -> tuple[np.ndarray, int]:
    """(set of each half-tile, sets per partition) of an L2 partition of ``cap_part`` sectors
    whose entries are hashed into sets of about ``ways`` half-tiles; ``ways = 0``: one set
    (fully associative).

    Why sets matter for the wavefront: in a fully associative LRU a tile hits iff fewer
    sectors than the capacity were touched since its last use, so a convoy's hits fall off a
    cliff where its reuse distance crosses the capacity (counts of a 132-CTA convoy near the
    L2 size swing 2-4x with a few hundred steps of spread, REPORT.md 7e). In a hashed
    W-way cache a line hits iff fewer than W lines *of its own set* arrived since, a
    Poisson count of mean W·D/C for reuse distance D and capacity C: the cliff becomes a
    slope about sqrt(W)/W wide (W = 16: hits 78% at D = 0.8 C, 47% at C, 22% at 1.2 C). Sets
    here hold half-tiles, not 128 B lines; the per-entry hit probability is the same Poisson
    law. The set of a half-tile is a 64-bit mix of its id (splitmix64), so consecutive tiles
    of a scan land in unrelated sets, as a hashed slice/set index spreads a scan's lines.
    Sized from the median sampled half-tile, so that each set holds about ``ways`` of them."""
    if ways <= 0:
        return np.zeros(len(wsub), dtype=np.int64), 1
    typical = float(np.median(wsub[sampled])) if sampled.any() else 1.0
    n_sets = max(1, int(round(cap_part / (ways * max(typical, 1.0)))))
    x = np.arange(len(wsub), dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return (x % np.uint64(n_sets)).astype(np.int64), n_sets


def shards_rate(table: WorkTable, partitions: int, target: int = SHARDS_TARGET) -> float:
    """The SHARDS rate of the size rule: ``min(1, target / half-tile ids)``."""
    return min(1.0, target / (len(table.key_sectors) * partitions))

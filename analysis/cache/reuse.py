"""LRU stack (reuse) distances of an access trace, their histograms and the miss-ratio curve.

The locality argument in one paragraph (Mattson et al. 1970). In a fully associative LRU cache the
resident lines are always the top of the *LRU stack* (every key ordered by its last use). When a
key is accessed again, its *stack distance* is the number of distinct other keys touched since its
previous access: exactly the keys stacked above it. The access hits a cache that holds ``C`` keys
iff ``distance < C``, for every ``C`` at once, so one pass over the trace gives the misses of every
cache size (the miss-ratio curve). First accesses have no previous use: they miss at every size
(compulsory, "cold" misses) and get distance ``-1`` here.

Worked example, keys ``a b c a b c`` (a linear scan over N = 3 tiles, twice)::

    access    a  b  c  a  b  c
    distance -1 -1 -1  2  2  2     every reuse sees the other N-1 = 2 keys

and the sawtooth ``a b c c b a``::

    access    a  b  c  c  b  a
    distance -1 -1 -1  0  1  2     tile j is reused at distance N-1-j

A 2-key cache misses 3 + 3 = 6 times on the first trace and 3 + 1 = 4 times on the second (the
reuses at distance 0 and 1 hit).

Weighted distances. The keys of an attention trace are whole tiles of different sizes, and the
caches we care about are sized in bytes. With ``weights[key]`` = the tile's sectors the distance is
the *sum of the sizes* of the distinct other keys touched since the previous access, and an access
of weight ``w`` at weighted distance ``d`` hits a cache of ``C`` sectors iff ``d + w <= C``. For
tiles whose sectors are always touched together in the same order this is exact for a
sector-granular LRU: every sector of the tile has stack distance ``d + w - 1`` (the tile's other
sectors sit between it and the top), so a tile access hits or misses as a whole.

Implementation. For each key we keep the time (slot) of its last use and mark that slot in a
Fenwick (binary indexed) tree holding the key's weight. At an access to a key last used at slot
``s``, the weighted distance is the sum of the marks after ``s``: the live weight minus a prefix
sum, O(log n). Marks only exist for live keys, so the slot space is compacted (live marks renumbered
in order) whenever it fills up: the tree has ``2 * n_keys`` slots instead of one per access, stays
in the CPU cache, and each compaction costs O(slots) once per ``n_keys`` accesses. Overall
O(n log n_keys) time, O(n_keys) working memory plus the int64 output.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

__all__ = ["stack_distances", "trace_stack_distances", "access_weights", "Histogram",
           "distance_histogram", "exact_histogram", "MissRatioCurve", "miss_ratio_curve",
           "key_and_weights"]

COLD = -1
"""Distance given to a first (compulsory) access."""


# --------------------------------------------------------------------------------------------
# numba kernels
# --------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def _stack_distances_kernel(key, w, out):  # pragma: no cover - compiled
    n = key.size
    n_keys = w.size
    cap = max(2 * n_keys, 64)
    tree = np.zeros(cap + 1, dtype=np.int64)       # Fenwick tree over slots 0..cap-1 (1-based)
    slot_key = np.full(cap, -1, dtype=np.int64)    # key whose last use is this slot, or -1
    last = np.full(n_keys, -1, dtype=np.int64)     # slot of each key's last use, or -1
    live = 0                                       # total weight of the marks
    nxt = 0                                        # next free slot
    for t in range(n):
        k = key[t]
        wk = w[k]
        if nxt == cap:                             # compact: renumber live marks in order
            j = 0
            for s in range(cap):
                kk = slot_key[s]
                if kk >= 0:
                    slot_key[j] = kk
                    last[kk] = j
                    j += 1
            for s in range(j, cap):
                slot_key[s] = -1
            for i in range(cap + 1):
                tree[i] = 0
            for s in range(j):
                tree[s + 1] = w[slot_key[s]]
            for i in range(1, cap + 1):            # O(cap) Fenwick build
                p = i + (i & -i)
                if p <= cap:
                    tree[p] += tree[i]
            nxt = j
        s = last[k]
        if s >= 0:
            acc = 0                                # weight of marks at slots <= s
            i = s + 1
            while i > 0:
                acc += tree[i]
                i -= i & -i
            out[t] = live - acc
            i = s + 1
            while i <= cap:
                tree[i] -= wk
                i += i & -i
            slot_key[s] = -1
        else:
            out[t] = -1
            live += wk
        i = nxt + 1
        while i <= cap:
            tree[i] += wk
            i += i & -i
        slot_key[nxt] = k
        last[k] = nxt
        nxt += 1


@numba.njit(cache=True)
def _need_histogram_kernel(dist, key, w, size):  # pragma: no cover - compiled
    """hist[need] += weight over warm accesses (need = distance + own weight); total, cold."""
    hist = np.zeros(size, dtype=np.int64)
    total = 0
    cold = 0
    for t in range(dist.size):
        wk = w[key[t]]
        total += wk
        if dist[t] < 0:
            cold += wk
        else:
            hist[dist[t] + wk] += wk
    return hist, total, cold


@numba.njit(cache=True)
def _max_need_kernel(dist, key, w):  # pragma: no cover - compiled
    m = -1
    for t in range(dist.size):
        if dist[t] >= 0:
            v = dist[t] + w[key[t]]
            if v > m:
                m = v
    return m


@numba.njit(cache=True)
def _packed_needs_kernel(dist, key, w, radix):  # pragma: no cover - compiled
    """need * radix + weight of every warm access (a sortable packed pair)."""
    n_warm = 0
    for t in range(dist.size):
        if dist[t] >= 0:
            n_warm += 1
    out = np.empty(n_warm, dtype=np.int64)
    j = 0
    for t in range(dist.size):
        if dist[t] >= 0:
            wk = w[key[t]]
            out[j] = (dist[t] + wk) * radix + wk
            j += 1
    return out


@numba.njit(cache=True)
def _log2_hist_kernel(dist, key, w, n_bins):  # pragma: no cover - compiled
    """bin 0: distance 0; bin b >= 1: 2**(b-1) <= distance < 2**b. Weighted counts, cold apart."""
    counts = np.zeros(n_bins, dtype=np.int64)
    cold = 0
    for t in range(dist.size):
        wk = w[key[t]] if w.size else 1
        d = dist[t]
        if d < 0:
            cold += wk
            continue
        b = 0
        while d > 0:
            d >>= 1
            b += 1
        counts[b] += wk
    return counts, cold


# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------
def key_and_weights(key, weights) -> tuple[np.ndarray, np.ndarray]:
    """A trace's keys as dense non-negative int32 ids and each key's weight in sectors (1 each
    when ``weights`` is None): the form every stack-distance pass here and ``l2sim`` reads."""
    key = np.ascontiguousarray(key)
    if key.dtype != np.int32:
        if key.size and (key.min() < np.iinfo(np.int32).min or key.max() > np.iinfo(np.int32).max):
            raise ValueError("keys must fit in int32")
        key = key.astype(np.int32)
    if key.ndim != 1:
        raise ValueError(f"key must be 1-D, got shape {key.shape}")
    if key.size and key.min() < 0:
        raise ValueError("keys must be non-negative dense ids")
    n_keys = int(key.max()) + 1 if key.size else 0
    if weights is None:
        w = np.ones(n_keys, dtype=np.int64)
    else:
        w = np.ascontiguousarray(weights, dtype=np.int64)
        if w.ndim != 1 or len(w) < n_keys:
            raise ValueError(f"weights must be indexed by key: need {n_keys} entries, "
                             f"got shape {w.shape}")
        if w.size and w.min() < 0:
            raise ValueError("weights must be non-negative")
    return key, w


def stack_distances(key: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """LRU stack distance of every access; ``-1`` for first (cold) accesses.

    ``key`` is an int32 stream of dense ids (``Trace.key``). Without ``weights`` the distance counts
    the distinct other keys touched since the previous access to the same key; with ``weights``
    (indexed by key, e.g. ``Trace.key_sectors``) it is the sum of their weights. An access of
    weight ``w`` at distance ``d`` hits an LRU cache of capacity ``C`` (same unit) iff
    ``d + w <= C`` (unweighted: ``d < C`` keys).

    >>> stack_distances(np.array([0, 1, 2, 0, 1, 2], np.int32)).tolist()
    [-1, -1, -1, 2, 2, 2]
    >>> stack_distances(np.array([0, 1, 2, 2, 1, 0], np.int32), np.array([1, 10, 100])).tolist()
    [-1, -1, -1, 0, 100, 110]
    """
    key, w = key_and_weights(key, weights)
    out = np.empty(key.size, dtype=np.int64)
    if key.size:
        _stack_distances_kernel(key, w, out)
    return out


def trace_stack_distances(trace) -> np.ndarray:
    """Sector-weighted stack distances of a ``spec.Trace`` (weights = ``trace.key_sectors``)."""
    return stack_distances(trace.key, trace.key_sectors)


def access_weights(key: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """The weight of each access (``weights[key]``, or ones)."""
    if weights is None:
        return np.ones(len(key), dtype=np.int64)
    return np.asarray(weights)[key]


@dataclass(frozen=True)
class Histogram:
    """Weighted histogram of warm-access distances; cold accesses are counted apart.

    ``lo[i] <= distance < hi[i]`` for bin ``i`` (for exact histograms ``hi = lo + 1``);
    ``count[i]`` is the number of accesses in the bin, or their total weight (sectors) when the
    histogram was built with weights: multiply by the sector size for bytes.
    """

    lo: np.ndarray      # int64
    hi: np.ndarray      # int64
    count: np.ndarray   # int64
    cold: int
    weighted: bool

    @property
    def total(self) -> int:
        return int(self.count.sum()) + self.cold

    def mean(self) -> float:
        """Weighted mean distance of the warm accesses (exact histograms only give it exactly)."""
        mid = np.where(self.hi - self.lo == 1, self.lo, (self.lo + self.hi - 1) / 2)
        n = self.count.sum()
        return float((mid * self.count).sum() / n) if n else float("nan")


def distance_histogram(distances: np.ndarray, key: np.ndarray | None = None,
                       weights: np.ndarray | None = None) -> Histogram:
    """Log2-binned histogram: bin 0 holds distance 0, bin ``b >= 1`` holds ``[2**(b-1), 2**b)``.

    With ``key`` and ``weights`` every access counts with its weight (sector-weighted histogram:
    "how many sectors were reused at this distance"); otherwise each access counts 1.
    """
    distances = np.ascontiguousarray(distances, dtype=np.int64)
    if weights is not None:
        if key is None:
            raise ValueError("a weighted histogram needs the key of each access")
        key, w = key_and_weights(key, weights)
        if len(key) != len(distances):
            raise ValueError("key and distances differ in length")
    else:
        key, w = np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
    dmax = int(distances.max()) if distances.size else 0
    n_bins = max(dmax, 0).bit_length() + 1
    counts, cold = _log2_hist_kernel(distances, key, w, n_bins)
    b = np.arange(n_bins, dtype=np.int64)
    lo = np.where(b == 0, 0, np.left_shift(1, np.maximum(b - 1, 0)))
    hi = np.where(b == 0, 1, np.left_shift(1, b))
    return Histogram(lo, hi, counts, int(cold), weights is not None)


def exact_histogram(distances: np.ndarray, key: np.ndarray | None = None,
                    weights: np.ndarray | None = None) -> Histogram:
    """One bin per distinct distance value (for small traces and worked examples).

    >>> h = exact_histogram(stack_distances(np.array([0, 1, 2, 2, 1, 0], np.int32)))
    >>> h.lo.tolist(), h.count.tolist(), h.cold
    ([0, 1, 2], [1, 1, 1], 3)
    """
    distances = np.asarray(distances, dtype=np.int64)
    acc_w = access_weights(key, weights) if weights is not None else np.ones(len(distances),
                                                                              np.int64)
    warm = distances >= 0
    vals, inv = np.unique(distances[warm], return_inverse=True)
    counts = np.bincount(inv, weights=acc_w[warm], minlength=len(vals)).astype(np.int64)
    return Histogram(vals, vals + 1, counts, int(acc_w[~warm].sum()), weights is not None)


@dataclass(frozen=True)
class MissRatioCurve:
    """Misses of a fully associative LRU cache at every capacity, from one pass.

    A warm access of weight ``w`` at distance ``d`` needs ``d + w`` units of capacity to hit.
    ``need`` holds the sorted distinct needs and ``hits_upto[i]`` the weight of the accesses whose
    need is ``<= need[i]``, so misses are a non-increasing step function of the capacity: all
    ``total`` units at capacity 0 (or below the smallest need) and ``cold`` once the capacity
    reaches ``need[-1]``. Units are the weights' (sectors for a trace; keys when unweighted).
    """

    need: np.ndarray        # int64, sorted, distinct
    hits_upto: np.ndarray   # int64, cumulative hit weight at each need
    total: int              # weight of all accesses
    cold: int               # weight of the cold accesses (misses at any capacity)

    def hits(self, capacity) -> np.ndarray | int:
        cap = np.asarray(capacity)
        idx = np.searchsorted(self.need, cap, side="right") - 1
        h = np.where(idx >= 0, self.hits_upto[np.maximum(idx, 0)] if len(self.need) else 0, 0)
        return int(h) if np.ndim(h) == 0 else h.astype(np.int64)

    def misses(self, capacity) -> np.ndarray | int:
        """Misses at ``capacity`` (scalar or array, same unit as the weights)."""
        h = self.hits(capacity)
        return self.total - h

    def steps(self) -> tuple[np.ndarray, np.ndarray]:
        """(capacity, misses) at every capacity where the curve steps down, plus capacity 0."""
        cap = np.concatenate([[0], self.need])
        return cap, self.misses(cap)


def miss_ratio_curve(distances: np.ndarray, key: np.ndarray,
                     weights: np.ndarray | None = None) -> MissRatioCurve:
    """The LRU miss-ratio curve of a trace from its stack distances (one pass, exact).

    ``distances`` must come from ``stack_distances(key, weights)`` with the same ``weights``.
    Needs (distance + own weight) are histogrammed when their range is comparable to the trace
    length, otherwise sorted.

    >>> k = np.array([0, 1, 2, 0, 1, 2], np.int32)
    >>> mrc = miss_ratio_curve(stack_distances(k), k)
    >>> mrc.misses([0, 2, 3, 100]).tolist()
    [6, 6, 3, 3]
    """
    key, w = key_and_weights(key, weights)
    distances = np.ascontiguousarray(distances, dtype=np.int64)
    if len(key) != len(distances):
        raise ValueError("key and distances differ in length")
    if not len(key):
        z = np.zeros(0, dtype=np.int64)
        return MissRatioCurve(z, z, 0, 0)
    max_need = int(_max_need_kernel(distances, key, w))
    if max_need < 0:                                 # every access is cold
        total = int(w[key].sum())
        z = np.zeros(0, dtype=np.int64)
        return MissRatioCurve(z, z, total, total)
    if max_need <= max(4 * len(key), 1 << 20):
        hist, total, cold = _need_histogram_kernel(distances, key, w, max_need + 1)
        need = np.flatnonzero(hist).astype(np.int64)
        hits_upto = np.cumsum(hist[need])
        del hist
    else:
        radix = int(w.max()) + 1
        if (max_need + 1) * radix >= np.iinfo(np.int64).max:
            raise OverflowError("distances too large to pack for sorting")
        packed = _packed_needs_kernel(distances, key, w, radix)
        packed.sort()
        nd, wt = np.divmod(packed, radix)
        del packed
        last = np.flatnonzero(np.diff(nd)) if len(nd) else np.zeros(0, np.int64)
        last = np.concatenate([last, [len(nd) - 1]]).astype(np.int64)
        need = nd[last]
        hits_upto = np.cumsum(wt)[last]
        total = int(w[key].sum())
        cold = total - int(wt.sum())
    return MissRatioCurve(need, hits_upto.astype(np.int64), int(total), int(cold))

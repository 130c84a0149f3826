"""The cache state the timed simulator's event loop updates per access, compiled with numba: the
slots' loser tree of next-event times, and each partition's (or set's) list of resident
half-tiles under LRU or SRRIP replacement.

The helpers are compiled without numba's runtime (``_nrt=False``): with it, each call increments
and decrements the reference count of every array argument with an atomic instruction, which
took 35% of the loop's time under perf (same counts; they allocate nothing).
"""
from __future__ import annotations

import numba
import numpy as np

INF_KEY = 0x7FF0000000000000
"""The loser tree's key of a retired slot: the bits of +inf."""


@numba.njit(cache=True, _nrt=False)
def tree_build(tree_k, tree_s, keys, r, m):  # pragma: no cover - compiled
    """A loser tree over ``r`` slots keyed by ``keys`` (``m``, a power of two >= r, leaves;
    slots past ``r`` never win): node ``k`` (1 <= k < m) holds the key and slot of the loser of
    its match, node 0 the winner, the first slot in (key, slot) order. Leaf ``m + s`` is slot
    ``s``. Built bottom-up through the winners of each level, kept in ``tree_*[k]`` while the
    losers wait in ``tree_*[m + k]`` (leaves already played), then moved into place.

    A key is a slot's clock as the bits of the double (``time.view(np.int64)``): clocks are
    >= 0 (never -0.0 or NaN), where the bits order as the values do, so a match is an integer
    comparison and its outcome a conditional move, with no branch to mispredict."""
    for s in range(m):
        tree_k[m + s] = keys[s] if s < r else INF_KEY
        tree_s[m + s] = s
    for k in range(m - 1, 0, -1):
        ak = tree_k[2 * k]
        a = tree_s[2 * k]
        bk = tree_k[2 * k + 1]
        b = tree_s[2 * k + 1]
        if bk < ak or (bk == ak and b < a):
            ak, a, bk, b = bk, b, ak, a
        tree_k[k] = ak                           # the winner, for the level above
        tree_s[k] = a
        tree_k[m + k] = bk                       # the loser
        tree_s[m + k] = b
    tree_k[0] = tree_k[1]
    tree_s[0] = tree_s[1]
    for k in range(1, m):
        tree_k[k] = tree_k[m + k]
        tree_s[k] = tree_s[m + k]


@numba.njit(cache=True, _nrt=False)
def tree_replay(tree_k, tree_s, m, s, key):  # pragma: no cover - compiled
    """The winner ``s`` (node 0) now has ``key`` (``INF_KEY``: retired): replay its matches from
    its leaf to the root, each against the loser stored there, and return the new winner, the
    first slot in (key, slot) order: the slot a binary heap ordered by (clock, slot) pops."""
    w = s
    wk = key
    k = (m + s) >> 1
    while k > 0:
        lk = tree_k[k]
        ls = tree_s[k]
        mask = -np.int64((lk < wk) | ((lk == wk) & (ls < w)))   # -1: the loser wins
        dk = (lk ^ wk) & mask
        ds = (ls ^ w) & mask
        tree_k[k] = lk ^ dk
        tree_s[k] = ls ^ ds
        wk ^= dk
        w ^= ds
        k >>= 1
    tree_k[0] = wk
    tree_s[0] = w
    return w


@numba.njit(cache=True, _nrt=False)
def _unlink(j, b, prev, nxt, bhead, btail):  # pragma: no cover - compiled
    """Remove entry ``j`` from the doubly linked list ``b`` (head = oldest)."""
    a = prev[j]
    c = nxt[j]
    if a >= 0:
        nxt[a] = c
    else:
        bhead[b] = c
    if c >= 0:
        prev[c] = a
    else:
        btail[b] = a
    prev[j] = -1
    nxt[j] = -1


@numba.njit(cache=True, _nrt=False)
def _append(j, b, prev, nxt, bhead, btail):  # pragma: no cover - compiled
    """Append entry ``j`` at the tail (newest end) of list ``b``."""
    prev[j] = btail[b]
    nxt[j] = -1
    if btail[b] >= 0:
        nxt[btail[b]] = j
    else:
        bhead[b] = j
    btail[b] = j


@numba.njit(cache=True, _nrt=False)
def _lookup(j, p, w, prev, nxt, head, tail, present, occ, cap, wsub, base):  # pragma: no cover
    """LRU lookup of entry ``j`` (= base + sub, ``base`` = partition * nsub) in list ``p`` (its
    partition, or its set of that partition), which runs from the least (``head``) to the most
    recently used (``tail``). Returns True on a hit (the entry
    moves to the MRU end); on a miss inserts it at the MRU end and evicts from the LRU end
    until the partition fits, unless it cannot fit at all (then the l2sim stack model misses
    it every time too, and so does this)."""
    if present[j]:
        if nxt[j] >= 0:                      # not already the MRU entry
            _unlink(j, p, prev, nxt, head, tail)
            _append(j, p, prev, nxt, head, tail)
        return True
    if w > cap[p]:
        return False
    present[j] = True
    _append(j, p, prev, nxt, head, tail)
    occ[p] += w
    while occ[p] > cap[p]:
        e = head[p]                          # e is not j: j alone fits
        _unlink(e, p, prev, nxt, head, tail)
        present[e] = False
        occ[p] -= wsub[e - base]
    return False


@numba.njit(cache=True, _nrt=False)
def _lookup_srrip(j, p, w, prev, nxt, bhead, btail, pb, age, present, occ, cap, wsub,
                  base):  # pragma: no cover - compiled
    """SRRIP lookup (2-bit re-reference prediction values, hit priority; Jaleel et al., ISCA
    2010) of entry ``j`` in partition ``p``, fully associative over whole tiles. Each
    partition keeps one list per RRPV, in the order the entries entered it; an entry's RRPV is
    ``(pb[j] + age[p]) % 4``, so ageing every entry by one is ``age[p] += 1`` (done only when
    no entry has RRPV 3, so no value wraps). A hit sets the RRPV to 0; a miss evicts the
    oldest RRPV-3 entries (ageing while there are none) until the tile fits, then inserts it
    at RRPV 2."""
    if present[j]:
        _unlink(j, p * 4 + pb[j], prev, nxt, bhead, btail)
        pb[j] = (4 - age[p] % 4) % 4                     # RRPV 0
        _append(j, p * 4 + pb[j], prev, nxt, bhead, btail)
        return True
    if w > cap[p]:
        return False
    while occ[p] + w > cap[p]:
        b3 = p * 4 + (3 - age[p] % 4 + 4) % 4
        if bhead[b3] < 0:
            age[p] += 1
            continue
        e = bhead[b3]
        _unlink(e, b3, prev, nxt, bhead, btail)
        present[e] = False
        occ[p] -= wsub[e - base]
    present[j] = True
    pb[j] = (2 - age[p] % 4 + 4) % 4                     # RRPV 2
    _append(j, p * 4 + pb[j], prev, nxt, bhead, btail)
    occ[p] += w
    return False


@numba.njit(cache=True, _nrt=False)
def access(srrip, j, p, w, prev, nxt, head, tail, pb, age, present, occ, cap, wsub,
            base):  # pragma: no cover - compiled
    """One lookup under the replacement policy: LRU (``head``/``tail`` one list per partition)
    or SRRIP (four lists per partition)."""
    if srrip:
        return _lookup_srrip(j, p, w, prev, nxt, head, tail, pb, age, present, occ, cap, wsub,
                             base)
    return _lookup(j, p, w, prev, nxt, head, tail, present, occ, cap, wsub, base)

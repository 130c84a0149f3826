"""The timed simulator's event loop, compiled with numba: CTAs advance on their own clocks through
a loser tree of next-event times; every K/V access looks its half-tile up in the partition's
LRU list (or SRRIP buckets), merges with a fill in flight, or misses; the counters it returns are
read by ``analysis.cache.timesim`` (the model, its parameters and the rows).

One event is one step of one slot, the slot with the earliest clock:

1. ``_issue``: the step's loads (and the O store at an item's last step) go to the L2, each tile
   as one half-tile per partition (``_half``): a hit is ready a hit latency later, a hit on a fill
   in flight when the fill is (``inflight``), a miss when its fill is (``_fill_ready``: the miss
   latency, its log-normal tail, the DRAM queue);
2. ``_step_end``: the step lasts until its loads are ready plus the compute, times the slot's
   speed and jitter factors; in sampled mode a run of steps touching only unsampled half-tiles is
   skipped at the running mean load time (``_skip``);
3. ``_advance``: the slot moves on to its next step, item or CTA, or retires.

The inputs are three named tuples (``Work``: the work items; ``Cache``: the L2's shape and
placement; ``Clock``: the time model's parameters) and the state two more (``Lines``: the
resident half-tiles and their fills; ``Slots``: the resident CTAs, their clocks and loser tree).
The counters are one array indexed by the names below (``COUNTERS``: ``TimeCounts``' fields).
The step functions are inlined into ``_events`` (numba's ``inline="always"``), which runs
without numba's runtime: called as functions, each call copies the named tuples (15x slower),
and with the runtime every read through a tuple counts references (8x slower).

The helpers the loop calls once or more per access (the loser tree and the replacement lists) are
in ``analysis.cache.replacement``. ``run`` is the one entry: it calls the loop compiled for the
replacement policy and cache shape (``entry``), which releases the GIL so that cases run on
threads.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numba
import numpy as np

from analysis.cache.gauss import BUF_WORDS, STATE_WORDS, normal, step_factor
from analysis.cache.gauss import seed as seed_rng
from analysis.cache.replacement import INF_KEY, access, tree_build, tree_replay
from spec.trace import Tensor

COUNTERS = ("tex_sectors", "tex_hits", "tex_misses", "inflight_hits", "merged_sectors",
            "fabric_sectors", "fabric_hits", "fabric_misses", "dram_fills", "cold_misses")
"""The counters ``run`` returns, in order: ``analysis.cache.timesim.TimeCounts``' fields."""
(TEX, HIT, MISS, INFLIGHT, MERGED, FABRIC, FABRIC_HIT, FABRIC_MISS, DRAM, COLD) = range(
    len(COUNTERS))

Q, K, V, O = (int(t) for t in Tensor)   # a step's accesses, in the order it issues them


class Work(NamedTuple):
    """The work items (``spec.trace.WorkTable``) and, per K/V head, the sorted K/V positions
    whose K or V half-tiles are sampled (CSR: ``samp_kv[samp_ptr[h]:samp_ptr[h + 1]]``)."""

    cta_first: np.ndarray          # CTA c runs items cta_first[c] .. cta_first[c + 1] - 1
    length: np.ndarray             # each item's steps (K/V tiles)
    reverse: np.ndarray            # the item scans its K/V tiles backwards
    q_key: np.ndarray              # the item's Q tile id
    o_key: np.ndarray              # the item's O tile id
    kv_row: np.ndarray             # the item's first K/V position (head * n_kv)
    k_base: int                    # tile id of K position 0 (V: v_base)
    v_base: int
    n_kv: int                      # K/V tiles per head
    samp_ptr: np.ndarray
    samp_kv: np.ndarray


class Cache(NamedTuple):
    """The L2's shape: half-tiles (``sub = key * n_parts + half``) and their sectors, which are
    sampled, each partition's (or set's) capacity in sectors and the partition of each slot."""

    wsub: np.ndarray               # sectors per half-tile
    sampled: np.ndarray            # the half-tile enters the cache model (SHARDS)
    all_sampled: bool              # exact: no running mean, no skips
    n_parts: int
    part_of: np.ndarray            # each slot's (SM's) local partition
    set_of: np.ndarray             # each half-tile's set (with several sets)
    n_sets: int
    cap: np.ndarray                # sectors each (partition, set) list holds
    window: float                  # the request coalescer's window (0: off)
    stores_miss: bool              # an O store to an absent half-tile is a lookup miss


class Clock(NamedTuple):
    """The time model (``analysis.cache.timesim``'s docstring), in units of a step."""

    resident: int                  # CTA slots
    speed: np.ndarray              # each slot's constant step-time factor
    hit_t: float
    miss_t: float
    compute: float
    depth: int                     # steps whose loads are issued ahead
    jitter: float
    rate_jitter: float
    fill_sigma: float
    dram_svc: float                # time DRAM takes per sector (0: no queue)
    seed: int


class Lines(NamedTuple):
    """The cache state: entry ``j = partition * nsub + sub`` in its (partition, set) list
    (``analysis.cache.replacement``), when its fill is done, its last coalescer request."""

    prev: np.ndarray
    nxt: np.ndarray
    head: np.ndarray
    tail: np.ndarray
    pb: np.ndarray                 # SRRIP: each entry's list
    age: np.ndarray
    present: np.ndarray
    occ: np.ndarray
    fill: np.ndarray               # when the entry's fill is (was) done
    lrc_t: np.ndarray              # when the partition last received a request for it
    lrc_ready: np.ndarray          # and when that request was ready
    seen: np.ndarray               # the half-tile was touched before (cold misses)


class Slots(NamedTuple):
    """The resident CTA slots: what each runs, its clock, the loads it has issued ahead, and
    the loser tree of the clocks (``analysis.cache.replacement.tree_build``)."""

    cta: np.ndarray
    item: np.ndarray
    step: np.ndarray
    time: np.ndarray
    keys: np.ndarray               # the clocks' bits: the loser tree's keys
    tree_k: np.ndarray
    tree_s: np.ndarray
    est: np.ndarray                # running mean load time (sampled mode)
    ring: np.ndarray               # data-ready times of the steps issued, by step % ring size
    refill: np.ndarray             # the next event re-issues a prologue (after a skip)
    skip_m: np.ndarray             # the per-step cost of the last skip
    rate: np.ndarray               # each slot's constant speed factor


@numba.njit(cache=True)
def _new_lines(cache, srrip):  # pragma: no cover - compiled
    tot = cache.n_parts * cache.wsub.size
    win = tot if cache.window > 0 else 0
    lists = cache.n_parts * 4 if srrip else cache.n_parts * cache.n_sets
    return Lines(np.full(tot, -1, np.int64), np.full(tot, -1, np.int64),
                 np.full(lists, -1, np.int64), np.full(lists, -1, np.int64),
                 np.zeros(tot if srrip else 0, np.int64), np.zeros(cache.n_parts, np.int64),
                 np.zeros(tot, np.bool_), np.zeros(cache.n_parts * cache.n_sets, np.int64),
                 np.zeros(tot, np.float64), np.full(win, -np.inf), np.zeros(win),
                 np.zeros(cache.wsub.size, np.bool_))


@numba.njit(inline="always")
def _next_cta(cta_first, c):  # pragma: no cover - compiled
    """The first CTA from ``c`` on that has items (or the number of CTAs)."""
    n_ctas = cta_first.size - 1
    while c < n_ctas and cta_first[c + 1] == cta_first[c]:
        c += 1
    return c


@numba.njit(cache=True)
def _new_slots(work, clock, rng, zbuf):  # pragma: no cover - compiled
    """The slots, their speed factors drawn, filled with the first CTAs in launch order (CTAs
    without items finish at once); returns them, the slots running and the next CTA."""
    r = min(clock.resident, work.cta_first.size - 1)
    ring_n = 1                                # each slot's steps issued and not yet computed
    while ring_n < clock.depth + 1:           # (depth + 1 of them: a power of two that holds
        ring_n *= 2                           # them indexes by a mask, not a division)
    rate = clock.speed[:r].copy()
    if clock.rate_jitter > 0:
        for s in range(r):
            rate[s] *= math.exp(clock.rate_jitter * normal(rng, zbuf)
                                - 0.5 * clock.rate_jitter * clock.rate_jitter)
    cta = np.zeros(r, np.int64)
    item = np.zeros(r, np.int64)
    n = 0
    nxt_cta = 0
    for s in range(r):
        nxt_cta = _next_cta(work.cta_first, nxt_cta)
        if nxt_cta == work.cta_first.size - 1:
            break
        cta[s] = nxt_cta
        item[s] = work.cta_first[nxt_cta]
        n += 1
        nxt_cta += 1
    leaves = 1
    while leaves < n:
        leaves *= 2
    time = np.zeros(r, np.float64)
    slots = Slots(cta, item, np.zeros(r, np.int64), time, time.view(np.int64),
                  np.empty(2 * leaves, np.int64), np.empty(2 * leaves, np.int64),
                  np.ones(r, np.float64), np.zeros((r, ring_n), np.float64),
                  np.zeros(r, np.bool_), np.zeros(r, np.float64), rate)
    tree_build(slots.tree_k, slots.tree_s, slots.keys, n, leaves)
    return slots, n, nxt_cta


@numba.njit(inline="always")
def _lookup(srrip, cache, lines, part, sub, sj, w):  # pragma: no cover - compiled
    """Look half-tile ``sub`` (set ``sj``) up in partition ``part``: True on a hit."""
    nsub = cache.wsub.size
    return access(srrip, part * nsub + sub, part * cache.n_sets + sj, w, lines.prev,
                  lines.nxt, lines.head, lines.tail, lines.pb, lines.age, lines.present,
                  lines.occ, cache.cap, cache.wsub, part * nsub)


@numba.njit(inline="always")
def _fill_ready(clock, cnt, rng, zbuf, t_iss, w, load, dram_free):  # pragma: no cover
    """When a fill issued at ``t_iss`` is ready, and when DRAM has served every fill so far: a
    load's fill reads DRAM (its latency tail, then its place in the DRAM queue); a store's
    (``stores_miss``) reads nothing."""
    rdy = t_iss + clock.miss_t
    if load:
        if clock.fill_sigma > 0:             # the fill's latency tail
            rdy = t_iss + clock.miss_t * math.exp(clock.fill_sigma * normal(rng, zbuf))
        cnt[DRAM] += w
        if clock.dram_svc > 0:
            dram_free = max(dram_free, t_iss) + w * clock.dram_svc
            rdy = max(rdy, dram_free)
    return rdy, dram_free


@numba.njit(inline="always")
def _allocate(srrip, cache, lines, part, sub, sj, w, t):  # pragma: no cover - compiled
    """A store's lookup of half-tile ``sub`` in partition ``part``: it allocates the line (most
    recently used) and, where it was absent, its data is there at ``t`` (no fill)."""
    j = part * cache.wsub.size + sub
    if not _lookup(srrip, cache, lines, part, sub, sj, w) and lines.present[j]:
        lines.fill[j] = t


@numba.njit(inline="always")
def _store(srrip, cache, lines, cnt, p, home, sub, sj, t):  # pragma: no cover - compiled
    """An O store that never misses: it writes whole sectors, so it is a lookup that hits (no
    fill, no DRAM read); it allocates the half-tile locally and, homed across, at its home."""
    w = cache.wsub[sub]
    cnt[TEX] += w
    cnt[HIT] += w
    _allocate(srrip, cache, lines, p, sub, sj, w, t)
    if home != p:
        cnt[FABRIC] += w
        cnt[FABRIC_HIT] += w
        _allocate(srrip, cache, lines, home, sub, sj, w, t)


@numba.njit(inline="always")
def _load(srrip, cache, clock, lines, cnt, rng, zbuf, p, home, sub, sj, t, t_iss, load,
          dram_free):  # pragma: no cover - compiled
    """A load (or a store that can miss) of half-tile ``sub`` from partition ``p`` at ``t``
    (issued at ``t_iss``): coalesced before the L2, a hit (on a fill in flight: ready when it
    is), or a miss filled from its home partition over the fabric or from DRAM. Returns when it
    is ready and when DRAM has served every fill so far."""
    w = cache.wsub[sub]
    nsub = cache.wsub.size
    j = p * nsub + sub
    if cache.window > 0 and t - lines.lrc_t[j] < cache.window:
        cnt[MERGED] += w                                      # coalesced before L2
        return max(lines.lrc_ready[j], t_iss + clock.hit_t), dram_free
    cnt[TEX] += w
    if not lines.seen[sub]:
        lines.seen[sub] = True
        cnt[COLD] += w
    if _lookup(srrip, cache, lines, p, sub, sj, w):
        cnt[HIT] += w
        if lines.fill[j] > t_iss:
            cnt[INFLIGHT] += w
            rdy = lines.fill[j]
        else:
            rdy = t_iss + clock.hit_t
    else:
        cnt[MISS] += w
        if home == p:
            rdy, dram_free = _fill_ready(clock, cnt, rng, zbuf, t_iss, w, load, dram_free)
        else:
            cnt[FABRIC] += w
            jh = home * nsub + sub
            if _lookup(srrip, cache, lines, home, sub, sj, w):
                cnt[FABRIC_HIT] += w
                rdy = lines.fill[jh] if lines.fill[jh] > t_iss else t_iss + clock.hit_t
            else:
                cnt[FABRIC_MISS] += w
                rdy, dram_free = _fill_ready(clock, cnt, rng, zbuf, t_iss, w, load, dram_free)
                if lines.present[jh]:
                    lines.fill[jh] = rdy
        if lines.present[j]:
            lines.fill[j] = rdy
    if cache.window > 0:
        lines.lrc_t[j] = t
        lines.lrc_ready[j] = rdy
    return rdy, dram_free


@numba.njit(inline="always")
def _half(srrip, sets, cache, clock, lines, slots, cnt, rng, zbuf, s, a, key, h, t, t_iss,
          dram_free):  # pragma: no cover - compiled
    """Access ``a`` of slot ``s`` to the half ``h`` of tile ``key``; returns when its data is
    ready and when DRAM has served every fill so far. An unsampled half-tile costs the slot's
    running mean of sampled loads (at least a hit)."""
    sub = key * cache.n_parts + h
    if not cache.sampled[sub]:
        return t_iss + max(slots.est[s], clock.hit_t), dram_free
    p = cache.part_of[s]
    home = h if cache.n_parts > 1 else p
    sj = cache.set_of[sub] if sets else 0          # the half-tile's set (0: one set)
    if a == O and not cache.stores_miss:
        _store(srrip, cache, lines, cnt, p, home, sub, sj, t)
        return t + clock.hit_t, dram_free
    rdy, dram_free = _load(srrip, cache, clock, lines, cnt, rng, zbuf, p, home, sub, sj, t,
                           t_iss, a != O, dram_free)
    if not cache.all_sampled and a != O:
        slots.est[s] += (rdy - t_iss - slots.est[s]) * (1.0 / 64.0)
    return rdy, dram_free


@numba.njit(inline="always")
def _tile_key(work, i, k, a):  # pragma: no cover - compiled
    """The tile id access ``a`` of step ``k`` of item ``i`` reads (or writes)."""
    if a == Q:
        return work.q_key[i]
    if a == O:
        return work.o_key[i]
    kv = work.length[i] - 1 - k if work.reverse[i] else k
    return (work.k_base if a == K else work.v_base) + work.kv_row[i] + kv


@numba.njit(inline="always")
def _issue(srrip, sets, work, cache, clock, lines, slots, cnt, rng, zbuf, s, t,
           dram_free):  # pragma: no cover - compiled
    """Issue the loads of slot ``s``'s event at ``t``: at an item's first step (or after a
    skip) the prologue, steps st..st+depth; later the one step ``depth`` ahead of the one
    starting; each step's data-ready time goes into the slot's ring (the O store, at the item's
    last step, does not stall the CTA). Returns when DRAM has served every fill so far."""
    i = slots.item[s]
    st = slots.step[s]
    L = work.length[i]
    late = slots.refill[s]
    k_lo = st if st == 0 or late else st + clock.depth
    k_hi = min(st + clock.depth, L - 1)
    m = slots.ring.shape[1] - 1
    for k in range(k_lo, k_hi + 1):
        # a step issued late (after a skip) was due ``st + depth - k`` steps ago
        t_iss = t - (st + clock.depth - k) * slots.skip_m[s] if late else t
        slots.ring[s, k & m] = t_iss + clock.hit_t            # a step lasts at least a hit
        for a in range(Q if k == 0 else K, V + 1):
            key = _tile_key(work, i, k, a)
            for h in range(cache.n_parts):
                rdy, dram_free = _half(srrip, sets, cache, clock, lines, slots, cnt, rng, zbuf,
                                       s, a, key, h, t, t_iss, dram_free)
                if rdy > slots.ring[s, k & m]:
                    slots.ring[s, k & m] = rdy
    if st == L - 1:
        for h in range(cache.n_parts):
            _, dram_free = _half(srrip, sets, cache, clock, lines, slots, cnt, rng, zbuf, s, O,
                                 work.o_key[i], h, t, t, dram_free)
    slots.refill[s] = False
    return dram_free


@numba.njit(inline="always")
def _skip(work, clock, slots, rng, zbuf, s, st, t_end):  # pragma: no cover - compiled
    """Skip ahead to the next step that touches a sampled half-tile (or the item's last step):
    the skipped steps touch only unsampled tiles and cost the running mean. Returns the slot's
    clock and step after the skip."""
    i = slots.item[s]
    L = work.length[i]
    hd = work.kv_row[i] // work.n_kv
    lst = work.samp_kv[work.samp_ptr[hd]:work.samp_ptr[hd + 1]]
    if work.reverse[i]:
        idx = np.searchsorted(lst, L - 1 - st, side="right") - 1
        target = L - 1 - lst[idx] if idx >= 0 else L - 1
    else:
        idx = np.searchsorted(lst, st)
        target = lst[idx] if idx < lst.size else L - 1
    if target > L - 1:
        target = L - 1
    skip = target - st
    if skip > 0:
        # each skipped step lasts the mean load time (at least a hit step) times the slot's
        # speed factor; their jitter factors (mean 1, sd ~jitter) sum to about
        # skip + sqrt(skip) * jitter * z
        m = (clock.compute + max(0.0, max(slots.est[s], clock.hit_t)
                                 - clock.depth * clock.compute)) * slots.rate[s]
        extra = skip * m
        if clock.jitter > 0:
            extra += math.sqrt(skip) * clock.jitter * m * normal(rng, zbuf)
        t_end += max(extra, 0.0)
        st = target
        if clock.depth > 0:                  # the skipped steps' prefetches: issue late
            slots.refill[s] = True
            slots.skip_m[s] = m
    return t_end, st


@numba.njit(inline="always")
def _step_end(work, cache, clock, slots, rng, zbuf, s, t):  # pragma: no cover - compiled
    """When slot ``s``'s step, begun at ``t``, ends: when its loads are ready (not before
    ``t``) plus the compute, times the slot's speed and jitter factors, and then any skip.
    Returns that time and the slot's next step."""
    st = slots.step[s]
    ready = slots.ring[s, st & (slots.ring.shape[1] - 1)]
    if ready < t:
        ready = t
    dur = (ready + clock.compute - t) * slots.rate[s]
    if clock.jitter > 0:
        dur *= step_factor(rng, zbuf)
    t_end = t + dur
    st += 1
    if not cache.all_sampled and 0 < st < work.length[slots.item[s]] - 1:
        t_end, st = _skip(work, clock, slots, rng, zbuf, s, st, t_end)
    return t_end, st


@numba.njit(inline="always")
def _advance(work, slots, s, st, t_end, nxt_cta):  # pragma: no cover - compiled
    """Slot ``s`` to ``t_end`` and step ``st``: past its item's last step on to its next item,
    past its CTA's last item the next CTA in launch order, or, with none left, retired. Returns
    whether it still runs and the next CTA to launch."""
    slots.time[s] = t_end
    leaves = slots.tree_k.size // 2
    if st == work.length[slots.item[s]]:
        st = 0
        i = slots.item[s] + 1
        if i == work.cta_first[slots.cta[s] + 1]:
            nxt_cta = _next_cta(work.cta_first, nxt_cta)
            if nxt_cta == work.cta_first.size - 1:
                tree_replay(slots.tree_k, slots.tree_s, leaves, s, INF_KEY)
                return False, nxt_cta
            slots.cta[s] = nxt_cta
            i = work.cta_first[nxt_cta]
            nxt_cta += 1
        slots.item[s] = i
    slots.step[s] = st
    tree_replay(slots.tree_k, slots.tree_s, leaves, s, slots.keys[s])
    return True, nxt_cta


@numba.njit(cache=True)
def _loop(work, cache, clock, srrip, sets):  # pragma: no cover - compiled
    """Run every event; returns the counters and the makespan."""
    numba.literally(srrip)                   # one compiled loop per policy: no branch per lookup
    numba.literally(sets)                    # and per cache shape: one set, no set lookup
    cnt = np.zeros(len(COUNTERS), np.int64)
    rng = np.zeros(STATE_WORDS, np.int64)     # numpy's legacy normal stream (``gauss``)
    zbuf = np.zeros(BUF_WORDS, np.float64)
    if clock.jitter > 0 or clock.rate_jitter > 0 or clock.fill_sigma > 0:
        seed_rng(rng, zbuf, clock.seed, clock.jitter)
    lines = _new_lines(cache, srrip)
    slots, n, nxt_cta = _new_slots(work, clock, rng, zbuf)
    makespan = _events(srrip, sets, work, cache, clock, lines, slots, cnt, rng, zbuf, n, nxt_cta)
    return cnt, makespan


@numba.njit(cache=True, _nrt=False)
def _events(srrip, sets, work, cache, clock, lines, slots, cnt, rng, zbuf, n,
            nxt_cta):  # pragma: no cover - compiled
    """Every event, earliest clock first, until the last slot retires; returns the makespan.
    Compiled without numba's runtime: it allocates nothing, and with it every read of a state
    array through its named tuple would count a reference (an atomic add) up and down."""
    makespan = 0.0
    dram_free = 0.0                           # when the DRAM queue has served every fill so far
    while n > 0:
        s = slots.tree_s[0]
        t = slots.time[s]
        dram_free = _issue(srrip, sets, work, cache, clock, lines, slots, cnt, rng, zbuf, s, t,
                           dram_free)
        t_end, st = _step_end(work, cache, clock, slots, rng, zbuf, s, t)
        if t_end > makespan:
            makespan = t_end
        alive, nxt_cta = _advance(work, slots, s, st, t_end, nxt_cta)
        if not alive:
            n -= 1
    return makespan


@functools.cache
def entry(srrip: bool, sets: bool):
    """The loop compiled for one replacement policy and cache shape, with the flags as
    constants: each of the four is a function of its own, compiled and cached on disk on first
    use, so a fresh checkout compiles only the policy it runs. Called from Python with the flags
    as plain booleans, ``_loop`` itself would be typed again on every call: ``numba.literally``
    makes the dispatcher type the call with plain booleans first, fail, and only then pick the
    literal specialisation, and that first typing (0.2 s per call) is never cached. ``nogil``:
    cases simulate on threads side by side (``experiments.runner.modes``)."""
    srrip, sets = bool(srrip), bool(sets)

    @numba.njit(cache=True, nogil=True)
    def run_policy(work, cache, clock):  # pragma: no cover - compiled
        return _loop(work, cache, clock, srrip, sets)

    return run_policy


def run(work: Work, cache: Cache, clock: Clock, srrip: bool) -> tuple[np.ndarray, float]:
    """The counters (indexed by ``COUNTERS``' positions) and the makespan of one simulation,
    under SRRIP or LRU replacement, with one set per partition or ``cache.n_sets``."""
    return entry(srrip, cache.n_sets > 1)(work, cache, clock)

"""The timed simulator's event loop, compiled with numba: CTAs advance on their own clocks through
a loser tree of next-event times; every K/V access looks its half-tile up in the partition's
LRU list (or SRRIP buckets), merges with a fill in flight, or misses; the counters it returns are
read by ``analysis.cache.timesim`` (the model, its parameters and the rows).

The helpers the loop calls once or more per access (the loser tree and the replacement lists) are in
``analysis.cache.replacement``. ``_run_policy`` is the one entry: it calls the loop compiled for
the replacement policy and cache shape (one compiled function each, built on first use and cached
on disk), which releases the GIL so that cases run on threads.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from analysis.cache.gauss import BUF_WORDS, STATE_WORDS, normal, step_factor
from analysis.cache.gauss import seed as seed_rng
from analysis.cache.replacement import INF_KEY, _access, _tree_build, _tree_replay

_N_COUNTERS = 10
(_TEX, _HIT, _MISS, _INFL, _MERGED, _FAB, _FHIT, _FMISS, _DRAM, _COLD) = range(_N_COUNTERS)


@numba.njit(cache=True)
def _run(cta_first, length, reverse, q_key, o_key, kv_row, k_base, v_base, wsub, sampled,
         n_parts, resident, cap, miss_t, jitter, seed, window, n_kv, samp_ptr,
         samp_kv, part_of, stores_miss, rate_jitter, srrip,
         speed, set_of, n_sets, sets, dram_svc, depth, compute,
         hit_t, fill_sigma):  # pragma: no cover - compiled
    numba.literally(srrip)                   # one compiled loop per policy: no branch per lookup
    numba.literally(sets)                    # and per cache shape: one set, no set lookup
    nsub = wsub.size
    n_ctas = cta_first.size - 1
    tot = n_parts * nsub
    prev = np.full(tot, -1, np.int64)
    nxt = np.full(tot, -1, np.int64)
    present = np.zeros(tot, np.bool_)
    fill = np.zeros(tot, np.float64)
    lrc_t = np.full(tot if window > 0 else 0, -np.inf)
    lrc_ready = np.zeros(tot if window > 0 else 0)
    seen = np.zeros(nsub, np.bool_)
    lists = n_parts * 4 if srrip else n_parts * n_sets
    head = np.full(lists, -1, np.int64)
    tail = np.full(lists, -1, np.int64)
    pb = np.zeros(tot if srrip else 0, np.int64)       # SRRIP: each entry's list
    age = np.zeros(n_parts, np.int64)
    occ = np.zeros(n_parts * n_sets, np.int64)
    cnt = np.zeros(10, np.int64)
    rng = np.zeros(STATE_WORDS, np.int64)     # numpy's legacy normal stream (``gauss``)
    zbuf = np.zeros(BUF_WORDS, np.float64)
    if jitter > 0 or rate_jitter > 0 or fill_sigma > 0:
        seed_rng(rng, zbuf, seed, jitter)
    sub_rate = False
    for x in range(nsub):
        if not sampled[x]:
            sub_rate = True
            break

    # slots: the CTA, item and step each runs, and its clock
    r = min(resident, n_ctas)
    s_cta = np.zeros(r, np.int64)
    s_item = np.zeros(r, np.int64)
    s_step = np.zeros(r, np.int64)
    time = np.zeros(r, np.float64)
    est = np.ones(r, np.float64)              # running mean load time (sampled mode)
    ring_n = 1                                # each slot's steps issued and not yet computed
    while ring_n < depth + 1:                 # (depth + 1 of them: a power of two that holds
        ring_n *= 2                           # them indexes by a mask, not a division)
    ring_m = ring_n - 1
    ring = np.zeros((r, ring_n), np.float64)  # their data-ready times, by step % ring_n
    refill = np.zeros(r, np.bool_)            # the next event re-issues a prologue (after a skip)
    skip_m = np.zeros(r, np.float64)          # the per-step cost of the last skip
    rate = speed[:r].copy()                   # each slot's (SM's) constant speed factor
    if rate_jitter > 0:
        for s in range(r):
            rate[s] *= math.exp(rate_jitter * normal(rng, zbuf)
                                - 0.5 * rate_jitter * rate_jitter)
    n = 0
    nxt_cta = 0
    for s in range(r):                        # launch order; CTAs without items finish at once
        while nxt_cta < n_ctas and cta_first[nxt_cta + 1] == cta_first[nxt_cta]:
            nxt_cta += 1
        if nxt_cta == n_ctas:
            break
        s_cta[s] = nxt_cta
        s_item[s] = cta_first[nxt_cta]
        n += 1
        nxt_cta += 1
    leaves = 1
    while leaves < n:
        leaves *= 2
    keys = time.view(np.int64)                # the clocks' bits: the loser tree's keys
    tree_k = np.empty(2 * leaves, np.int64)   # the slots' loser tree (``_tree_build``)
    tree_s = np.empty(2 * leaves, np.int64)
    _tree_build(tree_k, tree_s, keys, n, leaves)
    makespan = 0.0
    dram_free = 0.0                           # when the DRAM queue has served every fill so far

    while n > 0:
        s = tree_s[0]
        t = time[s]
        i = s_item[s]
        st = s_step[s]
        L = length[i]
        # the steps whose loads this event issues: at an item's first step (or after a skip) the
        # prologue, steps st..st+depth; later the one step ``depth`` ahead of the one starting
        if st == 0 or refill[s]:
            k_lo = st
        else:
            k_lo = st + depth
        k_hi = min(st + depth, L - 1)
        n_jobs = 3 * (k_hi - k_lo + 1) if k_hi >= k_lo else 0
        for jb in range(n_jobs + 1):
            if jb < n_jobs:
                k = k_lo + jb // 3
                a = jb % 3
                if a == 0 and k != 0:
                    continue
                # a step issued late (after a skip) was due ``st + depth - k`` steps ago
                t_iss = t - (st + depth - k) * skip_m[s] if refill[s] else t
                if a == 0 or (a == 1 and k != 0):
                    ring[s, k & ring_m] = t_iss + hit_t      # a step lasts at least a hit
            else:
                if st != L - 1:
                    continue
                k = st
                a = 3
                t_iss = t
            kv = L - 1 - k if reverse[i] else k
            if a == 0:
                key = q_key[i]
            elif a == 1:
                key = k_base + kv_row[i] + kv
            elif a == 2:
                key = v_base + kv_row[i] + kv
            else:
                key = o_key[i]
            p = part_of[s]
            for h in range(n_parts):
                sub = key * n_parts + h
                sj = set_of[sub] if sets else 0          # the half-tile's set (0: one set)
                if not sampled[sub]:
                    rdy = t_iss + max(est[s], hit_t)   # the mean sampled load, at least a hit
                elif a == 3 and not stores_miss:
                    # a store writes whole sectors: a lookup that never misses (no fill, no DRAM
                    # read); it allocates the line locally and, homed across, at its home
                    w = wsub[sub]
                    j = p * nsub + sub
                    rdy = t + hit_t
                    cnt[0] += w
                    cnt[1] += w
                    if not _access(srrip, j, p * n_sets + sj, w, prev, nxt, head,
                                   tail, pb, age, present, occ, cap, wsub,
                                   p * nsub) and present[j]:
                        fill[j] = t
                    home = h if n_parts > 1 else p
                    if home != p:
                        cnt[5] += w
                        cnt[6] += w
                        jh = home * nsub + sub
                        if not _access(srrip, jh, home * n_sets + sj, w, prev, nxt,
                                       head, tail, pb, age, present, occ, cap, wsub,
                                       home * nsub) and present[jh]:
                            fill[jh] = t
                else:
                    w = wsub[sub]
                    j = p * nsub + sub
                    if window > 0 and t - lrc_t[j] < window:
                        cnt[4] += w                                   # coalesced before L2
                        rdy = max(lrc_ready[j], t_iss + hit_t)
                    else:
                        cnt[0] += w
                        if not seen[sub]:
                            seen[sub] = True
                            cnt[9] += w
                        if _access(srrip, j, p * n_sets + sj, w, prev, nxt, head,
                                   tail, pb, age, present, occ, cap, wsub, p * nsub):
                            cnt[1] += w
                            if fill[j] > t_iss:
                                cnt[3] += w
                                rdy = fill[j]
                            else:
                                rdy = t_iss + hit_t
                        else:
                            cnt[2] += w
                            home = h if n_parts > 1 else p
                            if home == p:
                                rdy = t_iss + miss_t
                                if fill_sigma > 0 and a < 3:   # the fill's latency tail
                                    rdy = t_iss + miss_t * math.exp(
                                        fill_sigma * normal(rng, zbuf))
                                if a < 3:
                                    cnt[8] += w
                                    if dram_svc > 0:
                                        dram_free = max(dram_free, t_iss) + w * dram_svc
                                        rdy = max(rdy, dram_free)
                            else:
                                cnt[5] += w
                                jh = home * nsub + sub
                                if _access(srrip, jh, home * n_sets + sj, w, prev,
                                           nxt, head, tail, pb, age, present, occ, cap, wsub,
                                           home * nsub):
                                    cnt[6] += w
                                    rdy = fill[jh] if fill[jh] > t_iss else t_iss + hit_t
                                else:
                                    cnt[7] += w
                                    rdy = t_iss + miss_t
                                    if fill_sigma > 0 and a < 3:
                                        rdy = t_iss + miss_t * math.exp(
                                            fill_sigma * normal(rng, zbuf))
                                    if a < 3:
                                        cnt[8] += w
                                        if dram_svc > 0:
                                            dram_free = max(dram_free, t_iss) + w * dram_svc
                                            rdy = max(rdy, dram_free)
                                    if present[jh]:
                                        fill[jh] = rdy
                            if present[j]:
                                fill[j] = rdy
                        if window > 0:
                            lrc_t[j] = t
                            lrc_ready[j] = rdy
                    if sub_rate and a < 3:
                        est[s] += (rdy - t_iss - est[s]) * (1.0 / 64.0)
                if a < 3 and rdy > ring[s, k & ring_m]:   # the O store does not stall the CTA
                    ring[s, k & ring_m] = rdy
        refill[s] = False
        ready = ring[s, st & ring_m]
        if ready < t:
            ready = t
        dur = (ready + compute - t) * rate[s]
        if jitter > 0:
            dur *= step_factor(rng, zbuf)
        t_end = t + dur
        st += 1
        if sub_rate and 0 < st < L - 1:
            # skip ahead to the next step that touches a sampled half-tile (or the item's last
            # step): the skipped steps touch only unsampled tiles and cost the running mean
            hd = kv_row[i] // n_kv
            lst = samp_kv[samp_ptr[hd]:samp_ptr[hd + 1]]
            if reverse[i]:
                idx = np.searchsorted(lst, L - 1 - st, side="right") - 1
                target = L - 1 - lst[idx] if idx >= 0 else L - 1
            else:
                idx = np.searchsorted(lst, st)
                target = lst[idx] if idx < lst.size else L - 1
            if target > L - 1:
                target = L - 1
            skip = target - st
            if skip > 0:
                # each skipped step lasts the mean load time (at least a hit step) times the
                # slot's speed factor; their jitter factors (mean 1, sd ~jitter) sum to about
                # skip + sqrt(skip) * jitter * z
                m = (compute + max(0.0, max(est[s], hit_t) - depth * compute)) * rate[s]
                extra = skip * m
                if jitter > 0:
                    extra += math.sqrt(skip) * jitter * m * normal(rng, zbuf)
                t_end += max(extra, 0.0)
                st = target
                if depth > 0:                    # the skipped steps' prefetches: issue late
                    refill[s] = True
                    skip_m[s] = m
        if t_end > makespan:
            makespan = t_end
        time[s] = t_end
        if st == L:
            st = 0
            i += 1
            if i == cta_first[s_cta[s] + 1]:
                while nxt_cta < n_ctas and cta_first[nxt_cta + 1] == cta_first[nxt_cta]:
                    nxt_cta += 1
                if nxt_cta < n_ctas:
                    s_cta[s] = nxt_cta
                    i = cta_first[nxt_cta]
                    nxt_cta += 1
                else:                                   # retire the slot
                    n -= 1
                    _tree_replay(tree_k, tree_s, leaves, s, INF_KEY)
                    continue
            s_item[s] = i
        s_step[s] = st
        _tree_replay(tree_k, tree_s, leaves, s, keys[s])
    return cnt, makespan


def _entry(srrip: bool, sets: bool):
    """The compiled entry of ``_run`` for one policy (``_run_policy``)."""
    return _ENTRIES[bool(srrip), bool(sets)]


def _run_policy(cta_first, length, reverse, q_key, o_key, kv_row, k_base, v_base, wsub, sampled,
                n_parts, resident, cap, miss_t, jitter, seed, window, n_kv, samp_ptr,
                samp_kv, part_of, stores_miss, rate_jitter, srrip,
                speed, set_of, n_sets, sets, dram_svc, depth, compute, hit_t, fill_sigma):
    """``_run`` with its two policy flags passed as constants: each of its four specialisations
    has an entry of its own (``_run_lru``, ``_run_lru_sets``, ``_run_srrip``,
    ``_run_srrip_sets``), compiled and cached on disk on first use, so a fresh checkout compiles
    only the policy it runs (a quarter of the 18 s it took for all four). Called from Python with
    the flags as plain booleans, ``_run`` itself would be typed again on every call:
    ``numba.literally`` makes the dispatcher type the call with plain booleans first, fail, and
    only then pick the literal specialisation, and that first typing (0.2 s per call) is never
    cached. ``nogil``: cases simulate on threads side by side (``experiments.runner.modes``)."""
    return _entry(srrip, sets)(
        cta_first, length, reverse, q_key, o_key, kv_row, k_base, v_base, wsub, sampled, n_parts,
        resident, cap, miss_t, jitter, seed, window, n_kv, samp_ptr, samp_kv, part_of,
        stores_miss, rate_jitter, speed, set_of, n_sets, dram_svc, depth, compute, hit_t,
        fill_sigma)


@numba.njit(cache=True, nogil=True)
def _run_lru(cta_first, length, reverse, q_key, o_key, kv_row, k_base, v_base, wsub, sampled,
             n_parts, resident, cap, miss_t, jitter, seed, window, n_kv, samp_ptr, samp_kv,
             part_of, stores_miss, rate_jitter, speed, set_of, n_sets, dram_svc, depth, compute,
             hit_t, fill_sigma):  # pragma: no cover - compiled
    return _run(cta_first, length, reverse, q_key, o_key, kv_row, k_base, v_base, wsub, sampled,
                n_parts, resident, cap, miss_t, jitter, seed, window, n_kv, samp_ptr, samp_kv,
                part_of, stores_miss, rate_jitter, False, speed, set_of, n_sets, False,
                dram_svc, depth, compute, hit_t, fill_sigma)


@numba.njit(cache=True, nogil=True)
def _run_lru_sets(cta_first, length, reverse, q_key, o_key, kv_row, k_base, v_base, wsub,
                  sampled, n_parts, resident, cap, miss_t, jitter, seed, window, n_kv, samp_ptr,
                  samp_kv, part_of, stores_miss, rate_jitter, speed, set_of, n_sets, dram_svc,
                  depth, compute, hit_t, fill_sigma):  # pragma: no cover - compiled
    return _run(cta_first, length, reverse, q_key, o_key, kv_row, k_base, v_base, wsub, sampled,
                n_parts, resident, cap, miss_t, jitter, seed, window, n_kv, samp_ptr, samp_kv,
                part_of, stores_miss, rate_jitter, False, speed, set_of, n_sets, True,
                dram_svc, depth, compute, hit_t, fill_sigma)


@numba.njit(cache=True, nogil=True)
def _run_srrip(cta_first, length, reverse, q_key, o_key, kv_row, k_base, v_base, wsub, sampled,
               n_parts, resident, cap, miss_t, jitter, seed, window, n_kv, samp_ptr, samp_kv,
               part_of, stores_miss, rate_jitter, speed, set_of, n_sets, dram_svc, depth,
               compute, hit_t, fill_sigma):  # pragma: no cover - compiled
    return _run(cta_first, length, reverse, q_key, o_key, kv_row, k_base, v_base, wsub, sampled,
                n_parts, resident, cap, miss_t, jitter, seed, window, n_kv, samp_ptr, samp_kv,
                part_of, stores_miss, rate_jitter, True, speed, set_of, n_sets, False,
                dram_svc, depth, compute, hit_t, fill_sigma)


@numba.njit(cache=True, nogil=True)
def _run_srrip_sets(cta_first, length, reverse, q_key, o_key, kv_row, k_base, v_base, wsub,
                    sampled, n_parts, resident, cap, miss_t, jitter, seed, window, n_kv, samp_ptr,
                    samp_kv, part_of, stores_miss, rate_jitter, speed, set_of, n_sets, dram_svc,
                    depth, compute, hit_t, fill_sigma):  # pragma: no cover - compiled
    return _run(cta_first, length, reverse, q_key, o_key, kv_row, k_base, v_base, wsub, sampled,
                n_parts, resident, cap, miss_t, jitter, seed, window, n_kv, samp_ptr, samp_kv,
                part_of, stores_miss, rate_jitter, True, speed, set_of, n_sets, True,
                dram_svc, depth, compute, hit_t, fill_sigma)


_ENTRIES = {(False, False): _run_lru, (False, True): _run_lru_sets,
            (True, False): _run_srrip, (True, True): _run_srrip_sets}

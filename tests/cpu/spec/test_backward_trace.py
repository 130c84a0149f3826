"""The backward's visit orders and access streams (spec.backward_trace) against expectations
derived independently: the visit sets from the causal mask element by element, the item order
from the kernels' grid-stride deal, and the dQ stream from the forward's trace."""
from __future__ import annotations

import itertools

import pytest

from spec import CtaSchedule, Problem, ScanOrder, Tiles, build_trace
from spec.backward_trace import (
    backward_visits,
    bytes_per_step,
    pass_grid,
    pass_table,
    pass_trace,
)
from spec.variant import BackwardPass, Variant

PROBLEMS = [
    (Problem(2, 1, 320, 64), Tiles(64, 64)),
    (Problem(1, 2, 300, 64, causal=True), Tiles(64, 64)),         # ragged last tiles
    (Problem(2, 1, 256, 64, causal=True), Tiles(32, 64)),         # TILE_M < TILE_N
    (Problem(1, 1, 256, 64, causal=True), Tiles(64, 32)),         # TILE_M > TILE_N
    (Problem(1, 4, 256, 64, H_kv=2), Tiles(64, 64)),              # GQA: 2 heads per item
]
SCHEDULES = [CtaSchedule.grid(), CtaSchedule.persistent(3), CtaSchedule.persistent(1)]


def _needed(p: Problem, t: Tiles, m: int, n: int) -> bool:
    """Brute force over the mask: does any query row of Q tile m see a key of K/V tile n?"""
    rows = range(m * t.m, min((m + 1) * t.m, p.S_q))
    cols = range(n * t.n, min((n + 1) * t.n, p.S_kv))
    return any(not p.causal or r >= c for r in rows for c in cols)


def _items(p: Problem, t: Tiles, schedule: CtaSchedule):
    """The dK/dV kernel's items per CTA as its while loop deals them: (b, K/V head, K/V tile)
    with K/V tiles fastest, item w to CTA w mod P in round w // P (one item per CTA on a grid)."""
    n_kv = -(-p.S_kv // t.n)
    total = p.B * p.H_kv * n_kv
    P = total if schedule.num_ctas is None else schedule.num_ctas
    out = {c: [] for c in range(min(P, total))}
    for w in range(total):
        bh, n = divmod(w, n_kv)
        out[w % P].append((bh // p.H_kv, bh % p.H_kv, n))
    return out


@pytest.mark.parametrize("p,t", PROBLEMS, ids=lambda x: getattr(x, "label", ""))
@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s.label)
@pytest.mark.parametrize("order", [ScanOrder.linear(), ScanOrder.sawtooth()],
                         ids=lambda o: o.label)
def test_dkdv_visits_are_the_kernel_loops(p, t, schedule, order):
    """Each CTA visits, item by item, exactly the (query head, Q tile) pairs whose rows see the
    item's keys; linear ascending, sawtooth descending (heads too) on every odd item."""
    v = backward_visits(pass_grid(p, t, "dkdv"), schedule, order)
    table = v.table()
    g = p.H // p.H_kv
    n_q = -(-p.S_q // t.m)
    for cta, items in _items(p, t, schedule).items():
        expect = []
        for it, (b, kvh, n) in enumerate(items):
            seq = [(b, h, m, n) for h in range(kvh * g, (kvh + 1) * g) for m in range(n_q)
                   if _needed(p, t, m, n)]
            flip = order == ScanOrder.sawtooth() and it % 2 == 1 and schedule.num_ctas
            expect += seq[::-1] if flip else seq
        got = [tuple(r) for r in table[cta] if r[0] >= 0]
        assert got == expect, (cta, got[:8], expect[:8])


def test_sawtooth_reverses_every_other_owned_tile():
    p, t = Problem(1, 1, 512, 64, causal=True), Tiles(64, 64)
    lin = backward_visits(pass_grid(p, t, "dkdv"), CtaSchedule.persistent(3), ScanOrder.linear())
    saw = backward_visits(pass_grid(p, t, "dkdv"), CtaSchedule.persistent(3),
                          ScanOrder.sawtooth())
    for c in range(3):
        li, si = lin.kv[lin.cta == c], saw.kv[saw.cta == c]
        assert (li == si).all()                          # the same items in the same order
        for k, n in enumerate(dict.fromkeys(li.tolist())):
            lq, sq = lin.q[(lin.cta == c) & (lin.kv == n)], saw.q[(saw.cta == c) & (saw.kv == n)]
            assert sq.tolist() == (lq[::-1] if k % 2 else lq).tolist()


def test_causal_dkdv_reads_only_the_tiles_on_and_below_the_diagonal():
    p, t = Problem(1, 1, 8 * 64, 64, causal=True), Tiles(64, 64)
    v = backward_visits(pass_grid(p, t, "dkdv"), CtaSchedule.persistent(2), ScanOrder.linear())
    assert (v.q >= v.kv).all() and len(v.q) == 8 * 9 // 2


@pytest.mark.parametrize("causal", [False, True])
def test_dq_is_the_forward_scan(causal):
    """The dQ pass's access stream is the forward's key for key (K and V per step, one load and
    one store per item); only the item's load grows by dO, LSE and Δ."""
    p, t = Problem(2, 1, 512, 64, causal=causal), Tiles(64, 64)
    s, o = CtaSchedule.persistent(5), ScanOrder.sawtooth()
    fwd = build_trace(pass_grid(p, t, "dq").grid, s, o, 5)
    dq = pass_trace(pass_grid(p, t, "dq"), s, o, 5)
    assert (fwd.key == dq.key).all()
    n_qt = 2 * 8
    assert (dq.key_sectors[:n_qt] == fwd.key_sectors[:n_qt] * 2 + 16).all()   # + dO + 2x 8
    assert (dq.key_sectors[n_qt:] == fwd.key_sectors[n_qt:]).all()


@pytest.mark.parametrize("p,t", PROBLEMS[:4], ids=lambda x: getattr(x, "label", ""))
def test_dkdv_table_streams_the_visited_tiles(p, t):
    """One CTA (so the trace is its own sequence): the K/V load, then per visit the (Q + LSE)
    and (dO + Δ) keys of the visited Q tile, then the dK/dV store; the sectors add up to the
    bytes each step reads."""
    pg = pass_grid(p, t, "dkdv")
    for order in (ScanOrder.linear(), ScanOrder.sawtooth()):
        v = backward_visits(pg, CtaSchedule.persistent(1), order)
        wt = pass_table(pg, CtaSchedule.persistent(1), order)
        tr = pass_trace(pg, CtaSchedule.persistent(1), order, 1)
        n_q = -(-p.S_q // t.m)
        n_qt = p.B * p.H * n_q
        streamed = tr.key[tr.key < 2 * n_qt]
        assert (streamed[0::2] == (v.b * p.H + v.h) * n_q + v.q).all()
        assert (streamed[1::2] == streamed[0::2] + n_qt).all()
        assert len(tr.key) == len(streamed) + 2 * len(wt.length)
    if p.S_q % t.m == 0:
        assert wt.key_sectors[0] * 32 == bytes_per_step(pg) // 2


def test_causal_gqa_table_is_refused_with_the_reason():
    pg = pass_grid(Problem(1, 4, 256, 64, H_kv=2, causal=True), Tiles(64, 64), "dkdv")
    with pytest.raises(ValueError, match="split"):
        pass_table(pg, CtaSchedule.persistent(2), ScanOrder.linear())
    assert len(backward_visits(pg, CtaSchedule.persistent(2), ScanOrder.linear()).q) > 0


def test_the_backward_schedules_only():
    pg = pass_grid(Problem(1, 1, 256, 64), Tiles(64, 64), "dq")
    with pytest.raises(ValueError, match="grid launch or P persistent"):
        pass_table(pg, CtaSchedule.tile_x(2), ScanOrder.linear())


def test_pass_variant_ids_round_trip():
    for bwd, order in itertools.product(BackwardPass, ("linear", "sawtooth")):
        v = Variant.parse(f"cutile.{order}.static132.m64n64d64.occ2.{bwd.value}")[0]
        assert v.bwd == bwd and v.id(Problem(1, 1, 64, 64)).endswith(f".occ2.{bwd.value}")
    assert Variant.parse("cutile.linear.grid.m64n64d64")[0].bwd is None
    with pytest.raises(ValueError, match="cuTile family only"):
        Variant.parse("cuda.linear.grid.m64n64d64.dq")


def test_dkdv_misses_fall_with_the_sawtooth_when_the_stream_outgrows_the_cache():
    """The locality argument on a small case: 4 CTAs in lock-step, 32 K/V tiles (8 rounds) each
    scanning the 32 Q tiles of the head (264 sectors of Q + LSE and as many of dO + delta per
    step). With room for 20 steps, 8 of them taken by the 4 CTAs' K/V loads and dK/dV stores,
    the linear scan re-reads the whole stream every round (the LRU cliff: exactly every access
    misses once per round), the sawtooth re-reads only what the last scan did not keep."""
    from analysis.cache import l2sim
    pg = pass_grid(Problem(1, 1, 32 * 64, 64), Tiles(64, 64), "dkdv")
    cap = 20 * bytes_per_step(pg)
    m = {o: l2sim.simulate(pass_trace(pg, CtaSchedule.persistent(4), ScanOrder.parse(o), 4),
                           cap).misses for o in ("linear", "sawtooth")}
    per_step, kv_and_store = 2 * 264, 32 * 2 * 512
    assert m["linear"] == 8 * 32 * per_step + kv_and_store
    assert m["sawtooth"] <= (32 + 7 * 20) * per_step + kv_and_store < 0.75 * m["linear"], m

"""The cuTile scheduler (``kernels.device.work``) run as plain Python: its helpers are inlined
by the cuTile front end, and with the few ``ct`` calls they make replaced by integer arithmetic
they walk on the CPU exactly what a CTA walks on the GPU. Every schedule's iterator deals the
items ``spec.CtaSchedule.work_items`` defines (CTA, local counter, head, Q tile), and the tile
ranges equal ``spec.TileGrid``'s, so the GPU trace tests check the kernels' loops and scans, not
this arithmetic."""
from __future__ import annotations

import types

import pytest

from spec import Problem
from spec.problem import TileGrid, Tiles
from spec.schedules import CtaSchedule, ScheduleKind

work = pytest.importorskip("kernels.device.work")


def _shim(n_ctas: int):
    return types.SimpleNamespace(minimum=min, cdiv=lambda a, b: -(-a // b),
                                 num_blocks=lambda axis: n_ctas)


def _walk(sched: CtaSchedule, g: TileGrid, monkeypatch) -> list[tuple[int, int, int, int]]:
    """(cta, iter, bh, q) of every item, CTA by CTA, as the kernel bodies walk the iterator."""
    n_ctas = sched.grid_size(g)
    monkeypatch.setattr(work, "ct", _shim(n_ctas))
    code = int(sched.kind)
    x, sec = sched.tiles_per_cta, sched.section or 1
    out = []
    for cta in range(n_ctas):
        ws = work.work_start(cta, g.n_q, g.n_bh, code, x, sec)
        args = (cta, g.n_q, g.n_bh, code, int(sched.work_order))
        if work.one_item(code):
            out.append((cta, 0, work.work_bh(ws, 0, *args), work.work_tile(ws, 0, *args)))
            continue
        bound = work.work_bound(ws, g.n_q, code, x)
        it = 0
        while work.work_valid(ws, it, bound, code):
            if work.work_live(ws, it, cta, code):
                out.append((cta, it, work.work_bh(ws, it, *args), work.work_tile(ws, it, *args)))
            it += 1
    return out


SCHEDULES = ["grid", "tile2", "tile3", "static7", "static7h", "lpt7", "glpt3", "snake7", "snake5"]


@pytest.mark.parametrize("label", SCHEDULES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_iterator_deals_the_spec_work_items(label, causal, monkeypatch):
    g = TileGrid(Problem(B=2, H=3, S_q=700, S_kv=700, D=64, causal=causal), Tiles(64, 64))
    sched = CtaSchedule.parse(label)
    w = sched.work_items(g)
    want = sorted(zip(w.cta.tolist(), w.iter.tolist(), w.bh.tolist(), w.q.tolist()))
    assert sorted(_walk(sched, g, monkeypatch)) == want


def test_the_prefetch_peek_is_the_next_item_clamped(monkeypatch):
    g = TileGrid(Problem(B=1, H=2, S_q=640, D=64), Tiles(64, 64))       # 20 items, P = 7
    monkeypatch.setattr(work, "ct", _shim(7))
    code = int(ScheduleKind.SNAKE)
    for cta in range(7):
        ws = work.work_start(cta, g.n_q, g.n_bh, code, 1, 1)
        for it in range(3):
            args = (cta, g.n_q, g.n_bh, code, 0)
            item = (work.work_bh(ws, it, *args), work.work_tile(ws, it, *args))
            peek = work.work_peek(ws, it, *args)
            live = work.work_live(ws, it, cta, code)
            assert peek == (item if live else (1, 9))   # clamped to item 19: head 1, tile 9


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("tiles", [Tiles(64, 64), Tiles(128, 64), Tiles(64, 128)],
                         ids=lambda t: f"{t.m}x{t.n}")
@pytest.mark.parametrize("s_kv", [700, 768])
def test_tile_ranges_are_the_spec_tile_grids(causal, tiles, s_kv, monkeypatch):
    """``kv_range`` (forward, dQ) and its mirror ``q_range`` (dK/dV) against ``TileGrid``."""
    monkeypatch.setattr(work, "ct", _shim(1))
    g = TileGrid(Problem(B=1, H=1, S_q=s_kv if causal else 500, S_kv=s_kv, D=64,
                         causal=causal), tiles)
    even = g.problem.S_kv % tiles.n == 0
    for i in range(g.n_q):
        tc, first = work.kv_range(i, g.problem.S_q, g.n_kv, tiles.m, tiles.n, causal, even)
        assert (tc, first) == (g.kv_tiles_for(i), g.first_masked_kv_tile(i))
    for j in range(g.n_kv):
        m_start, m_full = work.q_range(j, g.n_q, tiles.m, tiles.n, causal)
        assert g.n_q - m_start == g.q_tiles_for(j) and m_start <= m_full <= g.n_q

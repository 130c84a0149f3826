"""The split-K/V decode on the CPU: a NumPy model of the kernels' arithmetic
(``kernels.device.decode``: each split's online softmax in exp2 over its chunk of K/V tiles with
the finite mask, dead rows written as lse = −inf, the combine's online merge) against a direct
float64 softmax, including splits that see nothing, ragged lengths (0, below S_q, NaN in the
cache past the length), top-left and bottom-right causal; and the work model's properties
(``spec.decode.choose_splits``)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from spec import decode as sd

NEG_BIG = -2.0 ** 100
DEAD = -2.0 ** 80
LOG2E = 1.0 / math.log(2.0)


def packing(G, S_q):
    """An independent restatement of ``spec.decode.packing`` (checked equal below)."""
    sqp = 1
    while sqp < S_q:
        sqp *= 2
    hg = 1
    while G % (hg * 2) == 0 and hg * 2 * sqp <= 64:
        hg *= 2
    while hg * sqp < 16:
        sqp *= 2
    return hg, sqp


def model(q, k, v, lens, causal, bottom_right, splits, tile_n):
    """The kernels' arithmetic in float32 (inputs rounded as fp16 would be is not modelled: the
    order of operations is). q [B,H,S_q,D], k/v [B,H_kv,S_kv,D], lens [B]."""
    B, H, S_q, D = q.shape
    H_kv, S_kv = k.shape[1], k.shape[2]
    G = H // H_kv
    hg, sqp = packing(G, S_q)
    scale = np.float32(LOG2E / math.sqrt(D))
    n = sd.n_tiles(S_kv, tile_n)
    opart = np.zeros((splits, B, H, S_q, D), np.float32)
    lpart = np.zeros((splits, B, H, S_q), np.float32)
    M = hg * sqp
    for b in range(B):
        L = min(int(lens[b]), S_kv)
        off = L - S_q if (causal and bottom_right) else 0
        kend = min(L, off + S_q) if causal else L
        full = min(L, off + 1) if causal else L
        n_full = max(full, 0) // tile_n
        for hu in range(H // hg):
            kvh = hu * hg // G
            qq = np.zeros((hg, sqp, D), np.float32)
            qq[:, :S_q] = q[b, hu * hg:(hu + 1) * hg]
            qq = qq.reshape(M, D)
            row = np.arange(M) % sqp
            lim = (off + row)[:, None]
            for s in range(splits):
                m = np.full((M, 1), -np.inf, np.float32)
                l = np.zeros((M, 1), np.float32)
                acc = np.zeros((M, D), np.float32)
                for j in sd.split_tiles(s, n, splits, -(-max(kend, 0) // tile_n)):
                    kt = np.zeros((tile_n, D), np.float32)
                    vt = np.zeros((tile_n, D), np.float32)
                    hi = min((j + 1) * tile_n, S_kv)
                    kt[:hi - j * tile_n] = k[b, kvh, j * tile_n:hi]
                    vt[:hi - j * tile_n] = v[b, kvh, j * tile_n:hi]
                    qk = qq @ kt.T
                    if j >= n_full:           # the masked loop
                        offs = j * tile_n + np.arange(tile_n)
                        keep = offs[None, :] < L
                        if causal:
                            keep = keep & (offs[None, :] <= lim)
                        qk = np.where(keep, qk, NEG_BIG).astype(np.float32)
                        vt = np.where((offs < L)[:, None], vt, 0.0).astype(np.float32)
                    with np.errstate(invalid="ignore", over="ignore"):
                        m_new = np.maximum(m, qk.max(-1, keepdims=True) * scale)
                        p = np.exp2(qk * scale - m_new)
                        alpha = np.exp2(m - m_new)
                    l = l * alpha + p.sum(-1, keepdims=True)
                    acc = acc * alpha + p @ vt
                    m = m_new
                dead = m < DEAD
                with np.errstate(invalid="ignore", divide="ignore"):
                    o = np.where(dead, 0.0, acc / np.where(dead, 1.0, l))
                    lse = np.where(dead, -np.inf, m + np.log2(np.where(dead, 1.0, l)))
                o = o.reshape(hg, sqp, D)[:, :S_q]
                opart[s, b, hu * hg:(hu + 1) * hg] = o
                lpart[s, b, hu * hg:(hu + 1) * hg] = lse.reshape(hg, sqp)[:, :S_q]
    return combine(opart, lpart)


def combine(opart, lpart, chunk=None):
    """``decode_combine``: the online merge over chunks of ``chunk`` splits (default
    ``spec.decode.merge_chunk``), splits past the last padded with LSE −inf and output 0."""
    from spec.decode import merge_chunk
    n = opart.shape[0]
    ch = chunk or merge_chunk(n, opart.shape[-1])
    pad = -n % ch
    opart = np.concatenate([opart, np.zeros((pad,) + opart.shape[1:], np.float32)])
    lpart = np.concatenate([lpart, np.full((pad,) + lpart.shape[1:], -np.inf, np.float32)])
    m = np.full(lpart.shape[1:] + (1,), -np.inf, np.float32)
    l = np.zeros_like(m)
    acc = np.zeros(opart.shape[1:], np.float32)
    for c in range(0, n + pad, ch):
        lse = lpart[c:c + ch][..., None]                      # [ch, ..., 1]
        m_new = np.maximum(m, lse.max(axis=0))
        m_safe = np.where(m_new == -np.inf, 0.0, m_new)
        alpha = np.exp2(m - m_safe)
        w = np.exp2(lse - m_safe)
        acc = acc * alpha + (opart[c:c + ch] * w).sum(axis=0)
        l = l * alpha + w.sum(axis=0)
        m = m_new
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(l > 0, acc / np.where(l > 0, l, 1.0), 0.0)


def reference(q, k, v, lens, causal, bottom_right):
    """Direct float64 softmax; a row that sees no key is 0."""
    B, H, S_q, D = q.shape
    G = H // k.shape[1]
    out = np.zeros(q.shape)
    for b in range(B):
        L = int(lens[b])
        for h in range(H):
            kk = k[b, h // G, :L].astype(np.float64)
            vv = v[b, h // G, :L].astype(np.float64)
            for r in range(S_q):
                last = (L - S_q + r if bottom_right else r) if causal else L - 1
                last = min(last, L - 1)
                if last < 0:
                    continue
                sc = kk[:last + 1] @ q[b, h, r].astype(np.float64) / math.sqrt(D)
                p = np.exp(sc - sc.max())
                out[b, h, r] = p @ vv[:last + 1] / p.sum()
    return out


def _inputs(rng, B, H, H_kv, S_q, S_kv, D):
    q = rng.standard_normal((B, H, S_q, D)).astype(np.float32)
    k = rng.standard_normal((B, H_kv, S_kv, D)).astype(np.float32)
    v = rng.standard_normal((B, H_kv, S_kv, D)).astype(np.float32)
    return q, k, v


CASES = [  # B, H, H_kv, S_q, S_kv, D, causal, bottom_right, splits, tile_n, lens
    (1, 4, 1, 1, 1000, 64, False, False, 4, 64, None),
    (2, 8, 2, 4, 777, 64, True, True, 5, 64, None),
    (2, 4, 4, 3, 300, 64, True, False, 3, 64, None),      # top-left: only split 0 sees keys
    (1, 2, 1, 16, 130, 64, True, True, 40, 32, None),     # more splits than tiles: empty ones
    (3, 6, 2, 2, 500, 64, True, True, 4, 64, (500, 1, 0)),  # ragged: full, one key, empty
    (4, 8, 1, 5, 640, 64, True, True, 6, 64, (3, 640, 129, 64)),  # L < S_q: early rows dead
    (2, 4, 2, 1, 513, 128, False, False, 7, 64, (257, 513)),
]


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_split_merge_matches_softmax(case):
    B, H, H_kv, S_q, S_kv, D, causal, br, splits, tile_n, lens = case
    rng = np.random.default_rng(sum(case[:6]))
    q, k, v = _inputs(rng, B, H, H_kv, S_q, S_kv, D)
    lens = np.full(B, S_kv) if lens is None else np.array(lens)
    for b in range(B):          # the cache past a sequence's length holds garbage, NaN included
        k[b, :, lens[b]:] = np.nan
        v[b, :, lens[b]:] = np.nan
    got = model(q, k, v, lens, causal, br, splits, tile_n)
    want = reference(q, k, v, lens, causal, br)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)


def test_one_split_equals_many():
    """The merge changes rounding only: 1 split and 9 splits agree to float32 rounding."""
    rng = np.random.default_rng(3)
    q, k, v = _inputs(rng, 1, 8, 2, 4, 1111, 64)
    lens = np.array([1111])
    a = model(q, k, v, lens, True, True, 1, 64)
    b = model(q, k, v, lens, True, True, 9, 64)
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_all_splits_dead_row_is_zero():
    opart = np.full((3, 1, 1, 2, 4), 7.0, np.float32)
    lpart = np.full((3, 1, 1, 2), -np.inf, np.float32)
    lpart[1, 0, 0, 1] = 0.5                      # row 1 seen by split 1 only
    out = combine(opart, lpart)
    assert (out[0, 0, 0] == 0).all() and np.allclose(out[0, 0, 1], 7.0)


def test_packing_matches_the_shared_definition():
    from spec.decode import packing as shared
    for G in (1, 2, 3, 4, 6, 8, 16, 32):
        for S_q in range(1, 17):
            hg, sqp = shared(G, S_q)
            assert (hg, sqp) == packing(G, S_q)
            assert G % hg == 0 and sqp >= S_q and 16 <= hg * sqp <= 64
            assert hg * sqp & (hg * sqp - 1) == 0


# ------------------------------------------------------------------------------------------------
# the work model
# ------------------------------------------------------------------------------------------------
SLOTS = 132


def _choose(B, H_kv, S_kv, *, H=None, S_q=1, D=128, tile_n=64, chunks=1, slots=SLOTS):
    return sd.choose_splits(B=B, H=H or H_kv * 4, H_kv=H_kv, S_q=S_q, S_kv=S_kv, D=D, elt=2,
                            tile_n=tile_n, head_chunks=chunks, slots=slots)


GRID = [(B, H_kv, S) for B in (1, 2, 3, 4, 7, 16, 33, 64) for H_kv in (1, 2, 8, 32)
        for S in (64, 1000, 4096, 8192, 33000, 131072)]


def test_never_more_splits_than_tiles():
    for B, H_kv, S in GRID:
        s = _choose(B, H_kv, S)
        n = sd.n_tiles(S, 64)
        assert 1 <= s <= sd.max_splits(n) <= max(1, n)
        assert s == 1 or sd.chunk_of(n, s) >= sd.MIN_TILES_PER_SPLIT - 1


def test_fills_the_gpu():
    """Unless the tiles cap the splits, the chosen launch keeps at least half of the slots of
    its waves busy, and a single split is kept when one wave is already full."""
    for B, H_kv, S in GRID:
        s = _choose(B, H_kv, S)
        n = sd.n_tiles(S, 64)
        units = B * H_kv
        waves = -(-units * s // SLOTS)
        if s < sd.max_splits(n):
            assert units * s / (waves * SLOTS) >= 0.5, (B, H_kv, S, s)
        if units % SLOTS == 0:
            assert s == 1


def test_more_work_is_never_predicted_faster():
    """The predicted time of the chosen split count grows with the cache and with the batch."""
    def t(B, S):
        n = sd.n_tiles(S, 64)
        s = _choose(B, 8, S)
        return sd.predicted_cost(s, units=B * 8, n=n, slots=SLOTS, tile_bytes=2 * 64 * 128 * 2,
                                 merge_bytes_per_split=B * 32 * 128 * 4)
    for B in (1, 4, 16):
        ts = [t(B, S) for S in range(1024, 140000, 4096)]
        assert all(a <= b * (1 + 1e-9) for a, b in zip(ts, ts[1:]))
    for S in (2048, 32768):
        ts = [t(B, S) for B in range(1, 80)]
        assert all(a <= b * (1 + 1e-9) for a, b in zip(ts, ts[1:]))


def test_splits_grow_with_the_cache_when_the_gpu_is_empty():
    """One K/V head (B = H_kv = 1): the splits never fall by more than the chunk rounding as the
    cache grows, and reach a full wave on a long cache."""
    prev = 1
    for S in range(1024, 300000, 1024):
        s = _choose(1, 1, S)
        assert s >= 0.75 * prev
        prev = max(prev, s)
    assert _choose(1, 1, 131072) >= SLOTS * 0.9


def test_worked_example():
    """spec.decode's docstring: B=1, H=32/8, 32K keys, D=128 on 132 slots: 16 splits."""
    assert _choose(1, 8, 32768, H=32) == 16


def test_schedule_labels():
    assert sd.DecodeSchedule.parse("decode") == sd.DecodeSchedule(0)
    assert sd.DecodeSchedule.parse("decode12").splits == 12
    assert sd.DecodeSchedule.parse("grid") is None and sd.DecodeSchedule.parse(None) is None
    assert sd.DecodeSchedule.parse("decode12").label == "decode12"
    for bad in ("decode0", "decodex", "decode-1"):
        with pytest.raises(sd.BadDecodeSchedule):
            sd.DecodeSchedule.parse(bad)


# ------------------------------------------------------------------------------------------------
# routing and the launch plan (kernels.host.backend.decode_choice, kernels.host.decode.plan)
# ------------------------------------------------------------------------------------------------
def _problem(**kw):
    from spec.problem import Problem
    base = dict(B=1, H=32, S_q=1, D=128, S_kv=32768, H_kv=8)
    base.update(kw)
    return Problem(**base)


def test_routing_is_inference_only_and_behind_the_schedule_knob():
    pytest.importorskip("cuda.tile")
    from kernels.host.backend import decode_choice
    from spec.family import UnsupportedVariant
    pr = _problem()
    kw = dict(order="linear", tiles=None, level=6)
    assert decode_choice(pr, schedule=None, save_lse=False, **kw) == sd.DecodeSchedule(0)
    assert decode_choice(pr, schedule=None, save_lse=True, **kw) is None      # training
    assert decode_choice(pr, schedule="grid", save_lse=False, **kw) is None   # split-Q kept
    assert decode_choice(pr, schedule=None, save_lse=False, order="sawtooth", tiles=None,
                         level=6) is None
    assert decode_choice(_problem(S_q=17), schedule=None, save_lse=False, **kw) is None
    assert decode_choice(pr, schedule="decode5", save_lse=False, **kw).splits == 5
    with pytest.raises(UnsupportedVariant):
        decode_choice(pr, schedule="decode", save_lse=True, **kw)
    with pytest.raises(UnsupportedVariant):
        decode_choice(_problem(S_q=64), schedule="grid", save_lse=False, lengths=True, **kw)


def test_default_variant_resolves_decode_too():
    """The one place a default is resolved gives an inference call of a few rows the decode
    plan, a training call (and a longer query block) the split-Q forward."""
    pytest.importorskip("cuda.tile")
    from kernels.host.backend import default_variant
    from kernels.host.decode import DecodePlan, plan
    from spec import Variant, get_arch
    from spec.variant import Training
    h100 = get_arch("h100")
    assert default_variant(_problem(), h100) == plan(_problem(), h100.num_sms)
    assert isinstance(default_variant(_problem(), h100, schedule="decode3"), DecodePlan)
    assert isinstance(default_variant(_problem(), h100, training=True), Training)
    assert isinstance(default_variant(_problem(S_q=64), h100), Variant)


def test_plan():
    pytest.importorskip("cuda.tile")
    from kernels.host.decode import plan
    p = plan(_problem(), 132)
    assert (p.tile_n, p.hg, p.sqp, p.splits) == (128, 4, 4, 16)
    assert p.grid == (16, 8, 1)
    p = plan(_problem(H=32, H_kv=1, S_q=16, D=64), 132, splits=3)
    assert (p.tile_n, p.hg, p.sqp, p.splits, p.head_chunks) == (128, 4, 16, 3, 8)
    assert p.grid == (3, 8, 1)

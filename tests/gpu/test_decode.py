"""GPU tests of the split-K/V decode kernels of both families (``kernels.device.decode``,
``cuda_baseline/device/decode.cuh``) through their ``attention()`` and eager backends, skipped
without a GPU.

Every case draws fresh seeded inputs, poisons the output (and, through
``tests.gpu.poison.poisoned_allocations``, the fp32 split partials) with NaN before the call and
compares with an fp32 reference: SDPA on upcast inputs (``is_causal`` top-left, the front's
meaning when no lengths are given) or, with ``kv_lengths``, an explicit per-sequence
bottom-right mask (a row that sees no key is 0). The error bar is the design's: at most twice
PyTorch's own half-precision SDPA error plus a small absolute term; NaN never passes. The cache
past a sequence's length is filled with NaN: a kernel that read it would fail. ``prewarm()``
compiles both families' builds of the matrices in worker processes before the first test.
"""
from __future__ import annotations

import zlib

import pytest

from spec import Problem
from tests.pairwise import pairwise

# What the decode kernel specialises on is the group packing (query heads per K/V head × query
# rows: ``spec.decode.packing``), the head dimension, the mask (none, top-left causal, bottom-right
# causal with lengths), one split or several (the cache length and batch decide it) and the
# dtype. Every packing of (group, S_q) meets every value of every other axis (pairwise,
# tests/pairwise.py), so each compiled kernel the matrix reaches is tested and no axis pair is
# left out, in about a tenth of the full product's builds.
GROUPS_ROWS = [(hk, s_q) for hk in ((32, 8), (32, 32), (16, 1)) for s_q in (1, 4, 16)]
MATRIX = [dict(B=B, H=H, H_kv=H_kv, S_kv=S_kv, S_q=S_q, D=D, causal=causal, dtype=dt)
          for ((H, H_kv), S_q), S_kv, B, D, causal, dt in pairwise(
              [GROUPS_ROWS, (1000, 8192, 33000), (1, 4), (64, 128), (False, True),
               ("fp16", "bf16")])]
RAGGED = [dict(B=4, H=H, H_kv=H_kv, S_kv=S_kv, S_q=S_q, D=D, causal=causal, dtype=dt)
          for ((H, H_kv), S_q), S_kv, D, causal, dt in pairwise(
              [[g for g in GROUPS_ROWS if g[0] != (32, 32)], (1000, 33000), (64, 128),
               (False, True), ("fp16", "bf16")])]


def _problems(cases):
    return [Problem(B=c["B"], H=c["H"], H_kv=c["H_kv"], S_q=c["S_q"], S_kv=c["S_kv"], D=c["D"],
                    dtype=c["dtype"], causal=c["causal"]) for c in cases]


FAMILIES = ("cutile", "cuda")
SPLITS_CASE = dict(B=2, H=32, H_kv=8, S_kv=8192, S_q=4, D=128, causal=True)
GRAPH_CASE = dict(B=2, H=16, H_kv=4, S_kv=4096, S_q=1, D=128, causal=True)


def _family(name: str):
    """(public attention, eager backend module with ``attention`` and ``launch_for``, the
    family's decode launch class)."""
    if name == "cutile":
        from kernels import attention
        from kernels.host import backend
        from kernels.host.decode import DecodeLaunch
        return attention, backend, DecodeLaunch
    from cuda_baseline import attention
    from cuda_baseline.host import launch
    from cuda_baseline.host.decode import DecodeLaunch
    return attention, launch, DecodeLaunch


def cuda_instances(sms: int) -> list:
    """The CUDA family's decode builds the tests launch (the plan's split kernel per case,
    bottom-right where lengths are given; one and several splits for the explicit counts)."""
    from cuda_baseline.host.decode import plan
    out = [plan(p, sms).instance() for p in _problems(MATRIX)]
    out += [plan(p, sms).instance(bottom_right=True) for p in _problems(RAGGED)]
    sp = _problems([dict(SPLITS_CASE, dtype="bf16")])[0]
    out += [plan(sp, sms, s).instance() for s in (0, 1, 7)]
    out += [plan(_problems([dict(GRAPH_CASE, dtype="bf16")])[0], sms).instance(bottom_right=True)]
    return list(dict.fromkeys(out))


def prewarm() -> list[str]:
    """Every decode build the tests launch (the plan's splits on this GPU), both families,
    compiled in worker processes into cuda.tile's and CuPy's disk caches."""
    import torch

    from cuda_baseline.host.decode import precompile
    from kernels.host.warm import decode_job, warm_decode
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    jobs = [decode_job(p, sms) for p in _problems(MATRIX)]
    jobs += [decode_job(p, sms, lengths=True) for p in _problems(RAGGED)]
    errors = warm_decode(jobs)
    try:
        precompile(cuda_instances(sms))
    except Exception as e:  # noqa: BLE001 - the tests that need the build fail with its log
        errors.append(f"CUDA decode: {type(e).__name__}: {str(e)[:300]}")
    return errors


def _inputs(c, seed, lengths=None):
    import torch
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[c.get("dtype", "bf16")]
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(c["B"], c["H"], c["S_q"], c["D"], device="cuda", dtype=dt, generator=g)
    k = torch.randn(c["B"], c["H_kv"], c["S_kv"], c["D"], device="cuda", dtype=dt, generator=g)
    v = torch.randn(c["B"], c["H_kv"], c["S_kv"], c["D"], device="cuda", dtype=dt, generator=g)
    if lengths is not None:
        for b, L in enumerate(lengths):
            k[b, :, L:] = float("nan")
            v[b, :, L:] = float("nan")
    return q, k, v


def _masked_reference(q, k, v, lengths, causal):
    """fp32 attention with each sequence's length and bottom-right causal mask; rows that see
    no key are 0. Returns (fp32 reference, the same computed in q's dtype)."""
    import torch
    B, H, S_q, D = q.shape
    G = H // k.shape[1]
    S_kv = k.shape[2]

    def run(dt):
        qq, kk, vv = (t.to(dt) for t in (q, k, v))
        kk = torch.nan_to_num(kk.repeat_interleave(G, 1))
        vv = torch.nan_to_num(vv.repeat_interleave(G, 1))
        s = (qq @ kk.transpose(-1, -2)).float() / D ** 0.5            # [B, H, S_q, S_kv]
        L = torch.tensor(lengths, device=q.device).view(B, 1, 1, 1)
        n = torch.arange(S_kv, device=q.device).view(1, 1, 1, S_kv)
        keep = n < L
        if causal:
            r = torch.arange(S_q, device=q.device).view(1, 1, S_q, 1)
            keep = keep & (n <= L - S_q + r)
        s = s.masked_fill(~keep, float("-inf"))
        p = torch.softmax(s, -1).nan_to_num(0.0)
        return (p.to(dt) @ vv).float()
    return run(torch.float32), run(q.dtype)


def _check(out, ref, half, what):
    import torch
    assert not torch.isnan(out).any(), f"{what}: NaN in the output"
    err = (out.float() - ref).abs().max().item()
    base = (half.float() - ref).abs().max().item()
    tol = 2 * base + (2e-3 if out.dtype == torch.bfloat16 else 1e-3)
    assert err <= tol, f"{what}: max error {err:.3g} > {tol:.3g} (half-precision peer {base:.3g})"


@pytest.mark.parametrize("c", MATRIX, ids=[
    f"b{c['B']}-h{c['H']}x{c['H_kv']}-kv{c['S_kv']}-q{c['S_q']}-d{c['D']}-{c['dtype']}"
    f"{'-causal' if c['causal'] else ''}" for c in MATRIX])
@pytest.mark.parametrize("family", FAMILIES)
def test_decode_matches_reference(family, c):
    import torch
    import torch.nn.functional as F

    from tests.gpu.poison import poisoned_allocations, unwritten
    attention, backend, DecodeLaunch = _family(family)
    seed = zlib.crc32(repr(sorted(c.items())).encode())
    q, k, v = _inputs(c, seed)
    assert isinstance(backend.launch_for(q, k, v, c["causal"]), DecodeLaunch)
    with torch.no_grad():
        attention(q, k, v, causal=c["causal"])              # the launch set up, outside
        out = torch.full_like(q, float("nan"))
        with poisoned_allocations() as made:
            attention(q, k, v, causal=c["causal"], out=out)
            torch.cuda.synchronize()
            bad = unwritten(made, c["S_q"])
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                             is_causal=c["causal"], enable_gqa=True)
        half = F.scaled_dot_product_attention(q, k, v, is_causal=c["causal"], enable_gqa=True)
    assert not bad, f"partials left unwritten: {bad}"
    _check(out, ref, half, str(c))


@pytest.mark.parametrize("c", RAGGED, ids=[
    f"h{c['H']}x{c['H_kv']}-kv{c['S_kv']}-q{c['S_q']}-d{c['D']}-{c['dtype']}"
    f"{'-causal' if c['causal'] else ''}" for c in RAGGED])
@pytest.mark.parametrize("family", FAMILIES)
def test_ragged_lengths(family, c):
    import torch

    from tests.gpu.poison import poisoned_allocations, unwritten
    attention = _family(family)[1].attention
    seed = zlib.crc32(repr(sorted(c.items())).encode()) + 1
    S = c["S_kv"]
    lengths = [S, 0, max(1, c["S_q"] // 2), (seed % (S - 1)) + 1]     # full, empty, < S_q, any
    q, k, v = _inputs(c, seed, lengths)
    lens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    attention(q, k, v, causal=c["causal"], kv_lengths=lens)
    out = torch.full_like(q, float("nan"))
    with poisoned_allocations() as made:
        attention(q, k, v, causal=c["causal"], kv_lengths=lens, out=out)
        torch.cuda.synchronize()
        bad = unwritten(made, c["S_q"])
    assert not bad, f"partials left unwritten: {bad}"
    ref, half = _masked_reference(q, k, v, lengths, c["causal"])
    _check(out, ref, half, f"{c} lengths {lengths}")
    assert (out[1] == 0).all(), "an empty sequence must give zeros"


@pytest.mark.parametrize("family", FAMILIES)
def test_explicit_splits_agree_and_split_q_is_reachable(family):
    """decode1 (no merge), decode7, the work model's split count and the split-Q forward
    (schedule="grid") give the same result to rounding."""
    _, backend, DecodeLaunch = _family(family)
    q, k, v = _inputs(SPLITS_CASE, 7)
    outs = {s: backend.attention(q, k, v, causal=True, schedule=s)
            for s in ("decode1", "decode7", "decode", None, "grid")}
    assert not isinstance(backend.launch_for(q, k, v, True, schedule="grid"), DecodeLaunch)
    assert backend.launch_for(q, k, v, True, schedule="decode7").plan.splits == 7
    for s, o in outs.items():
        assert (o.float() - outs["grid"].float()).abs().max().item() < 2e-2, s


@pytest.mark.parametrize("family", FAMILIES)
def test_training_keeps_the_split_q_forward(family):
    import torch
    attention, backend, DecodeLaunch = _family(family)
    c = dict(B=1, H=8, H_kv=2, S_kv=1000, S_q=4, D=64, causal=False)
    q, k, v = _inputs(c, 11)
    assert isinstance(backend.launch_for(q, k, v, False), DecodeLaunch)
    q.requires_grad_(True)
    out = attention(q, k, v)
    out.float().sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


@pytest.mark.parametrize("family", FAMILIES)
def test_bad_lengths_refused_in_one_line(family):
    import torch

    from spec.family import BadInput, UnsupportedVariant
    attention = _family(family)[1].attention
    c = dict(B=2, H=8, H_kv=2, S_kv=1000, S_q=1, D=64, causal=False)
    q, k, v = _inputs(c, 5)
    lens = torch.tensor([5, 6], dtype=torch.int32, device="cuda")
    for bad in (torch.tensor([5, 6], device="cuda"),                     # int64
                torch.tensor([5, 6], dtype=torch.int32),                  # on the host
                torch.tensor([5], dtype=torch.int32, device="cuda"),      # wrong shape
                [5, 6]):                                                  # not a tensor
        with pytest.raises(BadInput) as e:
            attention(q, k, v, kv_lengths=bad)
        assert "\n" not in str(e.value)
    long_q = _inputs(dict(c, S_q=17), 5)[0]
    for call in (lambda: attention(long_q, k, v, kv_lengths=lens),        # S_q > 16
                 lambda: attention(q, k, v, kv_lengths=lens, schedule="grid")):  # split-Q
        with pytest.raises((BadInput, UnsupportedVariant)) as e:
            call()
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("family", FAMILIES)
def test_cuda_graph_with_lengths(family):
    """A captured decode call reads the lengths tensor at replay: changing its values between
    replays changes the result, with no host read."""
    import torch
    attention = _family(family)[1].attention
    q, k, v = _inputs(GRAPH_CASE, 13)
    lens = torch.tensor([4096, 100], dtype=torch.int32, device="cuda")
    out = torch.empty_like(q)
    attention(q, k, v, causal=True, kv_lengths=lens, out=out)      # set up outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        with torch.cuda.graph(g):
            attention(q, k, v, causal=True, kv_lengths=lens, out=out)
    for lengths in ([4096, 100], [17, 3000]):
        lens.copy_(torch.tensor(lengths, dtype=torch.int32))
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ref, half = _masked_reference(q, k, v, lengths, True)
        _check(out, ref, half, f"graph replay, lengths {lengths}")


# ------------------------------------------------------------------------------------------------
# kv_lengths through the public front: eager, torch.compile(fullgraph=True), a captured graph
# ------------------------------------------------------------------------------------------------
PUBLIC = dict(B=3, H=16, H_kv=4, S_kv=5000, S_q=4, D=128, causal=True, dtype="bf16")


@pytest.mark.parametrize("mode", ("eager", "compile", "compile-out", "graph"))
@pytest.mark.parametrize("family", FAMILIES)
def test_public_kv_lengths(family, mode):
    """``kernels.attention(..., kv_lengths=)`` in each mode against the fp32 masked reference,
    the output NaN-poisoned first, the cache past each length NaN; two sets of lengths through
    the same compiled function or captured graph (the lengths are read on the device)."""
    import torch
    attention = _family(family)[0]
    c = PUBLIC
    q, k, v = _inputs(c, 21, [c["S_kv"]] * c["B"])
    lens = torch.empty(c["B"], dtype=torch.int32, device="cuda")
    sets = ([5000, 1, 2500], [17, 4999, 4])

    def call(q, k, v, lens):
        return attention(q, k, v, causal=True, kv_lengths=lens)

    def into(q, k, v, lens, out):
        attention(q, k, v, causal=True, kv_lengths=lens, out=out)
        return out

    out = torch.empty_like(q)
    if mode == "compile":
        torch._dynamo.reset()
        fn = torch.compile(call, fullgraph=True)
    elif mode == "compile-out":
        torch._dynamo.reset()
        fn = torch.compile(into, fullgraph=True)
    elif mode == "graph":
        lens.copy_(torch.tensor(sets[0], dtype=torch.int32))
        into(q, k, v, lens, out)                       # set up outside the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s), torch.cuda.graph(g):
            into(q, k, v, lens, out)
    for lengths in sets:
        lens.copy_(torch.tensor(lengths, dtype=torch.int32))
        kk, vv = k.clone(), v.clone()
        for b, L in enumerate(lengths):
            kk[b, :, L:] = float("nan")
            vv[b, :, L:] = float("nan")
        k.copy_(kk)
        v.copy_(vv)
        with torch.no_grad():
            if mode == "eager":
                got = call(q, k, v, lens)
            elif mode == "compile":
                got = fn(q, k, v, lens)
            elif mode == "compile-out":
                got = fn(q, k, v, lens, torch.full_like(q, float("nan")))
            else:
                out.fill_(float("nan"))
                g.replay()
                got = out
        torch.cuda.synchronize()
        ref, half = _masked_reference(q, k, v, lengths, True)
        _check(got, ref, half, f"{mode}, lengths {lengths}")
        k.copy_(torch.nan_to_num(k))
        v.copy_(torch.nan_to_num(v))


@pytest.mark.parametrize("family", FAMILIES)
def test_public_kv_lengths_refusals(family):
    """Bad lengths in one line, eagerly and while tracing; lengths with a gradient and with more
    query rows than the decode kernels take refused in one line."""
    import torch

    from spec.family import BadInput, UnsupportedVariant
    attention = _family(family)[0]
    c = dict(PUBLIC, causal=False)
    q, k, v = _inputs(c, 23)
    for bad, needle in ((torch.tensor([5, 6, 7], device="cuda"), "int64"),
                        (torch.tensor([5, 6, 7], dtype=torch.int32), "cpu"),
                        (torch.tensor([5], dtype=torch.int32, device="cuda"), r"\(1,\)")):
        with pytest.raises(BadInput, match=needle) as e:
            attention(q, k, v, kv_lengths=bad)
        assert "\n" not in str(e.value)
        torch._dynamo.reset()
        compiled = torch.compile(lambda q, k, v, L: attention(q, k, v, kv_lengths=L),
                                 fullgraph=True, backend="eager")
        with pytest.raises(Exception) as traced:
            compiled(q, k, v, bad)
        assert isinstance(traced.value, BadInput) or str(e.value) in str(traced.value)
    lens = torch.full((c["B"],), 100, dtype=torch.int32, device="cuda")
    with pytest.raises(BadInput, match="no backward"):
        attention(q.clone().requires_grad_(True), k, v, kv_lengths=lens)
    long_q = torch.randn(c["B"], c["H"], 64, c["D"], device="cuda", dtype=q.dtype)
    with pytest.raises((BadInput, UnsupportedVariant)) as e:
        attention(long_q, k, v, kv_lengths=lens)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("variant", ("reverse", "one-head", "one-head-reverse"))
def test_decode_study_variants_match_reference(variant):
    """The decode study's kernels (``kernels.host.decode.plan``: each chunk scanned from its end;
    one query head per CTA) give the reference result on a poisoned output."""
    import torch
    import torch.nn.functional as F

    from kernels.host.decode import DecodeLaunch, plan
    c = dict(B=2, H=32, H_kv=8, S_kv=33000, S_q=1, D=128, causal=False, dtype="bf16")
    q, k, v = _inputs(c, 31)
    p = plan(_problems([c])[0], torch.cuda.get_device_properties(0).multi_processor_count,
             group="one-head" not in variant, reverse="reverse" in variant)
    out = torch.full_like(q, float("nan"))
    with torch.no_grad():
        DecodeLaunch(p, q.device.index)(q, k, v, out)
        torch.cuda.synchronize()
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
        half = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    _check(out, ref, half, f"{variant}: {p.label}")

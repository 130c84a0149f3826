"""GPU tests of the CUDA split-K/V decode (``cuda_baseline/device/decode.cuh`` through
``cuda_baseline.attention`` and ``cuda_baseline.host.launch.attention``), skipped without a GPU.

The cuTile decode tests' cases, inputs, references and error bar (tests/gpu/test_decode.py:
the pairwise matrix over packing × cache length × batch × D × mask × dtype, the ragged lengths
with NaN in the cache past each length, fp32 references) run against the CUDA family: every
case poisons the output and, through ``tests.gpu.poison.poisoned_allocations``, the fp32 split
partials with NaN before the call; a CUDA graph replays with new lengths; bad lengths and calls
the decode kernels cannot serve are refused in one line. ``prewarm()`` compiles every decode
build the tests launch, in worker processes, before the first test.
"""
from __future__ import annotations

import zlib

import pytest

from spec import Problem
from tests.gpu.test_decode import MATRIX, RAGGED, _check, _inputs, _masked_reference, _problems

pytestmark = pytest.mark.gpu

SPLITS_CASE = dict(B=2, H=32, H_kv=8, S_kv=8192, S_q=4, D=128, causal=True)
GRAPH_CASE = dict(B=2, H=16, H_kv=4, S_kv=4096, S_q=1, D=128, causal=True)
BAD_CASE = dict(B=2, H=8, H_kv=2, S_kv=1000, S_q=1, D=64, causal=False)


def _problem(c) -> Problem:
    return _problems([{"dtype": "bf16", "B": 1, **c}])[0]


def instances(num_sms: int) -> list:
    """Every decode build (``cuda_baseline.build.decode_source.DecodeInstance``) the tests below
    launch on a GPU of ``num_sms`` SMs: the plan's split kernel per case (bottom-right where
    lengths are given) and, for the explicit split counts, one and several splits."""
    from cuda_baseline.host.decode import plan
    out = [plan(p, num_sms).instance() for p in _problems(MATRIX)]
    out += [plan(p, num_sms).instance(bottom_right=True) for p in _problems(RAGGED)]
    sp = _problem(SPLITS_CASE)
    out += [plan(sp, num_sms, s).instance() for s in (0, 1, 7)]
    out += [plan(_problem(GRAPH_CASE), num_sms).instance(bottom_right=True)]
    bad = _problem(BAD_CASE)
    out += [plan(bad, num_sms).instance(), plan(bad, num_sms).instance(bottom_right=True)]
    return list(dict.fromkeys(out))


def prewarm() -> list[str]:
    """Compile ``instances`` for this GPU into CuPy's disk cache (the runner's warm step)."""
    import torch

    from cuda_baseline.host.decode import precompile
    try:
        precompile(instances(torch.cuda.get_device_properties(0).multi_processor_count))
    except Exception as e:  # noqa: BLE001 - the tests that need the build fail with its log
        return [f"{type(e).__name__}: {str(e)[:300]}"]
    return []


@pytest.mark.parametrize("c", MATRIX, ids=[
    f"b{c['B']}-h{c['H']}x{c['H_kv']}-kv{c['S_kv']}-q{c['S_q']}-d{c['D']}-{c['dtype']}"
    f"{'-causal' if c['causal'] else ''}" for c in MATRIX])
def test_decode_matches_reference(c):
    import torch
    import torch.nn.functional as F

    from cuda_baseline import attention
    from cuda_baseline.host import launch
    from cuda_baseline.host.decode import DecodeLaunch
    from tests.gpu.poison import poisoned_allocations, unwritten
    seed = zlib.crc32(repr(sorted(c.items())).encode())
    q, k, v = _inputs(c, seed)
    assert isinstance(launch.launch_for(q, k, v, c["causal"]), DecodeLaunch)
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
def test_ragged_lengths(c):
    import torch

    from cuda_baseline.host.launch import attention
    from tests.gpu.poison import poisoned_allocations, unwritten
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


def test_explicit_splits_agree_and_split_q_is_reachable():
    """decode1 (no merge), decode7, the work model's split count and the split-Q forward
    (schedule="grid") give the same result to rounding, and agree with the cuTile family's."""
    from cuda_baseline.host import launch
    from cuda_baseline.host.decode import DecodeLaunch
    q, k, v = _inputs(SPLITS_CASE, 7)
    outs = {s: launch.attention(q, k, v, causal=True, schedule=s)
            for s in ("decode1", "decode7", "decode", None, "grid")}
    assert not isinstance(launch.launch_for(q, k, v, True, schedule="grid"), DecodeLaunch)
    assert launch.launch_for(q, k, v, True, schedule="decode7").plan.splits == 7
    for s, o in outs.items():
        assert (o.float() - outs["grid"].float()).abs().max().item() < 2e-2, s


def test_training_keeps_the_split_q_forward():
    import torch

    from cuda_baseline import attention
    from cuda_baseline.host import launch
    from cuda_baseline.host.decode import DecodeLaunch
    c = dict(B=1, H=8, H_kv=2, S_kv=1000, S_q=4, D=64, causal=False)
    q, k, v = _inputs(c, 11)
    assert isinstance(launch.launch_for(q, k, v, False), DecodeLaunch)
    assert not isinstance(launch.launch_for(q, k, v, False, schedule="grid"), DecodeLaunch)
    q.requires_grad_(True)
    out = attention(q, k, v)
    out.float().sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_bad_lengths_refused_in_one_line():
    import torch

    from cuda_baseline import attention as front
    from cuda_baseline.host.launch import attention
    from spec.family import BadInput
    q, k, v = _inputs(BAD_CASE, 5)
    lens = torch.tensor([5, 6], dtype=torch.int32, device="cuda")
    for bad in (torch.tensor([5, 6], device="cuda"),                     # int64
                torch.tensor([5, 6], dtype=torch.int32),                  # on the host
                torch.tensor([5], dtype=torch.int32, device="cuda"),      # wrong shape
                [5, 6]):                                                  # not a tensor
        with pytest.raises(BadInput) as e:
            attention(q, k, v, kv_lengths=bad)
        assert "\n" not in str(e.value)
    long_q = _inputs(dict(BAD_CASE, S_q=17), 5)[0]
    calls = [lambda: attention(long_q, k, v, kv_lengths=lens),           # S_q > 16
             lambda: attention(q, k, v, kv_lengths=lens, schedule="grid"),   # split-Q
             lambda: front.family.forward(q, k, v, None, True, False, "linear", None, None,
                                          None, kv_lengths=lens)]        # a gradient
    for call in calls:
        with pytest.raises(BadInput) as e:
            call()
        assert "\n" not in str(e.value)


def test_cuda_graph_with_lengths():
    """A captured decode call reads the lengths tensor at replay: changing its values between
    replays changes the result, with no host read."""
    import torch

    from cuda_baseline.host.launch import attention
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

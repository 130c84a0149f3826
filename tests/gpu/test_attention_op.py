"""GPU tests of the user function of both families as a user calls it (skipped without a GPU):
``from kernels import attention`` and ``from cuda_baseline import attention``.

Each against the fp32 reference (experiments/measurement/correctness.py: NaN never passes) on an
output poisoned with NaN before the kernel writes it: eager calls (a given ``out`` and an allocated
one), inputs that are transposed views of a [B, S, H, D] tensor (no copy), CUDA-graph capture and
replay (the output poisoned after capture, the inputs replaced between replays), and
``torch.compile(fullgraph=True)`` of a model that unpacks a packed QKV tensor and calls
``attention`` (functional and ``out=``). A repeated call takes the cached launch (its preparation
is not called again). Bad input (dtype, device, rank, head dim, strides) gets the one-line
``BadInput`` eagerly, and under ``torch.compile`` is refused while tracing with that line in the
error.

``builds(arch)`` lists the default builds the calls launch (tests/gpu/conftest.py compiles them
before the first test); the strided and compiled calls may add JIT specialisations of cuTile,
compiled at their first launch.
"""
from __future__ import annotations

import pytest

from spec import Arch, Problem
from spec.family import BadInput
from spec.orders import ScanOrder
from spec.variant import Backend, Variant

pytestmark = pytest.mark.gpu

FAMILIES = ["cutile", "cuda"]
PROBLEMS = [Problem(B=2, H=4, H_kv=2, S_q=333, S_kv=333, D=64, dtype="bf16", causal=True),
            Problem(B=1, H=4, S_q=200, S_kv=457, D=128, causal=False),
            Problem(B=2, H=4, S_q=300, S_kv=300, D=64, causal=False)]
PACKED = PROBLEMS[2]    # the strided, graph and compile problem: one [B, S, 3, H, D] QKV tensor


def _default_variant(family: str, arch: Arch, pr: Problem) -> Variant:
    if family == "cutile":
        from kernels.host.backend import default_schedule
        from kernels.rules.choice import problem_config
        cfg = problem_config(arch.name, pr)
        return Variant(Backend.CUTILE, ScanOrder.linear(),
                       default_schedule(pr, cfg, cfg.tiles, arch), cfg.tiles)
    from cuda_baseline.host.backend import default_schedule, default_tiles
    tiles = default_tiles(pr, arch)
    return Variant(Backend.CUDA, ScanOrder.linear(), default_schedule(pr, tiles, arch), tiles)


def builds(arch: Arch) -> dict[str, list]:
    every = [(_default_variant(f, arch, p), p, False) for f in FAMILIES for p in PROBLEMS]
    return {name: every for name in (
        "test_eager_matches_reference", "test_repeated_call_takes_the_cached_launch",
        "test_transposed_views_need_no_copy", "test_cuda_graph_replay",
        "test_torch_compile_fullgraph", "test_bad_input_eager_and_compiled")}


def _api(family: str):
    if family == "cutile":
        from kernels import attention
    else:
        from cuda_baseline import attention
    return attention


def _eager_module(family: str):
    import importlib
    return importlib.import_module("kernels.host.backend" if family == "cutile"
                                   else "cuda_baseline.host.launch")


def _inputs(pr: Problem, seed: int):
    from experiments.measurement.correctness import random_inputs
    return random_inputs(pr, seed)


def _packed(pr: Problem, seed: int):
    """q, k, v as [B, H, S, D] views of one [B, S, 3, H, D] tensor (a fused QKV projection)."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[pr.dtype.value]
    x = torch.randn(pr.B, pr.S_q, 3, pr.H, pr.D, generator=gen, device="cuda", dtype=dt)
    return x, tuple(t.transpose(1, 2) for t in x.unbind(2))


@pytest.mark.parametrize("pr", PROBLEMS, ids=lambda p: p.label)
@pytest.mark.parametrize("family", FAMILIES)
def test_eager_matches_reference(family, pr):
    import torch

    from experiments.measurement.correctness import check, poisoned_like
    attention = _api(family)
    q, k, v = _inputs(pr, 1)
    out = poisoned_like(q)
    got = attention(q, k, v, causal=pr.causal, out=out)
    assert got is out
    res = check(out, q, k, v, pr.causal)
    assert res.passed, f"{family} {pr.label} out=: {res}"
    for seed in (2, 3):              # allocated output, fresh inputs, the cached launch
        q, k, v = _inputs(pr, seed)
        res = check(attention(q, k, v, causal=pr.causal), q, k, v, pr.causal)
        assert res.passed, f"{family} {pr.label} seed {seed}: {res}"
    torch.cuda.synchronize()


@pytest.mark.parametrize("family", FAMILIES)
def test_repeated_call_takes_the_cached_launch(family, monkeypatch):
    """The second call with the same launch key neither checks nor prepares again; another
    stride is another key."""
    from experiments.measurement.correctness import check, poisoned_like
    attention, mod = _api(family), _eager_module(family)
    pr = PROBLEMS[0]
    q, k, v = _inputs(pr, 4)
    attention(q, k, v, causal=pr.causal)
    calls = []
    real = mod._new_launch
    monkeypatch.setattr(mod, "_new_launch", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    q2, k2, v2 = _inputs(pr, 5)
    out = attention(q2, k2, v2, causal=pr.causal, out=None)
    assert calls == [], "a repeated call prepared its launch again"
    assert check(out, q2, k2, v2, pr.causal).passed
    wide = poisoned_like(q2.new_empty(pr.B, pr.H, pr.S_q, 2 * pr.D))[..., :pr.D]
    wide.copy_(q2)
    res = check(attention(wide, k2, v2, causal=pr.causal, out=poisoned_like(q2)), q2, k2, v2,
                pr.causal)
    assert len(calls) == 1 and res.passed, (calls, res)


@pytest.mark.parametrize("family", FAMILIES)
def test_transposed_views_need_no_copy(family):
    import torch

    from experiments.measurement.correctness import check
    attention, pr = _api(family), PACKED
    _, (q, k, v) = _packed(pr, 6)
    assert not q.is_contiguous()
    out = torch.full_like(q, float("nan"))            # q's strides: [B, S, H, D] in memory
    attention(q, k, v, causal=pr.causal, out=out)
    res = check(out, q, k, v, pr.causal)
    assert res.passed, f"{family} strided out=: {res}"
    assert check(attention(q, k, v, causal=pr.causal), q, k, v, pr.causal).passed
    dense = q.transpose(1, 2).contiguous().transpose(1, 2)   # [B, S, H, D] memory, dense
    got = attention(dense, k, v, causal=pr.causal)
    assert got.stride() == dense.stride(), "a new output keeps a dense q's memory order"
    assert check(got, dense, k, v, pr.causal).passed


@pytest.mark.parametrize("family", FAMILIES)
def test_cuda_graph_replay(family):
    import torch

    from experiments.measurement.correctness import check
    attention, pr = _api(family), PACKED
    q, k, v = _inputs(pr, 7)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        attention(q, k, v, causal=pr.causal)            # compile and cache outside capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = attention(q, k, v, causal=pr.causal)
    for seed in (8, 9):
        fresh = _inputs(pr, seed)
        for t, f in zip((q, k, v), fresh):
            t.copy_(f)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        res = check(out, q, k, v, pr.causal)
        assert res.passed, f"{family} graph replay, inputs {seed}: {res}"


@pytest.mark.parametrize("family", FAMILIES)
def test_torch_compile_fullgraph(family):
    import torch

    from experiments.measurement.correctness import check, poisoned_like
    attention, pr = _api(family), PACKED

    def model(x):                           # x: [B, S, 3, H, D], a fused QKV projection
        q, k, v = (t.transpose(1, 2) for t in x.unbind(2))
        y = attention(q, k, v, causal=pr.causal)                    # [B, H, S, D]
        return y.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)

    def into(q, k, v, out):
        attention(q, k, v, causal=pr.causal, out=out)
        return out

    compiled, compiled_into = (torch.compile(f, fullgraph=True) for f in (model, into))
    for seed in (10, 11):
        x, (q, k, v) = _packed(pr, seed)
        y = compiled(x)
        got = y.view(pr.B, pr.S_q, pr.H, pr.D).transpose(1, 2)
        res = check(got, q, k, v, pr.causal)
        assert res.passed, f"{family} torch.compile model, inputs {seed}: {res}"
        out = poisoned_like(q)
        compiled_into(q, k, v, out)
        torch.cuda.synchronize()
        res = check(out, q, k, v, pr.causal)
        assert res.passed, f"{family} torch.compile out=, inputs {seed}: {res}"


def _bad_inputs(family: str):
    import torch
    t = lambda *s, dtype=torch.float16, device="cuda": torch.randn(  # noqa: E731
        *s, dtype=dtype, device=device)
    q = t(1, 2, 64, 64)
    cases = [("dtype", (q.float(), q.float(), q.float()), "float32"),
             ("device", (q.cpu(), q.cpu(), q.cpu()), "cpu"),
             ("rank", (q[0], q[0], q[0]), "4-D"),
             ("head dim", (t(1, 2, 64, 96), t(1, 2, 64, 96), t(1, 2, 64, 96)), "head dim 96"),
             ("last stride", (q.transpose(2, 3), q, q), "contiguous")]
    if family == "cuda":
        padded = t(1, 2, 64, 66)[..., :64]
        cases.append(("row stride", (padded, q, q), "multiple of 8"))
    return cases


@pytest.mark.parametrize("family", FAMILIES)
def test_bad_input_eager_and_compiled(family):
    """Eagerly the one-line BadInput; under torch.compile(fullgraph=True) the call is refused
    while tracing (nothing runs) and the error carries that line (dynamo wraps what the
    operator's fake implementation raises)."""
    import torch
    attention = _api(family)
    for what, args, needle in _bad_inputs(family):
        with pytest.raises(BadInput, match=needle) as eager:
            attention(*args)
        line = str(eager.value)
        assert "\n" not in line, f"{what}: {line!r} is not one line"
        torch._dynamo.reset()
        compiled = torch.compile(lambda q, k, v: attention(q, k, v), fullgraph=True,
                                 backend="eager")
        with pytest.raises(Exception) as traced:
            compiled(*args)
        err = traced.value
        assert isinstance(err, BadInput) or line in str(err), \
            f"{what} under torch.compile: {type(err).__name__}: {str(err)[:600]}"


# ------------------------------------------------------------------------------------------------
# the one front: the same arguments, the same meaning, in both families
# ------------------------------------------------------------------------------------------------
def test_public_signatures_are_equal_but_for_the_documented_knobs():
    import inspect

    import cuda_baseline
    import kernels
    from spec.front import SHARED
    sigs = {n: inspect.signature(f.attention) for n, f in (("cutile", kernels),
                                                            ("cuda", cuda_baseline))}
    knobs = {"cutile": ["occupancy", "arch", "level"], "cuda": ["stages", "backward_options"]}
    for name, sig in sigs.items():
        params = list(sig.parameters)
        assert params[:3] == ["q", "k", "v"]
        assert params[3:3 + len(SHARED)] == list(SHARED), name
        assert params[3 + len(SHARED):] == knobs[name], name
    shared = [[p for n, p in s.parameters.items() if n in SHARED] for s in sigs.values()]
    assert shared[0] == shared[1]
    for f in (kernels.attention, cuda_baseline.attention):
        assert "backward_order" in f.__doc__ and all(k in f.__doc__ for k in
                                                      knobs[f.family.name])
    with pytest.raises(TypeError, match="stages"):
        kernels.attention(*[None] * 3, stages=2)


def _direct_grads(family, q, k, v, dout, causal, forward_order, order, schedule, tiles=None):
    """(dq, dk, dv) from the family's kernels called directly, below the front."""
    if family == "cutile":
        from kernels.host import backend, backward
        lse = backward.stat_buffer(q)
        out = backend.attention(q, k, v, causal=causal, order=forward_order, lse=lse)
        return backward.attention_backward(dout, q, k, v, out, lse, causal=causal, order=order,
                                           schedule=schedule, tiles=tiles)
    from cuda_baseline.host import training
    out, lse = training.forward(q, k, v, causal, forward_order, None, None, None)
    return training.backward(dout, q, k, v, out, lse, causal, order, schedule, None, tiles,
                             None)


@pytest.mark.parametrize("family", FAMILIES)
def test_order_drives_the_backward_the_same_way(family):
    """``order=`` is the backward's scan order too, in both families, unless ``backward_order``
    names another: the gradients through ``attention()`` are the direct backward's of that
    order (dK, dV bit for bit; dQ too in cuTile, whose dQ pass does not accumulate atomically),
    and the reverse scan's differ from the linear scan's (a backward that ignored the order
    would equal the linear one)."""
    import torch

    import cuda_baseline
    import kernels
    attention = kernels.attention if family == "cutile" else cuda_baseline.attention
    pr = Problem(B=1, H=4, H_kv=2, S_q=640, S_kv=640, D=64, dtype="bf16", causal=True)
    g = torch.Generator(device="cuda").manual_seed(7)
    q, k, v, dout = (torch.randn(pr.B, h, pr.S_q, pr.D, device="cuda", dtype=torch.bfloat16,
                                 generator=g) for h in (pr.H, pr.H_kv, pr.H_kv, pr.H))
    got = {}
    for order, border, bsched in (("reverse", None, None), ("linear", None, None),
                                  ("reverse", "linear", None),
                                  ("sawtooth", None, "static8")):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        out = attention(*leaves, causal=True, order=order, backward_order=border,
                        backward_schedule=bsched)
        out.backward(dout)
        grads = [t.grad for t in leaves]
        want = _direct_grads(family, q, k, v, dout, True, order, border or order, bsched)
        assert torch.equal(grads[1], want[1]) and torch.equal(grads[2], want[2]), (order, border)
        if family == "cutile":
            assert torch.equal(grads[0], want[0]), (order, border)
        else:
            assert torch.allclose(grads[0].float(), want[0].float(), atol=2e-2, rtol=2e-2)
        got[(order, border)] = grads
    lin = _direct_grads(family, q, k, v, dout, True, "reverse", "linear", None)
    rev = got[("reverse", None)]
    assert any(not torch.equal(a, b) for a, b in zip(lin[1:], rev[1:])), \
        "the reverse backward equals the linear one on the same forward: a test that cannot fail"


@pytest.mark.parametrize("family", FAMILIES)
def test_backward_tiles_reach_the_backward(family, monkeypatch):
    """``backward_tiles=`` through ``attention()``, eager and under ``torch.compile``, is the
    tile pair the backward's launch is prepared with (a spy on the family's preparation), and
    its gradients are the direct backward's with those tiles (dK, dV bit for bit; cuTile's dQ
    too) and match the fp32 reference; ``backward_tiles=None`` prepares the default's tiles."""
    import torch
    import torch.nn.functional as F

    import cuda_baseline
    import kernels
    from cuda_baseline.host import training
    from kernels.host import backward
    attention = kernels.attention if family == "cutile" else cuda_baseline.attention
    pr = Problem(B=1, H=4, H_kv=2, S_q=384, S_kv=384, D=64, dtype="bf16", causal=True)
    g = torch.Generator(device="cuda").manual_seed(23)
    q, k, v, dout = (torch.randn(pr.B, h, pr.S_q, pr.D, device="cuda", dtype=torch.bfloat16,
                                 generator=g) for h in (pr.H, pr.H_kv, pr.H_kv, pr.H))
    seen = []
    if family == "cutile":
        real = backward.BackwardLaunch.__init__
        cache = backward._LAUNCHES

        def spy(self, problem, cfg, *a, **kw):
            seen.append((cfg.dkdv.tiles.m, cfg.dkdv.tiles.n, cfg.dq.tiles.m, cfg.dq.tiles.n))
            real(self, problem, cfg, *a, **kw)
        monkeypatch.setattr(backward.BackwardLaunch, "__init__", spy)
    else:
        real = training._bwd_blocks
        cache = training._CACHE

        def spy(*a):
            hit = real(*a)
            t = hit[0].instance.tiles
            seen.append((t.m, t.n) * 2)
            return hit
        monkeypatch.setattr(training, "_bwd_blocks", spy)
    cache.clear()

    def grads(fn, dtype=None, **kw):
        leaves = [t.detach().to(dtype or t.dtype).requires_grad_(True) for t in (q, k, v)]
        fn(*leaves, causal=True, **kw).backward(dout.to(dtype or dout.dtype))
        return [t.grad for t in leaves]

    ref = grads(lambda *a, **kw: F.scaled_dot_product_attention(*a, is_causal=True,
                                                                enable_gqa=True), torch.float32)
    half = grads(lambda *a, **kw: F.scaled_dot_product_attention(*a, is_causal=True,
                                                                 enable_gqa=True))
    grads(attention)
    default = seen[-1]
    tiles = next(t for t in ([(64, 64), (64, 128)] if family == "cutile"
                             else [(64, 128), (128, 128)]) if t != default[:2])
    want = _direct_grads(family, q, k, v, dout, True, "linear", "linear", None, tiles)
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v, causal: attention(q, k, v, causal=causal,
                                                               backward_tiles=tiles),
                             fullgraph=True)
    for name, fn in (("eager", lambda *a, **kw: attention(*a, backward_tiles=tiles, **kw)),
                     ("compiled", compiled)):
        seen.clear()
        cache.clear()
        got = grads(fn)
        assert seen and all(s == tiles * 2 for s in seen), (name, tiles, seen)
        assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2]), name
        if family == "cutile":
            assert torch.equal(got[0], want[0]), name
        for n, a, r, h in zip("qkv", got, ref, half):
            err = (a.float() - r).abs().max().item()
            tol = 2 * (h.float() - r).abs().max().item() + 2e-3
            assert err <= tol, f"{family} {name} d{n}: {err:.3g} > {tol:.3g}, tiles {tiles}"


@pytest.mark.parametrize("family", FAMILIES)
def test_compiled_gradients_with_scale_match_the_fp32_reference(family):
    """Compiled (fullgraph), ``scale=`` 0.3: gradients match SDPA's fp32 ones within twice
    SDPA's own half-precision error and the eager call's; buffers start as NaN."""
    import torch
    import torch.nn.functional as F

    from tests.gpu.poison import poisoned_allocations
    attention = _api(family)
    pr = Problem(B=1, H=4, H_kv=2, S_q=320, S_kv=320, D=64, dtype="bf16", causal=True)
    g = torch.Generator(device="cuda").manual_seed(17)
    q, k, v, dout = (torch.randn(pr.B, h, pr.S_q, pr.D, device="cuda", dtype=torch.bfloat16,
                                 generator=g) for h in (pr.H, pr.H_kv, pr.H_kv, pr.H))
    scale = 0.3

    def loss(fn, q, k, v, **kw):
        return (fn(q, k, v, causal=True, scale=scale, **kw).float() * dout.float()).sum()

    def grads(fn, dtype=None, **kw):
        leaves = [t.detach().to(dtype or t.dtype).requires_grad_(True) for t in (q, k, v)]
        loss(fn, *leaves, **kw).backward()
        return [t.grad for t in leaves]

    sdpa = lambda q, k, v, causal, scale: F.scaled_dot_product_attention(  # noqa: E731
        q, k, v, is_causal=causal, scale=scale, enable_gqa=True)
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: attention(q, k, v, causal=True, scale=scale),
                             fullgraph=True)
    run = lambda q, k, v, causal, scale: compiled(q, k, v)  # noqa: E731
    grads(run)                                   # compiled outside the poison
    with poisoned_allocations():
        got = grads(run)
    eager = grads(attention)
    ref = grads(sdpa, torch.float32)
    half = grads(sdpa)
    for name, a, e, r, h in zip("qkv", got, eager, ref, half):
        assert not torch.isnan(a).any(), f"{family} d{name}: NaN (unwritten) under compile"
        err = (a.float() - r).abs().max().item()
        tol = 2 * (h.float() - r).abs().max().item() + 2e-3
        assert err <= tol, f"{family} d{name}: {err:.3g} > {tol:.3g} under compile, scale={scale}"
        assert torch.allclose(a.float(), e.float(), atol=2e-2, rtol=2e-2), f"{family} d{name}"


class _Prepared(Exception):
    """Raised by a patched ``prepare`` with the variant ``attention()`` resolved."""


@pytest.mark.parametrize("family", FAMILIES)
def test_attention_builds_what_the_studies_time(family, monkeypatch):
    """For every problem of the model and shape suites, ``attention()`` prepares the very
    variant the studies time (``experiments.registry.suites.default_cases``): both come from
    the family's ``default_variant``."""
    import torch

    from experiments.registry.suites import default_cases, model_problems, shapes_problems
    from spec import detect
    if family == "cutile":
        from kernels.host import backend as fam
        cls = fam.CutileFamily
    else:
        from cuda_baseline.host import backend as b
        from cuda_baseline.host import launch as fam
        cls = b.CudaFamily

    def prepare(self, variant, problem, *a, **kw):
        raise _Prepared(variant)
    monkeypatch.setattr(cls, "prepare", prepare)
    arch = detect()
    problems = [p for *_, p in model_problems()] + [p for _, p in shapes_problems()]
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}
    for pr in dict.fromkeys(problems):
        q = torch.empty(pr.B, pr.H, pr.S_q, pr.D, device="cuda", dtype=dt[pr.dtype.value])
        kv = torch.empty(pr.B, pr.H_kv, pr.S_kv, pr.D, device="cuda", dtype=q.dtype)
        want = default_cases(arch, pr, "x")[0 if family == "cutile" else 1].variant
        with pytest.raises(_Prepared) as got:
            fam.launch_for(q, kv, kv, pr.causal)
        assert got.value.args[0] == want, pr.label

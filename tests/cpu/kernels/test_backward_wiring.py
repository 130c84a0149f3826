"""The autograd wiring of ``kernels.attention`` on the CPU, the kernels replaced by PyTorch math
(skipped where torch is not installed, as in CI): a call whose inputs require grad goes through
the differentiable path, asks the forward for the log-sum-exp and hands the backward exactly the
saved tensors; a call without grad takes the plain eager path; double backward is refused; the
refusals come before anything launches. The kernels themselves are checked on the GPU
(tests/gpu/test_backward_cutile.py)."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")


def _math_attention(q, k, v, causal, scale):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    if causal:
        S_q, S_kv = s.shape[-2:]
        s = s.masked_fill(torch.ones(S_q, S_kv, dtype=torch.bool).triu(1), float("-inf"))
    return s, torch.softmax(s, -1) @ v.float()


@pytest.fixture
def fake_kernels(monkeypatch):
    """backend.attention, the training forward's launch (backend.launch_for), the backward
    prepared on it (backward.plan_for) and backward.attention_backward replaced by math on CPU
    tensors; the calls are recorded."""
    from kernels.host import backend, backward
    calls = []

    def fwd(q, k, v, *, causal=False, scale=None, lse=None, out=None, **kw):
        sc = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        s, o = _math_attention(q, k, v, causal, sc)
        calls.append(("fwd", lse is not None))
        if lse is not None:
            lse.copy_(torch.logsumexp(s, -1) / math.log(2))
        o = o.to(q.dtype)
        if out is not None:
            out.copy_(o)
            return out
        return o

    def bwd(dout, q, k, v, out, lse, *, causal, scale=None, **kw):
        calls.append(("bwd", lse.shape))
        sc = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        leaves = [t.detach().float().requires_grad_(True) for t in (q, k, v)]
        with torch.enable_grad():
            _, o = _math_attention(*leaves, causal, sc)
            grads = torch.autograd.grad(o, leaves, dout.float())
        return tuple(g.to(q.dtype) for g in grads)

    class TrainingLaunch:                  # backend.launch_for's, for the training forward
        empty_like = staticmethod(torch.empty_like)

        def __init__(self, causal, scale):
            self.causal, self.scale = causal, scale

        def __call__(self, q, k, v, out, lse):
            fwd(q, k, v, causal=self.causal, scale=self.scale, lse=lse, out=out)

    def launch_for(q, k, v, causal, order, schedule, tiles, occupancy, arch, level, out, scale,
                   save_lse, kv_lengths=None):
        assert save_lse and out is None and kv_lengths is None
        return TrainingLaunch(causal, scale)

    def plan_for(forward, *, causal, scale, order, schedule, tiles, level):
        assert isinstance(forward, TrainingLaunch) and level == 6
        return lambda dout, q, k, v, out, lse: bwd(dout, q, k, v, out, lse, causal=causal,
                                                   scale=scale)

    monkeypatch.setattr(backend, "attention", fwd)
    monkeypatch.setattr(backend, "launch_for", launch_for)
    monkeypatch.setattr(backward, "attention_backward", bwd)
    monkeypatch.setattr(backward, "plan_for", plan_for)
    return calls


def _inputs(H=4, H_kv=2, S=24, D=64, grad=True):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, H, S, D, generator=gen)
    k = torch.randn(2, H_kv, S, D, generator=gen)
    v = torch.randn(2, H_kv, S, D, generator=gen)
    return [t.requires_grad_(grad) for t in (q, k, v)]


@pytest.mark.parametrize("causal", [False, True])
def test_grad_path_matches_math_and_saves_the_lse(fake_kernels, causal):
    from kernels.host.op import attention
    q, k, v = _inputs()
    out = attention(q, k, v, causal=causal, scale=0.2)
    assert out.requires_grad and out.grad_fn is not None
    dout = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), dout)
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    _, ref = _math_attention(*leaves, causal, 0.2)
    want = torch.autograd.grad(ref, leaves, dout)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert fake_kernels == [("fwd", True), ("bwd", (2, 4, 24))]


def test_no_grad_calls_the_plain_forward(fake_kernels):
    from kernels.host.op import attention
    q, k, v = _inputs(grad=False)
    out = attention(q, k, v)
    assert not out.requires_grad and fake_kernels == [("fwd", False)]
    q, k, v = _inputs()
    with torch.no_grad():
        assert not attention(q, k, v).requires_grad
    assert fake_kernels[-1] == ("fwd", False)


def test_only_one_input_requiring_grad_still_differentiates(fake_kernels):
    from kernels.host.op import attention
    q, k, v = _inputs(grad=False)
    v.requires_grad_(True)
    out = attention(q, k, v)
    (g,) = torch.autograd.grad(out.sum(), (v,))        # an expanded upstream gradient
    assert g.shape == v.shape and torch.isfinite(g).all()


def test_double_backward_is_refused(fake_kernels):
    from kernels.host.op import attention
    q, k, v = _inputs()
    out = attention(q, k, v)
    (gq,) = torch.autograd.grad(out.sum(), (q,), create_graph=True)
    with pytest.raises(RuntimeError):
        gq.sum().backward()


def test_refusals_before_any_launch(fake_kernels):
    from kernels.host.op import attention
    from spec.family import BadInput, UnsupportedVariant
    q, k, v = _inputs()
    with pytest.raises(BadInput, match="out="):
        attention(q, k, v, out=torch.empty_like(q))
    with pytest.raises(UnsupportedVariant, match="level"):
        attention(q, k, v, level=1)
    assert fake_kernels == []


def test_backward_plan_is_prepared_once_per_choice_and_determinism(monkeypatch):
    """plan_for keeps one plan per (order, schedule, tiles) on the forward's launch; a plan
    resolves its launches once per determinism flag (read when it runs), checked against out
    for dout, and runs the launch on the step's tensors."""
    from kernels.host import backward
    made = []

    class Launch:
        def __init__(self, det):
            self.det = det

        def run(self, dout, q, k, v, out, lse):
            return ("ran", self.det, dout)

    def new_backward(dout, q, k, v, out, lse, causal, scale, config, order, schedule, level,
                     tiles):
        assert dout is out and config is None
        made.append((order, schedule, tiles, torch.are_deterministic_algorithms_enabled()))
        return Launch(made[-1][-1])

    monkeypatch.setattr(backward, "_new_backward", new_backward)

    class Forward:
        backward_plans: dict = {}

    fwd = Forward()
    kw = dict(causal=True, scale=None, schedule=None, tiles=None, level=6)
    plan = backward.plan_for(fwd, order="linear", **kw)
    assert backward.plan_for(fwd, order="linear", **kw) is plan
    other = backward.plan_for(fwd, order="sawtooth", **kw)
    assert other is not plan and len(fwd.backward_plans) == 2
    q = out = object()
    assert plan("d", q, q, q, out, q) == ("ran", False, "d")
    assert plan("d", q, q, q, out, q) == ("ran", False, "d") and len(made) == 1
    was = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        assert plan("e", q, q, q, out, q) == ("ran", True, "e")
    finally:
        torch.use_deterministic_algorithms(was)
    assert made == [("linear", None, None, False), ("linear", None, None, True)]

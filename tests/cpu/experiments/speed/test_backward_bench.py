"""The CUDA twin's training-speed benchmark (``experiments.speed.backward_bench``) without a GPU:
its variant spelling, its refusals (exit 2, nothing written), the dry run and the summary."""
from __future__ import annotations

import math

import pytest

from experiments.speed import backward_bench as bb
from spec import Problem


def test_parse_variants_tiles_order_schedule_and_head_dim():
    got = bb.parse_variants("64x128,128x128@64,64x128/sawtooth/static132")
    assert got == [("64x128", {"backward_tiles": (64, 128)}),
                   ("128x128", {"backward_tiles": (128, 128), "D": 64}),
                   ("64x128-sawtooth-static132", {"backward_tiles": (64, 128),
                                                  "order": "sawtooth",
                                                  "backward_schedule": "static132"})]
    assert bb.parse_variants(None) == [] and bb.parse_variants("") == []
    for bad in ("1x2x3", "64", "64x128@d64"):
        with pytest.raises(ValueError, match="--variants item"):
            bb.parse_variants(bad)
    d64 = bb.parse_variants("128x128@64")[0][1]
    assert bb._applies(d64, Problem(B=1, H=2, S_q=64, D=64))
    assert not bb._applies(d64, Problem(B=1, H=2, S_q=64, D=128))


def test_bad_arguments_exit_2_and_write_nothing(tmp_path, capsys):
    out = tmp_path / "speed.csv"
    out.write_text("keep")
    assert bb.main(["--out", str(out)]) == 2
    assert out.read_text() == "keep"
    assert bb.main(["--repeats", "0"]) == 2
    assert bb.main(["--variants", "1x2x3", "--dry-run"]) == 2
    assert "exists" in capsys.readouterr().err


def test_dry_run_lists_the_half(capsys):
    assert bb.main(["--half", "validation", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 16 and all(len(ln.split()) == 2 for ln in lines)


def test_summary_geometric_means_skip_refused_peers():
    def row(p, who, fb, bw):
        return ["llm", "validation", p, who, fb, bw, 10, math.nan, "GPU"]
    rows = [row("a", "cuda", 1.0, 1.0), row("a", "flash", 2.0, 0.5), row("a", "cudnn", 1.0, 1.0),
            row("b", "cuda", 2.0, 1.0), row("b", "flash", 1.0, 2.0),
            row("b", "cudnn", math.nan, math.nan)]
    lines = bb.summary(rows)
    assert "fwd+bwd: flash / cuda geo-mean 1.000 over 2 problems (min 0.500, max 2.000)" in lines
    assert "fwd+bwd: cudnn / cuda geo-mean 1.000 over 1 problems (min 1.000, max 1.000)" in lines
    assert "bwd: flash / cuda geo-mean 1.000 over 2 problems (min 0.500, max 2.000)" in lines


class _FakeEvent:
    def __init__(self, enable_timing=True):
        self.t = 0.0

    def record(self):
        import time
        self.t = time.perf_counter()

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


def _fake_torch(log: list):
    """A stand-in for torch with what the timing loops call: every gradient call is logged with
    its launcher's name (the 'out' a launcher returns)."""
    import types
    cuda = types.SimpleNamespace(synchronize=lambda: log.append("sync"), Event=_FakeEvent)

    def grad(out, inputs, dout, retain_graph=False):
        log.append(("bwd" if retain_graph else "step", out))
        return tuple(f"d{out}" for _ in inputs)
    return types.SimpleNamespace(cuda=cuda, autograd=types.SimpleNamespace(grad=grad))


def test_every_launcher_is_warmed_before_any_is_timed_and_rounds_alternate(monkeypatch):
    import itertools
    import sys
    import time
    log: list = []
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(log))
    # 1 us a clock reading: n does not depend on the machine's load
    ticks = itertools.count()
    monkeypatch.setattr(time, "perf_counter", lambda: next(ticks) * 1e-6)

    def launcher(name):
        return lambda q, k, v: name

    def refuses(q, k, v):
        raise RuntimeError("No available kernel.\nmore")
    res = bb._measure_all({"a": launcher("a"), "x": refuses, "b": launcher("b")},
                          "q", "k", "v", "do", repeats=3, label="p")
    assert res["x"] is None
    for name in ("a", "b"):
        fb, bw, n, grads, fb_runs, bw_runs, host = res[name]
        assert grads == (f"d{name}",) * 3 and n == 200
        assert len(fb_runs.split(";")) == 3 and len(bw_runs.split(";")) == 3
        assert fb >= 0 and bw >= 0 and host >= 0
    calls = [c for c in log if c != "sync"]
    # warm-up (two calls of each loop body, one timed step for n): a's and b's before any loop
    warm = [("step", "a")] * 3 + [("bwd", "a")] * 2 + [("step", "b")] * 3 + [("bwd", "b")] * 2
    assert calls[:10] == warm
    # then one untimed loop of the first launcher, and rounds a,b / b,a / a,b, each launcher's
    # turn a fwd+bwd loop, a bwd loop and a host burst
    seq = [c[1] for c in calls[10:]]
    runs = [x for i, x in enumerate(seq) if i == 0 or seq[i - 1] != x]
    assert runs == ["a", "b", "a", "b"]
    turn = 200 + 200 + bb.HOST_BURST
    assert seq.count("a") == 200 + 3 * turn and seq.count("b") == 3 * turn


def test_parse_variants_build_options():
    got = bb.parse_variants("+onepart@128,+onepart+dqv4,64x128+dqv4@64")
    assert got == [("onepart", {"backward_tiles": None, "backward_options": "onepart", "D": 128}),
                   ("onepart+dqv4", {"backward_tiles": None,
                                     "backward_options": "onepart+dqv4"}),
                   ("64x128+dqv4", {"backward_tiles": (64, 128), "backward_options": "dqv4",
                                    "D": 64})]
    for bad, why in (("+fast", "backward option 'fast'"), ("@64", "with tiles or an option"),
                     ("+", "with tiles or an option")):
        with pytest.raises(ValueError, match=why):
            bb.parse_variants(bad)
    assert bb.main(["--variants", "+fast", "--dry-run"]) == 2


class _Grad:
    """The few tensor methods ``grad_rel_diff`` calls, over a list of floats."""

    def __init__(self, xs):
        self.xs = list(xs)

    def float(self):
        return self

    def abs(self):
        return _Grad(abs(x) for x in self.xs)

    def max(self):
        return max(self.xs)

    def __sub__(self, other):
        return _Grad(a - b for a, b in zip(self.xs, other.xs))


def test_grad_rel_diff_is_per_launcher_and_nan_where_refused():
    def res(*grads):
        return (1.0, 1.0, 10, tuple(_Grad(g) for g in grads))
    flash = res([1.0, -4.0], [2.0], [0.5])
    variant = res([1.0, -3.0], [2.0], [0.5])       # dq off by 1 of flash's largest 4
    assert bb.grad_rel_diff(variant, flash) == pytest.approx(0.25)
    assert bb.grad_rel_diff(flash, flash) == 0.0
    assert math.isnan(bb.grad_rel_diff(None, flash))
    assert math.isnan(bb.grad_rel_diff(variant, None))


def test_host_burst_is_at_most_the_loop_length(monkeypatch):
    import sys
    log: list = []
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(log))
    for n, want in ((3, 3), (200, bb.HOST_BURST)):
        calls = []
        assert bb._host_time(lambda: calls.append(1), n) >= 0
        assert len(calls) == want

"""Measure mode of the backward study: each backward kernel alone (dK/dV or dQ), gated against an
fp32 reference, timed with CUDA events beside SDPA's flash and cuDNN backward, then (through the
one profiling target, ``experiments.measurement.target``) its ncu counters.

What is measured and why. The study asks whether the sawtooth order pays in the backward where it
does not in the forward: a dK/dV CTA streams the Q, dO, LSE and Δ tiles of its head as the
forward's CTA streams K and V, so a persistent CTA that alternates its scan per owned K/V tile
finds the end of its last scan in L2. Each case is one pass of ``kernels.device.fmha_bwd`` launched
by itself (``kernels.host.backward.BackwardLaunch.passes``): the training forward that makes the
log-sum-exp and a dQ pass that makes Δ run before, outside the timed and profiled launches, so
the counters are that one kernel's (a dQ case's include making Δ again: one O tile per item).

- Gate: the study's builds (same tiles, hints, order and schedule constants; the persistent
  launch of the same P) run on a smaller problem of the same class (``GATE_S`` rows, so each CTA
  still owns several tiles and the sawtooth alternates), outputs poisoned with NaN, and are
  compared with fp32 gradients (autograd through SDPA on upcast inputs): a pass passes when its
  largest error is at most twice SDPA's own fp16 error plus ``ABS_TOL``. At the study's length an
  fp32 reference does not fit in memory; there each pass runs once on poisoned buffers, must
  write every element (no NaN), and its largest difference from SDPA flash's gradient, relative
  to flash's largest gradient, is recorded.
- Time: cold L2, the cases of a problem and the two peers alternated launch by launch, ``reps``
  samples each. A peer's sample is its whole backward (``torch.autograd.grad`` on a kept graph:
  its own Δ kernel and both passes), ours one pass: the peers are a scale, not a race.
"""
from __future__ import annotations

import dataclasses

from spec import Arch, Backend
from spec.case import Case
from spec.records import Metric, Row
from spec.variant import BackwardPass

from .correctness import ABS_TOL, random_inputs
from .measure import Outcome, by_problem, case_row
from .timing import time_interleaved

GATE_S = 8192
"""Sequence length of the correctness gate (the study's length needs an fp32 reference of
S² scores per head; at 8192 rows and 64-row tiles a dK/dV CTA of 132 still owns several tiles)."""
FLOPS_PER_FORWARD = {BackwardPass.DKDV: 2.0, BackwardPass.DQ: 1.5}
"""A pass's tensor-core work over the forward's (four and three products per step against two)."""
BACKWARD_FLOPS = 2.5
"""The whole backward over the forward (what the peers' samples do)."""


def config_of(case: Case):
    """The ``kernels.host.backward.BackwardConfig`` of a case: its tiles, occupancy, order and
    schedule in both passes (only the case's pass is launched)."""
    from kernels.host.backward import BackwardConfig, PassConfig
    v = case.variant
    pc = PassConfig(v.tiles, v.occupancy, None, v.order, v.schedule)
    return BackwardConfig(pc, pc, split=1)


@dataclasses.dataclass
class Setup:
    """Inputs, the training forward's output and LSE, Δ, and the gradient buffers of a problem."""

    q: object
    k: object
    v: object
    dout: object
    out: object
    lse: object
    delta: object
    grads: tuple


def setup(problem, seed: int) -> Setup:
    """Seeded inputs and upstream gradient, the cuTile training forward (``out``, ``lse``) and Δ
    (made by one dQ pass), and NaN-poisoned gradient buffers."""
    import torch

    from kernels.host import backend, backward
    q, k, v = random_inputs(problem, seed)
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    dout = torch.randn(q.shape, generator=gen, device="cuda", dtype=q.dtype)
    lse = backward.stat_buffer(q)
    out = backend.attention(q, k, v, causal=problem.causal, lse=lse)
    delta = backward.stat_buffer(q)
    grads = tuple(torch.full_like(t, float("nan")) for t in (q, k, v))
    s = Setup(q, k, v, dout, out, lse, delta, grads)
    from kernels.host.backend import default_variant
    from kernels.host.backward import launch_for
    from spec import detect
    config = default_variant(problem, detect(), training=True).backward
    launch_for(problem, config).passes(*args_of(s))["dq"]()      # makes Δ
    return s


def args_of(s: Setup) -> tuple:
    return (s.dout, s.q, s.k, s.v, s.out, s.lse, s.delta, *s.grads)


def pass_launcher(case: Case, s: Setup):
    """The case's one kernel on ``s``'s buffers (a callable)."""
    from kernels.host.backward import launch_for
    return launch_for(case.problem, config_of(case)).passes(*args_of(s))[case.variant.bwd.value]


def written(case: Case, s: Setup) -> tuple:
    """The gradient buffers the case's pass writes: (dK, dV) or (dQ,)."""
    return s.grads[1:] if case.variant.bwd == BackwardPass.DKDV else s.grads[:1]


def reference_grads(s: Setup, causal: bool):
    """fp32 gradients (autograd through SDPA on upcast inputs) and SDPA's own fp16 error on them."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def grads(q, k, v, dout, backends):
        q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
        with sdpa_kernel(backends):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return torch.autograd.grad(o, (q, k, v), dout)
    ref = grads(s.q.float(), s.k.float(), s.v.float(), s.dout.float(),
                [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])
    own = grads(s.q, s.k, s.v, s.dout, [SDPBackend.FLASH_ATTENTION])
    return ref, [float((a.float() - r).abs().max()) for a, r in zip(own, ref)]


def _gate(case: Case, arch: Arch, res: Outcome, gate_setups: dict, *, run: str, study: str,
          seed: int) -> bool:
    """The case's build on the gate problem against fp32 gradients; a ``max_abs_err`` row."""
    import torch
    gp = dataclasses.replace(case.problem, S_q=GATE_S, S_kv=GATE_S)
    if gp not in gate_setups:
        s = setup(gp, seed)
        gate_setups[gp] = (s, *reference_grads(s, gp.causal))
    s, ref, peer = gate_setups[gp]
    for g in s.grads:
        g.fill_(float("nan"))
    pass_launcher(dataclasses.replace(case, problem=gp), s)()
    torch.cuda.synchronize()
    idx = (1, 2) if case.variant.bwd == BackwardPass.DKDV else (0,)
    errs = [float(torch.nan_to_num((s.grads[i].float() - ref[i]).abs(), nan=float("inf")).max())
            for i in idx]
    tols = [2 * peer[i] + ABS_TOL for i in idx]
    ok = all(e <= t for e, t in zip(errs, tols))
    names = [("dQ", "dK", "dV")[i] for i in idx]
    note = ", ".join(f"{n} max|err| {e:.2e} (tol {t:.2e})" for n, e, t in zip(names, errs, tols))
    note = f"{'ok' if ok else 'FAIL'} at S={GATE_S} against fp32 autograd: {note}"
    res.rows.append(case_row(case, case.problem, Metric.MAX_ABS_ERR, max(errs), run=run,
                             study=study, arch=arch.name, note=note))
    if not ok:
        res.failed[case.id] = note
    return ok


def _peers(s: Setup, causal: bool) -> tuple[dict, dict]:
    """SDPA flash and cuDNN backward launchers on kept graphs, and flash's gradients."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k, v = (t.detach().requires_grad_(True) for t in (s.q, s.k, s.v))
    fns, flash = {}, None
    for name, be in (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                     ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(be):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            g = torch.autograd.grad(o, (q, k, v), s.dout, retain_graph=True)
        except RuntimeError:
            continue          # a backend that refuses the shape is missing, not faked
        flash = g if flash is None else flash
        fns[name] = (lambda o=o: torch.autograd.grad(o, (q, k, v), s.dout, retain_graph=True))
    return fns, flash


def measure_backward(cases: list[Case], arch: Arch, *, run: str, study: str, reps: int,
                     seed: int, timed: bool = True, progress=None) -> Outcome:
    """The study's measure hook (``check_and_time``'s signature): per problem, gate every case,
    check its full-length output, time the passing ones beside the peers (module docstring)."""
    import torch
    if any(c.variant.bwd is None or c.variant.backend != Backend.CUTILE for c in cases):
        raise ValueError("the backward study measures cuTile backward passes (variants ending "
                         "in .dkdv or .dq)")
    res, gates = Outcome(), {}
    for problem, group in by_problem(cases).items():
        passed = [c for c in group if _gate(c, arch, res, gates, run=run, study=study, seed=seed)]
        gates.clear()
        torch.cuda.empty_cache()
        s = setup(problem, seed)
        peers, flash = _peers(s, problem.causal) if timed else ({}, None)
        fns = {}
        for c in passed:
            fn = pass_launcher(c, s)
            for g in written(c, s):
                g.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            idx = (1, 2) if c.variant.bwd == BackwardPass.DKDV else (0,)
            nan = any(bool(torch.isnan(s.grads[i]).any()) for i in idx)
            diff = float("nan") if flash is None else max(
                float((s.grads[i].float() - flash[i].float()).abs().max())
                / max(float(flash[i].abs().max()), 1e-30) for i in idx)
            res.rows.append(case_row(c, problem, Metric.GRAD_REL_DIFF, diff, run=run,
                                     study=study, arch=arch.name,
                                     note=f"S={problem.S_q}: NaN left={nan}; max|ours - flash| "
                                          "/ max|flash| of the pass's gradients"))
            if nan:
                res.failed[c.id] = f"S={problem.S_q}: the pass left NaN in its poisoned output"
                continue
            res.passed.append(c)
            fns[c.id] = fn
        samples = time_interleaved(fns | peers, reps=reps, warmup=1, l2="cold",
                                   l2_bytes=arch.l2_bytes) if timed and fns else {}
        _time_rows(res, samples, passed, problem, arch, run=run, study=study)
        del s, peers, flash, fns
        torch.cuda.empty_cache()
        if progress is not None:
            progress(len(group))
    res.summary += _summary(res.rows)
    return res


def _time_rows(res: Outcome, samples: dict, cases: list[Case], problem, arch: Arch, *,
               run: str, study: str) -> None:
    for who, smp in samples.items():
        case = next((c for c in cases if c.id == who), None)
        subject = case if case is not None else who
        flops = problem.flops * (FLOPS_PER_FORWARD[case.variant.bwd] if case else BACKWARD_FLOPS)
        what = f"the {case.variant.bwd.value} kernel alone" if case else "the whole backward"
        for i, ms in enumerate(smp.ms):
            res.rows.append(case_row(subject, problem, Metric.KERNEL_TIME_MS, ms, run=run,
                                     study=study, arch=arch.name, sample=i,
                                     note=f"l2=cold; {what}"))
        res.rows.append(case_row(subject, problem, Metric.TFLOPS, smp.tflops(flops), run=run,
                                 study=study, arch=arch.name,
                                 note=f"median of {len(smp.ms)}, spread ±{100 * smp.spread:.1f}%"
                                      f"; {what}"))


def _summary(rows: list[Row]) -> list[str]:
    """One line per case: median kernel time."""
    import statistics
    by: dict = {}
    for r in rows:
        if r.metric == Metric.KERNEL_TIME_MS:
            by.setdefault((r.variant, r.causal), []).append(r.value)
    return [f"{v} causal={c}: median {statistics.median(x):.2f} ms of {len(x)}"
            for (v, c), x in by.items()]

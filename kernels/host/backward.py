"""The cuTile backward pass on the host: configuration, buffers and the launches.

    >>> from kernels import backend, backward
    >>> lse = backward.stat_buffer(q)                       # fp32 [B, H, S_q]
    >>> out = backend.attention(q, k, v, causal=True, lse=lse)      # the training forward
    >>> dq, dk, dv = backward.attention_backward(dout, q, k, v, out, lse, causal=True)

``attention_backward`` runs ``fmha_bwd.bwd_dq`` (which also makes Δ), ``bwd_dkdv`` (then
``bwd_split_sum`` where the pass splits a group's query heads) on torch's current stream: two
launches a step (three with the split); with ``BackwardConfig.one_pass`` (the default without a
mask at D=128, and at D=64 from 2048 query rows on) ``bwd_prep``, ``bwd_dkdv`` making dQ too,
``bwd_dq_cast``: three launches, five MMAs per tile pair instead of seven. Nothing is
synchronised, so a CUDA graph captures them. The scan order and CTA schedule of the two main
passes are spec objects (``ScanOrder``, ``CtaSchedule``: the grid launch or P persistent CTAs,
q-major or head-major), so the locality studies of the forward apply to the backward unchanged.

The default configuration (``kernels.host.backend.default_variant`` with ``training=True``, the one
place both halves of a training step are resolved) comes from a fitted work model of each pass, the
forward's kind of rule (``kernels.rules.backward_choice``): per pass, the candidate tiles and hints
of least predicted time under the constants of ``kernels/rules/configs/h100-backward.json`` (written
by ``python -m experiments.tuning.rulefit --backward``; fitted on the H100 and read on every GPU),
the grid launch and linear scans; the two passes choose independently. Where there are no constants
for the problem's (D, causal) key (a fit whose data held no problem of that D at either mask, or a
package installed without its data files) both passes take ``BASE``: 64-row Q tiles and 128-row K/V
tiles with 8 worker warps (384 threads; with 256 threads the fp32 dK and dV accumulators of a
128-row K/V tile at D=128 spill), the configuration every backward build was first checked with.
tests/cpu/kernels/test_cutile_backward_compile.py checks that every build the rule can choose is
spill-free.

``trace_backward(name, dout, q, k, v, out, lse, ...)`` runs one pass's trace build and returns
what it visited per CTA and step (``BackwardLaunch.trace``), to compare with
``spec.backward_trace.backward_visits``.
"""
from __future__ import annotations

from dataclasses import replace

from kernels.rules.backward_config import (  # noqa: F401 - the backward's names, re-exported
    BACKWARD_SCHEDULES,
    BASE,
    PASSES,
    BackwardConfig,
    PassConfig,
    group_split,
)
from spec.family import BadInput, UnsupportedVariant
from spec.orders import ScanOrder
from spec.problem import Problem, cdiv
from spec.schedules import CtaSchedule, ScheduleKind, WorkOrder


def check_pass(name: str, cfg: PassConfig) -> None:
    """One line for what the backward kernels do not build."""
    if cfg.schedule.kind not in BACKWARD_SCHEDULES:
        raise UnsupportedVariant(
            f"backward {name} schedule {cfg.schedule.label!r}: the backward kernels take the "
            "grid launch ('grid') or P persistent CTAs ('static<P>', 'static<P>h')")
    for axis, t in (("m", cfg.tiles.m), ("n", cfg.tiles.n)):
        if t & (t - 1) or not 16 <= t <= 256:
            raise UnsupportedVariant(f"backward {name} tile {axis}={t}: powers of two 16..256")


def stat_buffer(q):
    """An fp32 [B, H, S_q] buffer for the log-sum-exp or Δ, its row stride padded to 16 bytes
    (so the kernels' loads of it are TMA copies whatever S_q is): ``spec.front.lse_buffer``."""
    from spec.front import lse_buffer
    return lse_buffer(q)


def _grid(cfg: PassConfig, n_items: int) -> int:
    if cfg.schedule.kind == ScheduleKind.GRID:
        return n_items
    return max(1, min(cfg.schedule.num_ctas, n_items))


def trace_steps(problem: Problem, tiles, name: str, split: int, n_ctas: int) -> int:
    """Steps of pass ``name``'s trace record per CTA: a bound on any CTA's steps (its items
    times the longest item's: dK/dV a K/V tile's scan of every Q tile of its query heads, dQ a
    Q tile's of every K/V tile) and one column to spare."""
    p = problem
    if name == "dkdv":
        n_items = p.B * p.H_kv * split * cdiv(p.S_kv, tiles.n)
        per_item = p.H // (p.H_kv * split) * cdiv(p.S_q, tiles.m)
    else:
        n_items = p.B * p.H * cdiv(p.S_q, tiles.m)
        per_item = cdiv(p.S_kv, tiles.n)
    return cdiv(n_items, n_ctas) * per_item + 1


SUM_TILE_N = 64
"""Rows per CTA of the backward's row-wise launches: the split's sum (``fmha_bwd.bwd_split_sum``)
and the one pass's ``bwd_prep`` and ``bwd_dq_cast``."""


class BackwardLaunch:
    """The launches of one backward call key (shapes, strides, dtypes, config): dQ (and Δ), dK/dV
    (and, with the group split, the sum of its partials); with ``config.one_pass`` Δ and a zeroed
    fp32 dQ sum, dK/dV and dQ, the split's sum, dQ's cast."""

    __slots__ = ("dq", "dkdv", "sum", "prep", "cast", "raw_stream", "launch", "device",
                 "problem", "split", "partial_shape", "config")

    def __init__(self, problem: Problem, cfg: BackwardConfig, scale: float, level: int,
                 device_index: int):
        import cuda.tile as ct
        import torch

        from kernels.device import fmha, fmha_bwd
        for name in PASSES:
            check_pass(name, getattr(cfg, name))
        self.problem = problem
        self.config = cfg
        qk_scale = fmha.qk_scale_for(problem.D, max(level, 2), scale)
        G = problem.H // problem.H_kv
        a = cfg.dkdv
        n_items = problem.B * problem.H_kv * cdiv(problem.S_kv, a.tiles.n)
        sms = torch.cuda.get_device_properties(device_index).multi_processor_count
        self.split = cfg.split or group_split(n_items, G, 2 * sms * (a.occupancy or 1), sms)
        if G % self.split:
            raise UnsupportedVariant(f"backward split {self.split} does not divide the "
                                     f"{G} query heads per K/V head")
        self.partial_shape = (problem.B, problem.H_kv * self.split, problem.S_kv, problem.D)
        self.sum = (fmha_bwd.get_kernel("split_sum"),
                    (cdiv(problem.S_kv, SUM_TILE_N), problem.B * problem.H_kv, 2),
                    (self.split, problem.D, SUM_TILE_N))
        self.dkdv = (fmha_bwd.get_kernel("dkdv", a.occupancy, a.worker_warps),
                     (_grid(a, n_items * self.split), 1, 1),
                     (qk_scale, scale, problem.H_kv * self.split, self.split, problem.D,
                      a.tiles.m, a.tiles.n, problem.causal, problem.S_kv % a.tiles.n == 0,
                      cfg.one_pass, int(a.order.kind), a.order.group, int(a.schedule.kind),
                      int(a.schedule.work_order)))
        rows = (cdiv(problem.S_q, SUM_TILE_N), problem.B * problem.H, 1)
        self.prep = (fmha_bwd.get_kernel("prep"), rows, (problem.D, SUM_TILE_N))
        self.cast = (fmha_bwd.get_kernel("dq_cast"), rows, (scale, problem.D, SUM_TILE_N))
        d = cfg.dq
        n_items = problem.B * problem.H * cdiv(problem.S_q, d.tiles.m)
        self.dq = (fmha_bwd.get_kernel("dq", d.occupancy, d.worker_warps),
                   (_grid(d, n_items), 1, 1),
                   (qk_scale, scale, problem.H, G, problem.D, d.tiles.m, d.tiles.n,
                    problem.causal, problem.S_kv % d.tiles.n == 0, int(d.order.kind),
                    d.order.group, int(d.schedule.kind), int(d.schedule.work_order)))
        self.raw_stream = torch._C._cuda_getCurrentRawStream
        self.launch = ct.launch
        self.device = device_index

    def __call__(self, dout, q, k, v, out, lse, delta, dq, dk, dv) -> None:
        s = self.raw_stream(self.device)
        if self.config.one_pass:
            acc = self.dq_sum(q)
            kern, grid, tail = self.prep
            self.launch(s, grid, kern, (out, dout, delta, acc) + tail)
        else:
            acc = dk                     # not touched by the two passes' dK/dV build
            kern, grid, tail = self.dq
            self.launch(s, grid, kern, (q, k, v, out, dout, lse, delta, dq) + tail)
        kern, grid, tail = self.dkdv
        if self.split == 1:
            self.launch(s, grid, kern, (q, k, v, dout, lse, delta, dk, dv, acc) + tail)
        else:
            pk, pv = self.partials(q)
            self.launch(s, grid, kern, (q, k, v, dout, lse, delta, pk, pv, acc) + tail)
            kern, grid, tail = self.sum
            self.launch(s, grid, kern, (pk, pv, dk, dv) + tail)
        if self.config.one_pass:
            kern, grid, tail = self.cast
            self.launch(s, grid, kern, (acc, dq) + tail)

    def run(self, dout, q, k, v, out, lse):
        """(dq, dk, dv) in new buffers: Δ and the gradients allocated, the launches made (the
        allocators read from ``torch`` per call, which tests/gpu/poison.py patches)."""
        import torch
        dout = _ready(dout)
        delta = stat_buffer(q)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        self(dout, q, k, v, out, lse, delta, dq, dk, dv)
        return dq, dk, dv

    def dq_sum(self, q):
        """The one pass's fp32 dQ sum [B, H, S_q, D] (zeroed by its ``bwd_prep``)."""
        import torch
        return torch.empty(q.shape, dtype=torch.float32, device=q.device)

    def partials(self, q):
        """The fp32 partial dK, dV buffers of a split launch."""
        import torch
        return (torch.empty(self.partial_shape, dtype=torch.float32, device=q.device),
                torch.empty(self.partial_shape, dtype=torch.float32, device=q.device))

    def passes(self, dout, q, k, v, out, lse, delta, dq, dk, dv) -> dict:
        """Each pass's launch alone (name -> callable), for timing a pass by itself: "dq" (which
        writes ``delta``) and "dkdv" (which reads it: launch "dq" once before); with
        ``one_pass`` "prep" in place of "dq" (it writes ``delta`` and zeroes the dQ sum that
        "dkdv" reduces into)."""
        def one(name, args):
            kern, grid, tail = getattr(self, name)
            return lambda: self.launch(self.raw_stream(self.device), grid, kern, args + tail)
        grads = (dk, dv) if self.split == 1 else self.partials(q)
        if self.config.one_pass:
            acc = self.dq_sum(q)
            return {"prep": one("prep", (out, dout, delta, acc)),
                    "dkdv": one("dkdv", (q, k, v, dout, lse, delta) + grads + (acc,))}
        return {"dq": one("dq", (q, k, v, out, dout, lse, delta, dq)),
                "dkdv": one("dkdv", (q, k, v, dout, lse, delta) + grads + (dk,))}

    def trace(self, name: str, dout, q, k, v, out, lse):
        """The trace build of pass ``name`` ("dkdv" or "dq": ``fmha_bwd.bwd_dkdv_trace``,
        ``bwd_dq_trace``, the pass's kernel with the same constants that also records what it
        reads; for "dkdv" after the dQ pass that makes its Δ); returns its record, int32
        [n_ctas, steps, 4] of (b, query head, Q tile, K/V tile) per CTA and step, -1 where
        nothing was recorded. ``steps`` bounds every CTA's
        steps with one column to spare (a kernel that visits more than ``spec.backward_trace``
        prescribes leaves a mark there). Synchronises."""
        import torch

        from kernels.device import fmha_bwd
        if name not in PASSES:
            raise BadInput(f"backward pass {name!r}: one of {', '.join(PASSES)}")
        if self.config.one_pass:
            raise UnsupportedVariant("trace builds record the two-pass backward: pass a "
                                     "BackwardConfig with one_pass=False")
        kern, grid, tail = getattr(self, name)
        pc = getattr(self.config, name)
        steps = trace_steps(self.problem, pc.tiles, name, self.split, grid[0])
        buf = torch.full((grid[0], steps, 4), -1, dtype=torch.int32, device=q.device)
        delta = stat_buffer(q)
        s = self.raw_stream(self.device)
        if name == "dkdv":
            dq, dq_grid, dq_tail = self.dq
            self.launch(s, dq_grid, dq, (q, k, v, out, dout, lse, delta, torch.empty_like(q))
                        + dq_tail)
            grads = ((torch.empty_like(k), torch.empty_like(v)) if self.split == 1
                     else self.partials(q))
            args = (q, k, v, dout, lse, delta) + grads + (grads[0],)
        else:
            args = (q, k, v, out, dout, lse, delta, torch.empty_like(q))
        trace_kern = fmha_bwd.get_kernel(name + "_trace", pc.occupancy, pc.worker_warps)
        self.launch(s, grid, trace_kern, args + (buf,) + tail)
        torch.cuda.synchronize(q.device)
        return buf.cpu().numpy()


_LAUNCHES: dict = {}


def launch_for(problem: Problem, config: BackwardConfig, scale: float | None = None,
               level: int = 6, device_index: int = 0) -> BackwardLaunch:
    """A new ``BackwardLaunch`` (uncached) of ``config`` on ``problem``."""
    from spec.ops import resolve_scale
    return BackwardLaunch(problem, config, resolve_scale(scale, problem.D), level, device_index)


def _ready(t):
    """``t`` if the kernels can read it (last dimension contiguous, no broadcast dimension),
    else a contiguous copy (autograd may hand an expanded gradient, stride 0)."""
    st = t.stride()
    if st[-1] == 1 and (0 not in st or all(s != 0 or n == 1 for s, n in zip(st, t.shape))):
        return t
    return t.contiguous()


def attention_backward(dout, q, k, v, out, lse, *, causal: bool, scale: float | None = None,
                       config: BackwardConfig | None = None, order: str | ScanOrder = "linear",
                       schedule: str | CtaSchedule | None = None, tiles=None, level: int = 6,
                       grads=None):
    """(dq, dk, dv) of ``out = attention(q, k, v, causal, scale)`` for the upstream gradient
    ``dout``; ``lse`` is what the training forward stored (``stat_buffer``). dk, dv have k's
    shape (GQA/MQA: the group's query heads summed). ``config`` (else ``default_variant``'s with
    ``order`` / ``schedule`` / ``tiles``, both passes' (TILE_M, TILE_N)) picks the kernels'
    tiles, hints, scan orders and schedules.
    ``grads``: (dq, dk, dv) buffers to write (the tests poison them), else new ones.

    A repeated call with the same key (shapes, strides, dtypes, device and arguments) looks the
    prepared launches up and launches; the first one checks the tensors and resolves the
    configuration. Under ``torch.use_deterministic_algorithms(True)`` the default takes the two
    passes (bitwise repeatable) and a ``one_pass`` config is refused."""
    import torch
    dout = _ready(dout)
    try:
        key = (q.shape, q.stride(), k.shape, k.stride(), v.stride(), dout.stride(), out.stride(),
               lse.shape, lse.stride(), lse.dtype, q.dtype, k.dtype, v.dtype, dout.dtype,
               out.dtype, q.device, causal, scale, config, order, schedule, tiles, level,
               torch.are_deterministic_algorithms_enabled())
        launch = _LAUNCHES.get(key)
    except TypeError:
        key, launch = None, None
    if launch is None:
        launch = _new_backward(dout, q, k, v, out, lse, causal, scale, config, order, schedule,
                               level, tiles)
        if key is not None:
            _LAUNCHES[key] = launch
    if grads is None:
        return launch.run(dout, q, k, v, out, lse)
    launch(dout, q, k, v, out, lse, stat_buffer(q), *grads)
    return tuple(grads)


class BackwardPlan:
    """The backward prepared for one training forward's launch (``kernels.host.backend.Launch``
    with ``save_lse``) and one choice of backward order, schedule and tiles: the forward's launch
    key already pinned q, k, v's shapes, strides and dtypes and the layouts of the out and lse it
    made, so a step's backward looks nothing up but the determinism flag (read when it runs, as
    ``attention_backward`` reads it). ``plan(dout, q, k, v, out, lse)`` -> (dq, dk, dv)."""

    __slots__ = ("causal", "scale", "order", "schedule", "tiles", "level", "launches")

    def __init__(self, causal, scale, order, schedule, tiles, level):
        self.causal, self.scale, self.level = causal, scale, level
        self.order, self.schedule, self.tiles = order, schedule, tiles
        self.launches: dict = {}

    def __call__(self, dout, q, k, v, out, lse):
        import torch
        det = torch.are_deterministic_algorithms_enabled()
        launch = self.launches.get(det)
        if launch is None:
            # checked as attention_backward checks, out standing for dout (autograd hands a
            # gradient of out's shape, dtype and device; run() makes its layout one we read)
            launch = self.launches[det] = _new_backward(
                out, q, k, v, out, lse, self.causal, self.scale, None, self.order,
                self.schedule, self.level, self.tiles)
        return launch.run(dout, q, k, v, out, lse)


def plan_for(forward, *, causal: bool, scale, order, schedule, tiles, level: int) -> BackwardPlan:
    """The ``BackwardPlan`` of training forward launch ``forward`` for this backward order,
    schedule and tiles (made once, then kept in ``forward.backward_plans``)."""
    key = (order, schedule, tiles)
    plan = forward.backward_plans.get(key)
    if plan is None:
        plan = forward.backward_plans[key] = BackwardPlan(causal, scale, order, schedule, tiles,
                                                          level)
    return plan


def trace_backward(name: str, dout, q, k, v, out, lse, *, causal: bool,
                   scale: float | None = None, config: BackwardConfig | None = None,
                   order: str | ScanOrder = "linear", schedule: str | CtaSchedule | None = None,
                   level: int = 6) -> dict:
    """Run the trace build of backward pass ``name`` ("dkdv" or "dq") on the arguments of
    ``attention_backward``: ``visits``, int32 [n_ctas, steps, 4] (``BackwardLaunch.trace``),
    to compare with ``spec.backward_trace.backward_visits(PassGrid(problem, tiles, name,
    split), schedule, order).table()``; ``tiles`` and ``split``, the pass's tiles and the dK/dV
    group split it ran with."""
    dout = _ready(dout)
    launch = _new_backward(dout, q, k, v, out, lse, causal, scale, config, order, schedule,
                           level)
    return {"visits": launch.trace(name, dout, q, k, v, out, lse),
            "tiles": getattr(launch.config, name).tiles, "split": launch.split}


def _new_backward(dout, q, k, v, out, lse, causal, scale, config, order, schedule, level,
                  tiles=None):
    import torch

    from spec.family import problem_from_tensors
    from spec.ops import resolve_scale
    problem = problem_from_tensors(q, k, v, causal, dout)
    problem_from_tensors(q, k, v, causal, out)
    if tuple(lse.shape) != (problem.B, problem.H, problem.S_q) or lse.dtype != torch.float32 \
            or lse.stride(-1) != 1:
        raise BadInput(f"lse {tuple(lse.shape)} {lse.dtype}: the training forward's fp32 "
                       f"[B, H, S_q] = {(problem.B, problem.H, problem.S_q)} log-sum-exp "
                       "(kernels.host.backward.stat_buffer)")
    if level < 2:
        raise UnsupportedVariant(f"level={level}: the backward reads a log-sum-exp in exp2 units, "
                                 "which the forward stores from level 2 on")
    sc = resolve_scale(scale, problem.D)
    deterministic = torch.are_deterministic_algorithms_enabled()
    if config is None:
        from kernels.host.backend import default_variant
        from spec.arch import detect
        config = default_variant(problem, detect(), order=order, training=True,
                                 backward_schedule=schedule, backward_tiles=tiles).backward
        if deterministic and config.one_pass:
            config = replace(config, one_pass=False)
    elif deterministic and config.one_pass:
        raise UnsupportedVariant("a one_pass backward sums dQ in no fixed order, and "
                                 "torch.use_deterministic_algorithms is on: pass "
                                 "one_pass=False (two passes, bitwise repeatable)")
    with torch.cuda.device(q.device):
        return BackwardLaunch(problem, config, sc, level, q.device.index)


__all__ = ["BackwardConfig", "BackwardPlan", "PassConfig", "attention_backward", "plan_for",
           "stat_buffer", "trace_backward", "WorkOrder"]

"""Speed as a user sees it: host time per call and eager call time, beside SDPA flash and cuDNN.

Two measurements, both of the public user functions (``kernels.attention``,
``cuda_baseline.attention``) and of SDPA's flash and cuDNN backends called the way a model calls
them:

- **host time per call** (``host_us_per_call``): wall time of the Python call alone, over
  ``blocks`` blocks of ``per_block`` back-to-back calls; the GPU is synchronized between blocks
  (outside the timed region), so at most ``per_block`` launches are queued and the host never
  waits for the GPU inside a block. What a caller without CUDA graphs pays per call, whatever the
  kernel's time. SDPA runs inside one ``sdpa_kernel`` context entered before the block (the
  context's own cost is not SDPA's).
- **eager call time** (``eager_call_ms``): CUDA events recorded right before and after one call
  on an idle GPU (synchronized first), without the blocking spin of
  ``experiments.measurement.timing``: the start event fires at once, so the interval holds the
  host's enqueue time, the launch latency and the kernel. L2 warm (the inputs were just read by the
  previous call; a model's layer reads what the previous one wrote). Callers alternate call by call.

Re-print a stored hostpath run:
``python -m experiments.speed.eager profiles/h100/hostpath-20261126``.

The ``hostpath`` study (``experiments.registry.studies``) runs ``measure_hostpath``: per problem
each family's ``attention()`` through the correctness gate (a NaN-poisoned ``out``), then host time
per call of: ``attention()`` (the eager path), the ``torch.library`` operator called through the
dispatcher (``torch.ops.sawtooth.*``: what a compiled graph calls), the prepared launch alone
(the floor of the host path: no key, no lookup, no allocation), SDPA flash and cuDNN; then the
eager call time of the same callers. The shapes study adds the eager call time of each family's
``attention()`` and the peers to its kernel times (``eager_rows``).
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Callable

from spec import Problem
from spec.case import Case
from spec.records import UNITS, Metric, Row, Source, case_fields

EAGER_CALL_MS = Metric.EAGER_CALL_MS
"""Metric: CUDA events around one eager call on an idle GPU (host included), L2 warm."""
HOST_US_BAR = 20.0
"""The host-time bar: at most 20 us of host time per call for both families."""
PER_BLOCK = 100
BLOCKS = 100           # 10,000 calls per caller


def row(who: str, backend: str, problem: Problem, metric: str, value: float, *, run: str,
        study: str, arch: str, sample: int = 0, note: str = "", variant=None,
        unit: str | None = None) -> Row:
    """A result row for a caller ``who`` (e.g. ``cutile.attention``; the ``variant`` column) of
    ``backend`` (``cutile``, ``cuda`` or the peer's name), with the launched variant's tiles,
    order and schedule when there is one."""
    fields = case_fields(problem, variant) if variant is not None else case_fields(problem)
    fields.update(variant=who, backend=backend)
    fields.setdefault("order", "")
    fields.setdefault("schedule", "")
    fields.setdefault("occupancy", None)
    fields.setdefault("tile_m", 0)
    fields.setdefault("tile_n", 0)
    return Row(run=run, study=study, arch=arch, metric=metric, value=float(value),
               unit=UNITS.get(metric, "ms") if unit is None else unit,
               source=Source.MEASURED.value, sample=sample, note=note, **fields)


def host_us_per_call(fns: dict[str, Callable[[], None]], *, blocks: int = BLOCKS,
                     per_block: int = PER_BLOCK, enter=None) -> dict[str, list[float]]:
    """Per caller, the mean host us per call of each block (callers alternate block by block).
    ``enter[name]``, when given, is a context manager entered around that caller's blocks."""
    import contextlib

    import torch
    enter = enter or {}
    out: dict[str, list[float]] = {n: [] for n in fns}
    for name, fn in fns.items():                      # warm-up: compile, cache, first touch
        with enter.get(name, contextlib.nullcontext)():
            for _ in range(3):
                fn()
    torch.cuda.synchronize()
    for _ in range(blocks):
        for name, fn in fns.items():
            with enter.get(name, contextlib.nullcontext)():
                t0 = time.perf_counter()
                for _ in range(per_block):
                    fn()
                t1 = time.perf_counter()
            torch.cuda.synchronize()
            out[name].append((t1 - t0) * 1e6 / per_block)
    return out


def loop_wall_ms(fn: Callable[[], object], n: int) -> float:
    """Wall time per call of ``n`` calls, one synchronisation at the end (host work included)."""
    import torch
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / n


def loop_events_ms(fn: Callable[[], object], n: int) -> float:
    """GPU time per call of a loop of ``n`` calls (CUDA events around the loop)."""
    import torch
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    ev[0].record()
    for _ in range(n):
        fn()
    ev[1].record()
    torch.cuda.synchronize()
    return ev[0].elapsed_time(ev[1]) / n


def eager_call_ms(fns: dict[str, Callable[[], None]], *, reps: int = 30,
                  enter=None) -> dict[str, list[float]]:
    """Per caller, ``reps`` eager call times in ms (module docstring), callers alternating;
    ``enter[name]`` is a context manager entered around that caller's call, outside its events."""
    import contextlib

    import torch
    enter = enter or {}
    for name, fn in fns.items():
        with enter.get(name, contextlib.nullcontext)():
            fn()
    torch.cuda.synchronize()
    ev = {n: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)] for n in fns}
    for i in range(reps):
        for name, fn in fns.items():
            with enter.get(name, contextlib.nullcontext)():
                torch.cuda.synchronize()
                start, end = ev[name][i]
                start.record()
                fn()
                end.record()
    torch.cuda.synchronize()
    return {n: [s.elapsed_time(e) for s, e in pairs] for n, pairs in ev.items()}


def sdpa_peers(causal: bool, gqa: bool) -> dict:
    """``{"flash": fn, "cudnn": fn}``: SDPA's two backends as ``fn(q, k, v)`` launchers, each
    call in its backend's context (``enable_gqa`` for grouped K/V heads), for benches that call
    them on fresh tensors (``sdpa_callers`` binds its inputs)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def peer(backend):
        def run(q, k, v):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                      enable_gqa=gqa)
        return run
    return {"flash": peer(SDPBackend.FLASH_ATTENTION), "cudnn": peer(SDPBackend.CUDNN_ATTENTION)}


def sdpa_callers(q, k, v, causal: bool) -> tuple[dict, dict]:
    """(callers, contexts) of SDPA's flash and cuDNN backends that accept the problem: a call is
    ``F.scaled_dot_product_attention`` alone, its backend chosen by the context entered around
    it (``enable_gqa`` for grouped K/V heads, as a model calls it)."""
    import functools

    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    gqa = q.shape[1] != k.shape[1]
    fns, ctx = {}, {}
    for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                          ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
        call = functools.partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal,
                                 enable_gqa=gqa)
        try:
            with sdpa_kernel(backend):
                call()
        except RuntimeError:
            continue            # the backend does not run this shape: no time, not a fake one
        fns[name], ctx[name] = call, functools.partial(sdpa_kernel, backend)
    return fns, ctx


def family_callers(q, k, v, causal: bool, out) -> dict[str, tuple[str, Callable[[], None]]]:
    """{caller: (backend, fn)} of both families: ``attention()`` (the eager path, a new output
    each call), the operator through the dispatcher, and the prepared launch alone into
    ``out``."""
    import functools

    import torch

    import cuda_baseline
    import kernels
    from cuda_baseline.host.launch import launch_for as cuda_launch_for
    from kernels.host.backend import launch_for as cutile_launch_for
    from spec.front import knob_text
    ops = torch.ops.sawtooth
    knobs = {api.family.name: knob_text(api.family.knobs)        # the families' defaults
             for api in (kernels.attention, cuda_baseline.attention)}
    return {
        "cutile.attention": ("cutile", functools.partial(kernels.attention, q, k, v,
                                                         causal=causal)),
        "cutile.op": ("cutile", functools.partial(ops.cutile_attention, q, k, v, causal,
                                                  "linear", None, None, None, None, False,
                                                  "linear", None, None, None, knobs["cutile"])),
        "cutile.launch": ("cutile", functools.partial(cutile_launch_for(q, k, v, causal),
                                                      q, k, v, out)),
        "cuda.attention": ("cuda", functools.partial(cuda_baseline.attention, q, k, v,
                                                     causal=causal)),
        "cuda.op": ("cuda", functools.partial(ops.cuda_attention, q, k, v, causal, "linear",
                                              None, None, None, None, False, "linear", None,
                                              None, None, knobs["cuda"])),
        "cuda.launch": ("cuda", functools.partial(cuda_launch_for(q, k, v, causal),
                                                  q, k, v, out)),
    }


def measure_hostpath(cases: list[Case], arch, *, run: str, study: str, reps: int, seed: int,
                     timed: bool = True, progress=None):
    """The ``hostpath`` study's measure hook (``check_and_time``'s signature; module
    docstring). ``reps`` is the number of eager call samples per caller."""
    import torch

    import cuda_baseline
    import kernels

    from ..measurement.correctness import check, poisoned_like, random_inputs
    from ..measurement.measure import Outcome
    res = Outcome()
    api = {"cutile": kernels.attention, "cuda": cuda_baseline.attention}
    for pr in dict.fromkeys(c.problem for c in cases):
        q, k, v = random_inputs(pr, seed)
        launched = {c.variant.backend.value: c.variant for c in cases if c.problem == pr}
        ok = set()
        for backend, fn in api.items():         # the gate: a poisoned out, the fp32 reference
            o = poisoned_like(q)
            fn(q, k, v, causal=pr.causal, out=o)
            torch.cuda.synchronize()
            verdict = check(o, q, k, v, pr.causal)
            res.rows.append(row(f"{backend}.attention", backend, pr, Metric.MAX_ABS_ERR,
                                verdict.max_err, run=run, study=study, arch=arch.name,
                                note=str(verdict), variant=launched.get(backend), unit=""))
            if verdict.passed:
                ok.add(backend)
            else:
                res.failed[f"{backend}.attention {pr.label}"] = str(verdict)
        out = poisoned_like(q)
        fams = {n: f for n, f in family_callers(q, k, v, pr.causal, out).items() if f[0] in ok}
        peers, ctx = sdpa_callers(q, k, v, pr.causal)
        callers = {n: f for n, (_, f) in fams.items()} | peers
        backend_of = {n: b for n, (b, _) in fams.items()} | {n: n for n in peers}
        host = host_us_per_call(callers, enter=ctx)
        eager = eager_call_ms(callers, reps=max(reps, 5), enter=ctx)
        for name in callers:
            b = backend_of[name]
            var = launched.get(b)
            res.rows += [row(name, b, pr, Metric.HOST_LAUNCH_MS, us / 1e3, run=run, study=study,
                             arch=arch.name, sample=i, variant=var,
                             note=f"mean host time per call over a block of {PER_BLOCK} calls "
                                  f"(block {i} of {len(host[name])})")
                         for i, us in enumerate(host[name])]
            res.rows += [row(name, b, pr, EAGER_CALL_MS, ms, run=run, study=study,
                             arch=arch.name, sample=i, variant=var,
                             note="l2=warm; events around one call on an idle GPU, host "
                                  "included")
                         for i, ms in enumerate(eager[name])]
        res.summary += hostpath_lines(pr, host, eager)
        res.passed += [c for c in cases if c.problem == pr and c.variant.backend.value in ok]
        del q, k, v, out
        torch.cuda.empty_cache()
        if progress is not None:
            progress(sum(c.problem == pr for c in cases))
    return res


def hostpath_lines(pr: Problem | None, host: dict, eager: dict) -> list[str]:
    """The summary of one problem: median host us per call and median eager call time per
    caller, and the host-time bar for the two ``attention()`` callers."""
    label = "<problem>" if pr is None else pr.label
    lines = [f"{label}: host us per call (median of {len(next(iter(host.values())))} blocks "
             f"of {PER_BLOCK}), eager call time (median, l2 warm)"]
    for name in host:
        h, e = statistics.median(host[name]), statistics.median(eager[name])
        bar = ""
        if name.endswith(".attention"):
            bar = f"  [bar <= {HOST_US_BAR:.0f} us: {'met' if h <= HOST_US_BAR else 'MISSED'}]"
        lines.append(f"  {name:18s} host {h:7.1f} us   eager {e * 1e3:8.1f} us{bar}")
    return lines


def eager_rows(problem: Problem, q, k, v, launched: dict, *, run: str, study: str, arch: str,
               reps: int) -> list[Row]:
    """The shapes study's eager call times of one problem: each family's ``attention()`` with
    its defaults (``launched``: backend -> the variant it launches; a family missing there is
    not called) and the SDPA peers."""
    import functools

    import cuda_baseline
    import kernels
    api = {"cutile": kernels.attention, "cuda": cuda_baseline.attention}
    callers = {f"{b}.attention": functools.partial(api[b], q, k, v, causal=problem.causal)
               for b in launched if b in api}
    backend_of = {n: n.split(".")[0] for n in callers}
    peers, ctx = sdpa_callers(q, k, v, problem.causal)
    callers |= peers
    backend_of |= {n: n for n in peers}
    times = eager_call_ms(callers, reps=reps, enter=ctx)
    return [row(n, backend_of[n], problem, EAGER_CALL_MS, ms, run=run, study=study, arch=arch,
                sample=i, variant=launched.get(backend_of[n]),
                note="l2=warm; events around one call on an idle GPU, host included")
            for n, s in times.items() for i, ms in enumerate(s)]


def stored_lines(rows) -> list[str]:
    """``hostpath_lines`` of every problem of a stored hostpath run (rows as dicts; rows of
    other studies are not read)."""
    host: dict = {}
    eager: dict = {}
    for r in rows:
        if r.get("study") != "hostpath":
            continue
        label = (f"b{r['B']}h{r['H']}{'' if r['H_kv'] == r['H'] else 'g' + str(r['H_kv'])}"
                 f"s{r['S_q']}d{r['D']}.{r['dtype']}.{'causal' if r['causal'] else 'full'}")
        if r["metric"] == Metric.HOST_LAUNCH_MS:
            host.setdefault(label, {}).setdefault(r["variant"], []).append(r["value"] * 1e3)
        elif r["metric"] == EAGER_CALL_MS:
            eager.setdefault(label, {}).setdefault(r["variant"], []).append(r["value"])
    lines = []
    for label, h in host.items():
        lines += [ln.replace("<problem>", label) for ln in
                  hostpath_lines(None, h, eager.get(label, {n: [float("nan")] for n in h}))]
    return lines


def print_stored(argv: list[str] | None, prog: str, what: str,
                 lines_of: Callable[[list[dict]], list[str]], missing: str) -> int:
    """Re-print a stored run: the timing rows of the one run directory ``argv`` names (through
    the data door: a committed run is verified), as ``lines_of`` writes them. Exit status 2
    after one line on stderr when the argument is not one run (usage: ``prog <what>``) or the
    run holds nothing to print (``missing``: what it lacks and what to pass)."""
    from analysis.data import DatasetError, timing_rows
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(f"error: usage: python -m {prog} <{what}>", file=sys.stderr)
        return 2
    try:
        rows = timing_rows(Path(argv[0]))
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    lines = lines_of(rows) if rows else []
    if not lines:
        print(f"error: {Path(argv[0])} {missing}", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    return print_stored(argv, "experiments.speed.eager", "hostpath run directory", stored_lines,
                        "has no hostpath rows; pass a hostpath run directory")


if __name__ == "__main__":
    sys.exit(main())

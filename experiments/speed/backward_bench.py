"""Training-speed benchmark of the CUDA twin: forward + backward per call (host included) and the
backward alone, beside PyTorch SDPA's flash and cuDNN backends in the same process, on the
model-shape suites' problems (``experiments.registry.suites.model_problems``).

    python -m experiments.speed.backward_bench --half validation --out runs/bwd.csv
    python -m experiments.speed.backward_bench --half validation --dry-run

Per problem and launcher: q, k, v that require grad and a random output gradient; "fwd+bwd" is
the wall time per call of ``out = attn(q, k, v); torch.autograd.grad(out, (q, k, v), dout)`` in a
loop of n calls with one synchronisation at the end (the host's work is included wherever it is
not hidden behind the GPU's), "bwd" the time per call of the gradient alone on a retained graph
(CUDA events). Median of ``--repeats`` loops, L2 warm (the calls follow each other as in
training). Every launcher of a problem is warmed up (two untimed calls of each loop body) before
any is timed, one untimed loop brings the GPU out of its idle clocks, and the launchers then
take turns, in alternating order per repeat, with Python's collector off. Grouped heads go to
SDPA with ``enable_gqa=True``. Every CUDA row (the default and each variant) also records the
largest difference of its gradients from flash's, relative to flash's largest gradient (a sanity
column, so a variant is checked where it is timed; the correctness bar is
tests/gpu/test_backward_cuda.py); ``fwd_bwd_runs_ms`` and ``bwd_runs_ms`` keep every
repeat's time in the order run; ``fwd_bwd_host_ms`` is the host's time to issue one fwd+bwd call
(``HOST_BURST`` calls, or the loop's n if fewer, from an idle queue, median over repeats): where
it reaches ``fwd_bwd_ms`` the host, not the GPU, sets the pace. The summary prints the geometric
mean of flash / cuda and cudnn / cuda (speed-ups of the CUDA twin; > 1: faster).
"""
from __future__ import annotations

import argparse
import csv
import gc
import math
import statistics
import sys
import time
from pathlib import Path

from experiments.speed.eager import loop_events_ms, loop_wall_ms

FIELDS = ("family", "half", "problem", "launcher", "fwd_bwd_ms", "bwd_ms", "n_calls",
          "grad_rel_diff", "device", "fwd_bwd_runs_ms", "bwd_runs_ms", "fwd_bwd_host_ms")


def _launchers(pr, variants=()):
    from cuda_baseline import attention

    from .eager import sdpa_peers
    out = {"cuda": lambda q, k, v: attention(q, k, v, causal=pr.causal),
           **sdpa_peers(pr.causal, pr.H != pr.H_kv)}
    for name, kw in variants:
        if not _applies(kw, pr):
            continue
        kw = {x: y for x, y in kw.items() if x != "D"}
        out[f"cuda-{name}"] = (lambda kw: lambda q, k, v: attention(q, k, v, causal=pr.causal,
                                                                    **kw))(kw)
    return out


def parse_variants(text: str | None) -> list[tuple[str, dict]]:
    """``--variants``: comma-separated backward configurations of the CUDA twin timed beside
    the default, each ``<TILE_M>x<TILE_N>`` (or nothing: the default tiles), optionally
    ``/<order>/<schedule>``, optionally ``+<option>...`` (build options,
    ``cuda_baseline.build.bwd_source.BWD_OPTION_NAMES``), optionally ``@<D>`` to time it on the
    problems of that head dimension only (e.g. ``64x64``, ``64x128/sawtooth/static132``,
    ``128x128@64``, ``+onepart@128``, ``+onepart+dqsq+dqv4``)."""
    from cuda_baseline.build.bwd_source import parse_bwd_options
    usage = "[<TILE_M>x<TILE_N>][/order[/schedule]][+option...][@D]"
    out = []
    for item in filter(None, (text or "").split(",")):
        body, _, d = item.partition("@")
        cfg, _, opts = body.partition("+")
        parts = cfg.split("/")
        try:
            tiles = tuple(int(x) for x in parts[0].split("x")) if parts[0] else None
            only_d = int(d) if d else None
        except ValueError:
            raise ValueError(f"--variants item {item!r}: {usage}") from None
        if (tiles is not None and len(tiles) != 2) or not (tiles or opts):
            raise ValueError(f"--variants item {item!r}: {usage}, with tiles or an option")
        try:
            parse_bwd_options(opts)
        except ValueError as e:
            raise ValueError(f"--variants item {item!r}: {e}") from None
        kw: dict = {"backward_tiles": tiles}
        if opts:
            kw["backward_options"] = opts
        if len(parts) > 1:
            kw["order"] = parts[1]
        if len(parts) > 2:
            kw["backward_schedule"] = parts[2]
        if only_d is not None:
            kw["D"] = only_d
        out.append((body.lstrip("+").replace("/", "-"), kw))
    return out


def grad_rel_diff(mine, flash) -> float:
    """Largest |difference| of a launcher's gradients from flash's over flash's largest
    gradient (``_measure_all`` results; NaN where either refused the problem)."""
    if mine is None or flash is None:
        return math.nan
    scale = max(float(g.abs().max()) for g in flash[3])
    diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(mine[3], flash[3]))
    return diff / scale


def _applies(kw: dict, pr) -> bool:
    return kw.get("D", pr.D) == pr.D


HOST_BURST = 16
"""Calls per host-time burst (at most the loop's n): few enough that their launches fit the
launch queue, so the host never waits for the GPU while issuing them."""


def _host_time(fn, n: int = HOST_BURST) -> float:
    """The host's time per call to issue ``min(n, HOST_BURST)`` calls from an idle queue (ms):
    where it reaches the fwd+bwd time, the loop is bound by the host, not the GPU. (Long
    problems, whose loops are a few calls, are not made to drain 16 calls per burst.)"""
    import torch
    calls = max(1, min(n, HOST_BURST))
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t = time.perf_counter() - t0
    torch.cuda.synchronize()
    return t * 1e3 / calls


def _prepare(attn, q, k, v, dout):
    """(fwd+bwd step, bwd-alone closure, calls per loop, gradients) of one launcher, after two
    untimed calls of each closure (compile, module load, first-launch and allocator growth)."""
    import torch

    def step():
        out = attn(q, k, v)
        return torch.autograd.grad(out, (q, k, v), dout)
    grads = step()
    step()
    t1 = loop_wall_ms(step, 1)
    n = max(3, min(200, int(200 / max(t1, 1e-3))))
    out = attn(q, k, v)

    def back():
        torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    back()
    back()
    torch.cuda.synchronize()
    return step, back, n, grads


def _measure_all(launchers, q, k, v, dout, repeats: int, label: str):
    """Every launcher warmed up first; then ``repeats`` rounds, each timing every launcher's
    fwd+bwd loop and bwd loop, in the launchers' order on even rounds and reversed on odd ones
    (no launcher always runs first after a problem's set-up). Per launcher: (median fwd+bwd ms,
    median bwd ms, n, gradients), or None where the launcher refused the problem."""
    import torch
    prepared = {}
    for name, attn in launchers.items():
        try:
            prepared[name] = _prepare(attn, q, k, v, dout)
        except RuntimeError as e:   # a peer that refuses the problem
            print(f"{label} {name}: {str(e).splitlines()[0][:120]}", file=sys.stderr)
            prepared[name] = None
    live = [n for n, x in prepared.items() if x is not None]
    fb: dict[str, list[float]] = {n: [] for n in live}
    bw: dict[str, list[float]] = {n: [] for n in live}
    host: dict[str, list[float]] = {n: [] for n in live}
    gc.collect()
    gc.disable()   # no collector pause inside a timed loop (as timeit)
    try:
        if live:   # one untimed loop first: the GPU leaves its idle clocks before any is timed
            step, _, n, _ = prepared[live[0]]
            loop_wall_ms(step, n)
        for r in range(repeats):
            for name in (live if r % 2 == 0 else live[::-1]):
                step, back, n, _ = prepared[name]
                fb[name].append(loop_wall_ms(step, n))
                bw[name].append(loop_events_ms(back, n))
                host[name].append(_host_time(step, n))
    finally:
        gc.enable()
    torch.cuda.synchronize()
    return {name: None if x is None else (statistics.median(fb[name]),
                                           statistics.median(bw[name]), x[2], x[3],
                                           _runs(fb[name]), _runs(bw[name]),
                                           statistics.median(host[name]))
            for name, x in prepared.items()}


def _runs(times: list[float]) -> str:
    """Every repeat's time per call, in the order run (the CSV's ``*_runs_ms``)."""
    return ";".join(f"{t:.4f}" for t in times)


def run(half: str, repeats: int, only: str | None, variants=()):
    import torch

    from cuda_baseline.build.bwd_source import parse_bwd_options
    from cuda_baseline.host.training import warm
    from experiments.measurement.correctness import random_inputs
    from experiments.registry.suites import model_problems
    dev = torch.cuda.get_device_name()
    probs = [pr for _, h, pr in model_problems() if h == half and (not only or only in pr.label)]
    warm(probs, ("linear",))
    for _, kw in variants:
        from spec.schedules import CtaSchedule
        sched = kw.get("backward_schedule")
        warm([pr for pr in probs if _applies(kw, pr)], (kw.get("order", "linear"),),
             (CtaSchedule.parse(sched).kind if sched else CtaSchedule.grid().kind,),
             backward_tiles=(kw["backward_tiles"],),
             options=parse_bwd_options(kw.get("backward_options")))
    rows = []
    for fam, h, pr in model_problems():
        if h != half or (only and only not in pr.label):
            continue
        q, k, v = (t.requires_grad_(True) for t in random_inputs(pr, 0))
        gen = torch.Generator(device="cuda").manual_seed(1)
        dout = torch.randn(q.shape, generator=gen, device="cuda", dtype=q.dtype)
        res = _measure_all(_launchers(pr, variants), q, k, v, dout, repeats, pr.label)
        for name, x in res.items():
            if x is None:
                rows.append([fam, h, pr.label, name, math.nan, math.nan, 0, math.nan, dev, "",
                             "", math.nan])
            else:
                rows.append([fam, h, pr.label, name, x[0], x[1], x[2], math.nan, dev, x[4],
                             x[5], x[6]])
        for r in rows:
            if r[2] == pr.label and r[3].startswith("cuda"):
                r[7] = grad_rel_diff(res.get(r[3]), res.get("flash"))
        del q, k, v, dout, res
        torch.cuda.empty_cache()
        print(" ".join(f"{r[3]} {r[4]:.3f}/{r[5]:.3f}/h{r[11]:.3f}" for r in rows
                       if r[2] == pr.label), pr.label, flush=True)
    return rows


def summary(rows) -> list[str]:
    by = {}
    for r in rows:
        by.setdefault(r[2], {})[r[3]] = r
    lines = []
    mine = sorted({r[3] for r in rows if r[3].startswith("cuda")})
    for measure, col in (("fwd+bwd", 4), ("bwd", 5)):
        for peer in ("flash", "cudnn"):
            for me in mine:
                ratios = [by[p][peer][col] / by[p][me][col] for p in by
                          if peer in by[p] and me in by[p]
                          and by[p][peer][col] == by[p][peer][col] and by[p][me][col] > 0]
                if ratios:
                    gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
                    lines.append(f"{measure}: {peer} / {me} geo-mean {gm:.3f} over "
                                 f"{len(ratios)} problems (min {min(ratios):.3f}, "
                                 f"max {max(ratios):.3f})")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.speed.backward_bench",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--half", choices=("tuning", "validation"), default="validation")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", help="problems whose label contains this")
    ap.add_argument("--variants", help="backward configurations timed beside the default "
                    "(parse_variants): e.g. 64x64,64x128/sawtooth/static132,128x128@64,"
                    "+onepart+dqsq")
    ap.add_argument("--out", help="CSV to write (refused if it exists)")
    ap.add_argument("--dry-run", action="store_true", help="list the problems and exit")
    a = ap.parse_args(argv)
    if a.out and Path(a.out).exists():
        print(f"{a.out} exists; choose a new file", file=sys.stderr)
        return 2
    if a.repeats < 1:
        print(f"--repeats {a.repeats}: at least 1", file=sys.stderr)
        return 2
    try:
        variants = parse_variants(a.variants)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if a.dry_run:
        from experiments.registry.suites import model_problems
        for fam, h, pr in model_problems():
            if h == a.half and (not a.only or a.only in pr.label):
                print(fam, pr.label)
        return 0
    rows = run(a.half, a.repeats, a.only, variants)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        with open(a.out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(FIELDS)
            w.writerows(rows)
    for line in summary(rows):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Training-speed benchmark of the cuTile family: forward + backward per call \
(host included) and the
backward alone, beside PyTorch SDPA's flash and cuDNN backends in the same process, on the
model-shape suites' problems (``experiments.registry.suites.model_problems``), plus the backward's
own configuration choice and its scan-order variant.

    python -m experiments.speed.cutile_backward_bench --out profiles/h100/cutile-backward-<date>
    python -m experiments.speed.cutile_backward_bench --dry-run

Three phases, one process, one GPU:

1. **tune**: each backward pass (dK/dV, dQ) of each candidate configuration
   (``kernels.rules.backward_choice.CANDIDATES``: tiles and hints, grid launch, linear scans),
   kernel time per call (CUDA events, L2 warm, median of repeats), on every selected problem: on the
   tuning half these are the data ``python -m experiments.tuning.rulefit --backward`` fits the
   default's work model on; on the validation half (never fitted) they judge it. ``choice.csv``
   records, from the tuning rows only, the per-(D, causal) configuration of least
   geometric-mean time: the table the fitted rule replaced, kept as its comparison. The
   measured times set nothing: the later phases run the fitted default.
2. **speed** (both halves): per problem, q, k, v that require grad and a random output gradient.
   ``fwd_bwd_ms``: wall time per call of ``out = attn(q, k, v); torch.autograd.grad(out, (q, k, v),
   dout)`` in a loop of n calls with one synchronisation at the end (the host's work included
   where the GPU does not hide it); ``bwd_ms``: the gradient alone on a retained graph (CUDA
   events, n calls). Median of ``--repeats`` loops, the launchers alternated loop by loop.
   Launchers: ``cutile`` (``kernels.attention``), ``flash`` and ``cudnn`` (SDPA backends,
   ``enable_gqa`` for grouped heads). ``host_ms``: the host's time per call alone, the median of
   calls made while the GPU is held by a spin (``time_interleaved``'s hold, launchers
   alternated), so it is the time to enqueue the forward and the backward, whatever the kernels
   take: what an eager training step pays per attention call where the host is the bottleneck.
   Each cuTile row records the largest gradient difference from flash's relative to flash's
   largest gradient (a sanity column; the correctness bar is tests/gpu/test_backward_cutile.py).
3. **order** (both halves): the dK/dV kernel alone (``dkdv_ms``) with persistent CTAs (one wave:
   SMs × the build's CTAs per SM, each owning several K/V tiles) and a linear vs a sawtooth scan of
   the Q tiles, alternated A/B per repeat (the dQ pass stays on the grid launch: its persistent
   causal builds spill, tests/cpu/kernels/test_cutile_backward_compile.py).

4. **split** (grouped-head problems): the whole backward with the default group split of the
   dK/dV pass (``kernels.host.backward.group_split``) vs none, alternated A/B.

Outputs under ``--out``: ``speed.csv``, ``tune.csv``, ``choice.csv``, ``order.csv``, ``split.csv``
and ``manifest.json`` (device, versions, commit). The summary prints flash/cutile and cudnn/cutile
geometric means per half (> 1: cuTile faster) and the lowest cudnn/cutile ratio.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from experiments.measurement.timing import time_interleaved
from experiments.speed.cutile_backward_rows import manifest, summarize, summary, write
from experiments.speed.eager import loop_events_ms, loop_wall_ms

SPEED_FIELDS = ("family", "half", "problem", "launcher", "fwd_bwd_ms", "bwd_ms", "n_calls",
                "grad_rel_diff", "device", "host_ms")
TUNE_FIELDS = ("family", "half", "problem", "pass", "config", "kernel_ms", "device")
ORDER_FIELDS = ("family", "half", "problem", "variant", "dkdv_ms", "device")
SPLIT_FIELDS = ("family", "half", "problem", "variant", "bwd_kernels_ms", "device")


def candidates():
    from kernels.rules.backward_choice import CANDIDATES
    return dict(CANDIDATES)


def _problems(halves, only):
    from experiments.registry.suites import model_problems
    return [(f, h, p) for f, h, p in model_problems()
            if h in halves and (only is None or any(o in p.label for o in only.split(",")))]


def _calls_for(fn) -> int:
    """Calls per timed loop: about 100 ms of work, 3..200."""
    fn()
    ms = loop_wall_ms(fn, 1)
    return max(3, min(200, int(100 / max(ms, 1e-3))))


def step_inputs(pr, grad: bool):
    """Seeded (q, k, v, dout) of ``pr``; q, k, v require grad with ``grad``."""
    import torch

    from experiments.measurement.correctness import random_inputs
    q, k, v = random_inputs(pr, 0)
    if grad:
        q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    gen = torch.Generator(device="cuda").manual_seed(1)
    return q, k, v, torch.randn(q.shape, generator=gen, device="cuda", dtype=q.dtype)


def _kernel_setup(pr, cfg):
    """The backward's buffers and per-pass launchers of ``cfg`` on ``pr``."""
    import torch

    from kernels.host import backend, backward
    q, k, v, dout = step_inputs(pr, grad=False)
    lse = backward.stat_buffer(q)
    out = backend.attention(q, k, v, causal=pr.causal, lse=lse)
    launch = backward.launch_for(pr, cfg, device_index=torch.cuda.current_device())
    bufs = (backward.stat_buffer(q), torch.empty_like(q), torch.empty_like(k),
            torch.empty_like(v))
    return launch, (dout, q, k, v, out, lse) + bufs


def tune(problems, repeats: int, dev: str):
    from kernels.host.backward import BackwardConfig
    cands = candidates()
    rows = []
    for fam, half, pr in problems:
        for name, pc in cands.items():
            launch, args = _kernel_setup(pr, BackwardConfig(pc, pc))
            passes = launch.passes(*args)
            for p in ("dq", "dkdv"):            # dQ first: it writes the Δ dK/dV reads
                try:
                    n = _calls_for(passes[p])
                    ms = statistics.median(loop_events_ms(passes[p], n) for _ in range(repeats))
                    rows.append((fam, half, pr.label, p, name, ms, dev))
                except Exception as e:  # noqa: BLE001 - a build that fails is reported
                    print(f"tune {pr.label} {p} {name}: {type(e).__name__}: {str(e)[:200]}",
                          file=sys.stderr)
        print("tune", pr.label, " ".join(f"{r[3]}:{r[4]}={r[5]:.3f}" for r in rows
                                         if r[2] == pr.label), flush=True)
    return rows


def choose(rows, problems):
    """(D, causal) -> {pass: config name} of least geometric-mean kernel time (tuning rows)."""
    key_of = {pr.label: (pr.D, pr.causal) for _, _, pr in problems}
    logs: dict = {}
    for fam, half, label, p, name, ms, _ in rows:
        if half != "tuning":
            continue
        logs.setdefault((key_of[label], p, name), []).append(math.log(ms))
    best: dict = {}
    for (key, p, name), v in logs.items():
        n_probs = max(len(x) for (k2, p2, _), x in logs.items() if k2 == key and p2 == p)
        if len(v) < n_probs:        # a configuration that failed somewhere is not chosen
            continue
        g = sum(v) / len(v)
        if key not in best or p not in best[key] or g < best[key][p][1]:
            best.setdefault(key, {})[p] = (name, g)
    return {k: {p: n for p, (n, _) in d.items()} for k, d in best.items()}


def step_launchers(pr):
    """{launcher: attn(q, k, v)}: cuTile's attention() and the SDPA peers that take ``pr``."""
    from kernels import attention

    from .eager import sdpa_peers
    return {"cutile": lambda q, k, v: attention(q, k, v, causal=pr.causal),
            **sdpa_peers(pr.causal, pr.H != pr.H_kv)}


def speed(problems, repeats: int, dev: str):
    """Per problem, each launcher's step checked once, then the launchers alternated: each
    repeat times every launcher's loop in turn (the host-bound steps of small problems drift
    with the host's state, which the alternation spreads over all launchers alike)."""
    import torch
    rows = []
    for fam, half, pr in problems:
        q, k, v, dout = step_inputs(pr, grad=True)
        grads, live = {}, {}
        for name, attn in step_launchers(pr).items():
            def step(attn=attn):
                out = attn(q, k, v)
                return torch.autograd.grad(out, (q, k, v), dout)
            try:
                grads[name] = step()
                live[name] = (step, attn, _calls_for(step))
            except RuntimeError as e:   # a peer that refuses the problem
                print(f"{pr.label} {name}: {str(e).splitlines()[0][:160]}", file=sys.stderr)
                rows.append([fam, half, pr.label, name, math.nan, math.nan, 0, math.nan, dev,
                             math.nan])
        fb = {name: [] for name in live}
        bw = {name: [] for name in live}
        for _ in range(repeats):
            for name, (step, attn, n) in live.items():
                fb[name].append(loop_wall_ms(step, n))
                out = attn(q, k, v)
                bw[name].append(loop_events_ms(lambda out=out: torch.autograd.grad(
                    out, (q, k, v), dout, retain_graph=True), n))
                del out
        held = time_interleaved({name: v[0] for name, v in live.items()},
                                reps=max(5, 2 * repeats), warmup=1, l2="warm")
        for name, (_, _, n) in live.items():
            rows.append([fam, half, pr.label, name, statistics.median(fb[name]),
                         statistics.median(bw[name]), n, math.nan, dev, held[name].host_median])
        if "flash" in grads and "cutile" in grads:
            scale = max(float(g.abs().max()) for g in grads["flash"])
            diff = max(float((a.float() - b.float()).abs().max())
                       for a, b in zip(grads["cutile"], grads["flash"]))
            for r in rows:
                if r[2] == pr.label and r[3] == "cutile":
                    r[7] = diff / scale
        q = k = v = dout = grads = live = None  # free them (the closures above read them)
        torch.cuda.empty_cache()
        print(pr.label, " ".join(f"{r[3]} {r[4]:.3f}/{r[5]:.3f}" for r in rows
                                 if r[2] == pr.label), flush=True)
    return rows


def _alternated(what: str, fns: dict, ref: str, repeats: int, case: tuple, dev: str,
                suffix: str = "") -> list[tuple]:
    """Time the builds ``fns`` alternated A/B ``repeats`` times, each sample ``n`` calls (as
    many as ``fns[ref]`` needs): one row per build, its median, labelled ``name + suffix``."""
    n = _calls_for(fns[ref])
    samples = {o: [] for o in fns}
    for _ in range(repeats):
        for o, fn in fns.items():
            samples[o].append(loop_events_ms(fn, n))
    rows = [(*case, f"{o}{suffix}", statistics.median(s), dev) for o, s in samples.items()]
    print(what, case[2], " ".join(f"{r[3]}={r[4]:.3f}" for r in rows), flush=True)
    return rows


def _backward(pr, order="linear", schedule=None):
    """The backward configuration ``attention()`` trains ``pr`` with on this GPU, with
    ``order`` and ``schedule`` for both passes."""
    from kernels.host.backend import default_variant
    from spec import detect
    return default_variant(pr, detect(), order=order, training=True,
                           backward_schedule=schedule).backward


def _one_wave(pr, sms: int) -> int:
    """Persistent CTAs of one wave of the default dK/dV pass: SMs x its occupancy hint."""
    return sms * (_backward(pr).dkdv.occupancy or 1)


def order_ab(problems, repeats: int, dev: str):
    import torch

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for fam, half, pr in problems:
        fns = {}
        p_ctas = _one_wave(pr, sms)
        for order in ("linear", "sawtooth"):
            launch, args = _kernel_setup(pr, _backward(pr, order, f"static{p_ctas}"))
            fns[order] = launch.passes(*args)["dkdv"]
        rows += _alternated("order", fns, "linear", repeats, (fam, half, pr.label), dev,
                            f".static{p_ctas}")
    return rows


def split_ab(problems, repeats: int, dev: str):
    """Grouped-head problems: the whole backward (its kernels, the partial sums' included)
    with the default group split vs none (split 1), alternated A/B."""
    rows = []
    for fam, half, pr in problems:
        if pr.H == pr.H_kv:
            continue
        fns = {}
        for name, split in (("split-rule", None), ("split1", 1)):
            launch, args = _kernel_setup(pr, replace(_backward(pr), split=split))
            fns[name] = lambda launch=launch, args=args: launch(*args)
        rows += _alternated("split", fns, "split1", repeats, (fam, half, pr.label), dev)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.speed.cutile_backward_bench",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="output directory (must not exist)")
    ap.add_argument("--halves", nargs="+", default=["tuning", "validation"],
                    choices=["tuning", "validation"])
    ap.add_argument("--phases", nargs="+", default=["tune", "speed", "order", "split"],
                    choices=["tune", "speed", "order", "split"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", help="only problems whose label contains one of these "
                    "comma-separated strings")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    ap.add_argument("--summarize", nargs="+", metavar="DIR[::A,B]",
                    help="print the summary of committed runs, no GPU: each DIR's speed.csv "
                    "(with ::A,B only its problems whose label contains A or B), a later DIR's "
                    "rows replacing an earlier one's for the same problem")
    args = ap.parse_args(argv)
    if args.summarize:
        return summarize(args.summarize)
    problems = _problems(args.halves, args.only)
    tuning = [p for p in problems if p[1] == "tuning"]
    if args.dry_run:
        for fam, half, pr in problems:
            print(f"{half:10s} {fam:8s} {pr.label}")
        print(f"{len(problems)} problems; phases {' '.join(args.phases)}; tune: "
              f"{len(problems)} problems ({len(tuning)} tuning) x {len(candidates())} "
              "configurations x 2 passes")
        return 0
    if args.out is None:
        print("--out DIR is required (or --dry-run)", file=sys.stderr)
        return 2
    if args.out.exists():
        print(f"{args.out} exists; pass a new directory (results are never overwritten)",
              file=sys.stderr)
        return 2
    import torch

    from kernels.host import backward
    from kernels.host.warm import warm_training
    dev = torch.cuda.get_device_name()
    t0 = time.perf_counter()
    jobs = [(pr, backward.BackwardConfig(pc, pc)) for _, _, pr in problems
            for pc in candidates().values()] if "tune" in args.phases else []
    jobs += [(pr, None) for _, _, pr in problems]
    if "split" in args.phases:
        jobs += [(pr, replace(_backward(pr), split=1)) for _, _, pr in problems
                 if pr.H != pr.H_kv]
    if "order" in args.phases:
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        jobs += [(pr, _backward(pr, o, f"static{_one_wave(pr, sms)}"))
                 for _, _, pr in problems for o in ("linear", "sawtooth")]
    errs = warm_training(jobs)
    print(f"warm: {len(jobs)} jobs in {time.perf_counter() - t0:.0f} s, {len(errs)} failed",
          flush=True)
    for e in errs[:10]:
        print("  ", e, file=sys.stderr)
    tune_rows, speed_rows, order_rows, chosen = [], [], [], {}
    if "tune" in args.phases:
        tune_rows = tune(problems, args.repeats, dev)
        chosen = choose(tune_rows, tuning)
        for (D, causal), d in chosen.items():
            print(f"geo-mean best d{D} {'causal' if causal else 'full'}: dkdv {d['dkdv']} "
                  f"dq {d['dq']}")
    if "speed" in args.phases:
        speed_rows = speed(problems, args.repeats, dev)
    if "order" in args.phases:
        order_rows = order_ab(problems, args.repeats, dev)
    split_rows = split_ab(problems, args.repeats, dev) if "split" in args.phases else []
    args.out.mkdir(parents=True)
    write(args.out / "speed.csv", SPEED_FIELDS, speed_rows)
    write(args.out / "tune.csv", TUNE_FIELDS, tune_rows)
    write(args.out / "order.csv", ORDER_FIELDS, order_rows)
    write(args.out / "split.csv", SPLIT_FIELDS, split_rows)
    write(args.out / "choice.csv", ("D", "causal", "dkdv", "dq"),
           [(D, c, d["dkdv"], d["dq"]) for (D, c), d in sorted(chosen.items())])
    (args.out / "manifest.json").write_text(json.dumps(manifest(args, dev), indent=1))
    for line in summary(speed_rows, order_rows):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

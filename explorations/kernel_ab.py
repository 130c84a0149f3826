"""``python -m explorations.kernel_ab``: kernel module versions and schedules, side by side.

Each contender is a (kernel module, schedule) pair: ``prod`` is ``kernels.device.fmha``;
``--kernel NAME=FILE`` adds another version of the module (an earlier commit's,
``git show <commit>:kernels/device/fmha.py > FILE``, or an edited copy), launched with exactly the
constants and compile hints ``kernels.host.backend.CutileFamily`` prepares for the problem's default
configuration and the contender's schedule (``default`` = the configuration's own). For each problem
of the chosen shape-suite panels: every contender on a NaN-poisoned output, checked against the fp32
reference; those that pass are timed interleaved with SDPA's flash and cuDNN backends, cold L2.
One line per (problem, contender): median us, the ratio to cuDNN, and to ``prod default``.

``--once`` launches every checked contender and both peers once per problem inside an NVTX range
``probe`` instead of timing them, for Nsight Compute (``ncu --nvtx --nvtx-include probe/ ...``);
the launch order is printed first, so the profiled kernels can be named.
"""
from __future__ import annotations

import argparse
import importlib.util


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(f"fmha_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", action="append", default=[], metavar="NAME=FILE")
    ap.add_argument("--schedules", default="default",
                    help="comma-separated: default, grid, static<P>, lpt<P>, glpt<G>, tile<X>; "
                         "each kernel NAME may restrict itself with NAME:schedule")
    ap.add_argument("--panels", default="shapes-short")
    ap.add_argument("--D", type=int, default=None, help="only this head dimension")
    ap.add_argument("--S", type=int, default=None, help="only this sequence length (S_q)")
    ap.add_argument("--once", action="store_true",
                    help="launch each contender once in an NVTX range 'probe' (for ncu), no timing")
    ap.add_argument("--arch", default="h100", help="the GPU present (its measured defaults)")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args(argv)

    import cuda.tile as ct
    import torch

    from experiments.measurement.correctness import check, poisoned_like, random_inputs, reference
    from experiments.measurement.timing import sdpa_peers, time_interleaved
    from experiments.registry.suites import shapes_problems
    from kernels.device import fmha
    from kernels.host.backend import CutileFamily, default_variant
    from spec import Backend, CtaSchedule, ScanOrder, Variant, get_arch

    mods = {"prod": fmha}
    for spec_ in args.kernel:
        name, path = spec_.split("=", 1)
        mods[name] = _load(name, path)
    pairs = []
    for item in args.schedules.split(","):
        if ":" in item:
            name, sched = item.split(":", 1)
            pairs.append((name, sched))
        else:
            pairs += [(name, item) for name in mods]
    arch = get_arch(args.arch)
    fam = CutileFamily(arch.name)
    for panel, p in shapes_problems():
        chosen = default_variant(p, arch)
        if (panel not in args.panels.split(",") or (args.D and p.D != args.D)
                or (args.S and p.S_q != args.S)):
            continue
        q, k, v = random_inputs(p, 0)
        ref = reference(q, k, v, p.causal)
        dummy = torch.zeros((1, 1, 4), dtype=torch.int32, device=q.device)   # trace unused
        fns = {}
        for name, sched_s in pairs:
            sched = (chosen.schedule if sched_s == "default" else CtaSchedule.parse(sched_s))
            label = f"{name} {sched_s}"
            try:
                prep = fam.prepare(Variant(Backend.CUTILE, ScanOrder.linear(), sched,
                                           chosen.tiles), p)
                kern = mods[name].get_kernel(prep.occupancy, prep.worker_warps)
                out = poisoned_like(q)

                def launch(kern=kern, out=out, prep=prep):
                    ct.launch(torch.cuda.current_stream(), (prep.n_ctas, 1, 1), kern,
                              (q, k, v, out, dummy, prep.qk_scale) + prep.consts + (False,))
                launch()
                torch.cuda.synchronize()
                verdict = check(out, q, k, v, p.causal, ref)
            except Exception as e:  # noqa: BLE001 - a contender that fails is reported, not fatal
                print(p.label, label, "FAILED", type(e).__name__, str(e)[:300], flush=True)
                continue
            if verdict.passed:
                fns[label] = launch
            else:
                print(p.label, label, verdict, flush=True)
        fns |= sdpa_peers(q, k, v, p.causal)
        if args.once:
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push("probe")
            for n, fn in fns.items():
                print(f"probe {p.label} {n}", flush=True)
                fn()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
            continue
        s = time_interleaved(fns, reps=args.reps, warmup=3, l2="cold")
        us = {n: 1e3 * x.median for n, x in s.items()}
        cudnn, base = us.get("sdpa-cudnn", float("nan")), us.get("prod default", float("nan"))
        for n, t in sorted(us.items(), key=lambda kv: kv[1]):
            print(f"{p.label:34s} {n:22s} {t:9.1f} us  x_cudnn {cudnn / t:6.3f}  "
                  f"x_prod {base / t:6.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

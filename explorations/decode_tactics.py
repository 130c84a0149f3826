"""The split-K/V decode kernel's tactics: K/V tile, occupancy hint and load latency hint.

    python -m explorations.decode_tactics [--set fit|mqa|pdl] [--variants A,B] [--l2 cold|clean]
        [--reps 15] [--out FILE.csv]

Decode streams K and V once; on an H200 one CTA per SM (the production plan) must keep about
36 GB/s of loads in flight to draw its share of the bandwidth, which the production kernel does
not on problems of a few hundred CTAs (the decode bench: 57% of the copy bandwidth at B=1,
H=32/8, S_kv=32K). More resident CTAs per SM (an occupancy hint), deeper load pipelining (a
latency hint) or larger K/V tiles (fewer, longer copies) are the three ways to put more bytes in
flight. Each variant runs the work model's split count for its own resident slots
(``kernels.host.decode.plan``), on the fit problems of ``experiments.tuning.decode_splits.FIT``
(never the decode bench's, which judges the result): checked first against the fp32 reference on
a NaN-poisoned output, then timed interleaved with the production plan and SDPA's flash and cuDNN
backends, cold L2 (``experiments.measurement.timing``). Prints a table (median us per problem
and variant, and each variant's geometric mean against the production plan); ``--out`` also
writes every sample's median as CSV. The builds are compiled first in parallel.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

# (tile_n at D=128, tile_n at D=64, occupancy hint, latency hint[, splits]); None: production's
VARIANTS = {
    "prod": (None, None, None, None),
    "occ2": (None, None, 2, None),
    "occ3": (None, None, 3, None),
    "lat4": (None, None, None, 4),
    "occ2.lat4": (None, None, 2, 4),
    "n128": (128, 256, None, None),
    "n128.lat3": (128, 256, None, 3),
    "n32.occ2": (32, 64, 2, None),
    "n32.occ4": (32, 64, 4, None),
    "n64.occ2": (64, 128, 2, None),
}
# ``--set mqa``: one-row multi-query caches (one K/V head, all query heads in one or two CTAs
# per split), where the split count trades K/V streaming against the merge's latency, and
# merges of several rows; none is a decode-bench problem. (..., splits, merge occupancy hint)
MQA_FIT = [(1, 32, 1, 1, 65536, 128), (1, 16, 1, 1, 131072, 128), (1, 8, 1, 1, 65536, 64),
           (2, 16, 1, 1, 65536, 64), (1, 64, 1, 1, 65536, 128), (1, 32, 8, 4, 65536, 128),
           (2, 32, 2, 16, 32768, 128), (1, 32, 8, 1, 16384, 128)]
MQA_VARIANTS = {"prod": (None, None, None, None)} | {
    f"s{n}": (None, None, None, None, n) for n in (64, 256)} | {
    f"mocc{m}": (None, None, None, None, 0, m) for m in (1, 2, 8)} | {
    "s256.mocc8": (None, None, None, None, 256, 8)}
# ``--set pdl``: the merge launched as a programmatic dependent of the split kernel (production)
# against the plain stream order, on the fit problems; (..., splits, merge hint, dependent merge)
PDL_VARIANTS = {"prod": (None, None, None, None), "nopdl": (None, None, None, None, 0, None,
                                                           False)}


def _problem(p):
    from spec import Problem
    B, H, H_kv, S_q, S_kv, D = p
    return Problem(B=B, H=H, H_kv=H_kv, S_q=S_q, S_kv=S_kv, D=D, dtype="bf16", causal=False)


def _plan(p, name: str, sms: int):
    from kernels.host.decode import plan
    n128, n64, occ, lat, *more = (VARIANTS | MQA_VARIANTS | PDL_VARIANTS)[name]
    splits, mocc, pdl = (more + [0, None, True][len(more):])
    pr = _problem(p)
    return plan(pr, sms, splits, tile_n=n128 if pr.D == 128 else n64, occupancy=occ,
                latency=lat, merge_occupancy=mocc, dependent_merge=pdl)


def _warm(jobs) -> list[str]:
    """Compile each (problem, variant) in this worker (cuda.tile's disk cache keeps it)."""
    import torch

    from kernels.host.decode import DecodeLaunch
    errors = []
    for p, name, sms in jobs:
        try:
            pl = _plan(p, name, sms)
            B, H, H_kv, S_q, S_kv, D = p
            q = torch.randn(B, H, S_q, D, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(B, H_kv, S_kv, D, device="cuda", dtype=torch.bfloat16)
            DecodeLaunch(pl, 0)(q, k, k, torch.empty_like(q))
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - reported; the timing skips the variant
            errors.append(f"{p} {name}: {type(e).__name__}: {str(e)[:200]}")
    return errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m explorations.decode_tactics",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--set", choices=("fit", "mqa", "pdl"), default="fit",
                    help="the split fit problems and tactics, the MQA problems and splits, or "
                    "the fit problems with and without the dependent merge launch")
    ap.add_argument("--variants", help="comma-separated variant names of any set, run on this "
                    "set's problems (prod always runs); default: the set's own")
    ap.add_argument("--l2", choices=("cold", "clean"), default="cold",
                    help="cold: the protocol's write flush; clean: no dirty line left either")
    a = ap.parse_args(argv)
    if a.out is not None and a.out.exists():
        print(f"decode_tactics: {a.out} exists; pass a new path", file=sys.stderr)
        return 2
    import torch
    import torch.nn.functional as F

    from experiments.measurement.timing import stored, time_interleaved
    from experiments.speed.decode_bench import decode_inputs
    from experiments.speed.eager import sdpa_peers
    from experiments.tuning.decode_splits import FIT
    from kernels.host.decode import DecodeLaunch
    from kernels.host.warm import in_processes
    from spec.records import write_dicts
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    problems, variants = {"fit": (FIT, VARIANTS), "mqa": (MQA_FIT, MQA_VARIANTS),
                          "pdl": (FIT, PDL_VARIANTS)}[a.set]
    if a.variants:          # any set's variants, on this set's problems
        known = VARIANTS | MQA_VARIANTS | PDL_VARIANTS
        unknown = set(a.variants.split(",")) - set(known)
        if unknown:
            print(f"decode_tactics: --variants {sorted(unknown)[0]!r} is none of "
                  f"{', '.join(known)}", file=sys.stderr)
            return 2
        variants = {n: v for n, v in known.items() if n == "prod" or n in a.variants.split(",")}
    errors = in_processes(_warm, [(p, n, sms) for p in problems for n in variants], None)
    for e in errors:
        print("build:", e)
    rows, table = [], {}
    for p in problems:
        B, H, H_kv, S_q, S_kv, D = p
        q, k, v = decode_inputs(p)
        with torch.no_grad():
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                 enable_gqa=H != H_kv)
            half = F.scaled_dot_product_attention(q, k, v, enable_gqa=H != H_kv)
            tol = 2 * (half.float() - ref).abs().max().item() + 2e-3
            fns, splits = {}, {}
            for name in variants:
                try:
                    pl = _plan(p, name, sms)
                    launch = DecodeLaunch(pl, 0)
                    out = torch.full_like(q, float("nan"))
                    launch(q, k, v, out)
                    err = (out.float() - ref).abs().max().item()
                    if not err <= tol:
                        print(f"{p} {name}: max error {err:.3g} > {tol:.3g}, not timed")
                        continue
                except Exception as e:  # noqa: BLE001 - a variant that does not build
                    print(f"{p} {name}: {type(e).__name__}: {str(e)[:120]}")
                    continue
                fns[name] = (lambda launch=launch, o=out: launch(q, k, v, o))
                splits[name] = pl.splits
            fns.update({n: (lambda f=f: f(q, k, v)) for n, f in sdpa_peers(False, H != H_kv)
                        .items()})
            t = time_interleaved(fns, reps=a.reps, l2=a.l2)
        kv_bytes = 2 * B * H_kv * S_kv * D * 2
        for name, smp in t.items():
            rows.append(dict(problem=str(p), variant=name, splits=splits.get(name, ""),
                             us=stored(smp.median * 1e3), spread=stored(smp.spread),
                             tbs=stored(kv_bytes / (smp.median * 1e-3) / 1e12)))
            table.setdefault(name, {})[p] = smp.median * 1e3
    names = list(table)
    print(f"{'problem':30} " + " ".join(f"{n:>9}" for n in names))
    for p in problems:
        print(f"{str(p):30} " + " ".join(f"{table[n].get(p, math.nan):9.1f}" for n in names))
    for n in names:
        common = [p for p in problems if p in table[n] and p in table["prod"]]
        if common:
            gm = math.exp(sum(math.log(table["prod"][p] / table[n][p]) for p in common)
                          / len(common))
            print(f"{n}: {gm:.3f}x prod over {len(common)} problems")
    if a.out is not None:
        write_dicts(a.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

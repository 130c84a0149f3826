"""Where a decode step's fixed cost goes: the split kernel alone, the merge alone, the whole call,
a copy of the same bytes and an empty launch, each timed clean-cold.

    python -m explorations.decode_parts [--reps 20] [--out FILE.csv]

On the one-row problems of the split fit set (``experiments.tuning.decode_splits.FIT``, never
the bench's): "split" launches the split kernel by itself (its partials left unread), "merge" the
merge alone on them (no predecessor to overlap), "call" the whole call, "copy" a copy whose read
+ write bytes are the call's K+V bytes, "empty" an empty torch kernel (the event and launch
floor). Whether a step's microseconds are the merge (which fusing it into the split kernel's last
CTA would remove) or the split kernel's own start and end. Prints median µs per problem; ``--out``
writes them as CSV.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m explorations.decode_parts",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    if a.out is not None and a.out.exists():
        print(f"decode_parts: {a.out} exists; pass a new path", file=sys.stderr)
        return 2
    import torch

    from experiments.measurement.timing import time_interleaved
    from experiments.speed.decode_bench import decode_inputs
    from experiments.tuning.decode_splits import FIT
    from kernels.host.decode import DecodeLaunch, plan
    from spec import Problem
    from spec.decode import cache_bytes
    from spec.records import write_dicts
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for p in [p for p in FIT if p[3] == 1]:
        B, H, H_kv, S_q, S_kv, D = p
        q, k, v = decode_inputs(p)
        pl = plan(Problem(B=B, H=H, H_kv=H_kv, S_q=S_q, S_kv=S_kv, D=D, dtype="bf16",
                          causal=False), sms)
        launch = DecodeLaunch(pl, 0)
        out = torch.empty_like(q)
        launch(q, k, v, out)
        nbytes = cache_bytes(B, H_kv, S_kv, D)
        src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        tiny = torch.empty(1, device="cuda")
        fns = {"call": lambda: launch(q, k, v, out), "copy": lambda: dst.copy_(src),
               "empty": lambda: tiny.zero_()}
        if pl.splits > 1:
            o = torch.empty(launch.opart_shape, dtype=torch.float32, device="cuda")
            lp = torch.empty(launch.lpart_shape, dtype=torch.float32, device="cuda")
            raw = launch.raw_stream

            def split(o=o, lp=lp):
                launch.launch(raw(0), launch.grid, launch.split,
                              (q, k, v, launch.lens, o, lp, out) + launch.tail)

            def merge(o=o, lp=lp):
                launch.launch(raw(0), launch.cgrid, launch.combine, (o, lp, out) + launch.ctail)
            split()
            fns |= {"split": split, "merge": merge}
        t = time_interleaved(fns, reps=a.reps, l2="clean")
        row = dict(problem=str(p), MB=round(nbytes / 1e6), splits=pl.splits)
        row |= {n: round(t[n].median * 1e3, 2) if n in t else "" for n in
                ("call", "split", "merge", "copy", "empty")}
        rows.append(row)
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    if a.out is not None:
        write_dicts(a.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m experiments.tuning.decode_splits``: the decode kernels' time against their number
of splits, on a fit set of decode problems, and the work model's constants fitted to it.

    python -m experiments.tuning.decode_splits --out runs/decode-splits.csv [--reps 15]
    python -m experiments.tuning.decode_splits --fit profiles/h200/decode-splits-<date>
    python -m experiments.tuning.decode_splits --dry-run

The work model of ``spec.decode`` chooses the number of splits of a decode launch from two
constants it cannot know without the GPU: ``F`` (``FIXED_TILES``: what a CTA pays besides
streaming its K/V tiles, in tiles) and ``C`` (``MERGE_LAUNCH_BYTES``: the merge launch). Measure
mode times ``schedule="decode<N>"`` for a ladder of split counts on each problem of ``FIT`` (cold
L2, ``experiments.measurement.timing.time_interleaved``, one H100/H200), after checking each
split count's output against the one-split result. ``FIT`` shares no problem with the decode
bench's suite (``experiments.speed.decode_bench.PROBLEMS``, which judges the model): the constants
are chosen on these and judged there.

Fit mode (CPU) reads such a run and, over a grid of (F, C), scores the split count the model
would choose on each problem by its measured time against the fastest measured split count of
that problem (1.0: the model picks the best); prints the grid's best (F, C) by the geometric
mean of that ratio (ties: the smaller constants), and the worst problem. The constants in
``spec.decode`` are set from that output by hand, with the run named beside them.
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

# (B, H, H_kv, S_q, S_kv, D): bf16, non-causal, equal lengths; none is a decode-bench problem
FIT = [
    (1, 32, 8, 1, 16384, 128), (1, 32, 4, 1, 65536, 128), (2, 32, 8, 1, 32768, 64),
    (4, 32, 8, 1, 4096, 128), (8, 32, 8, 1, 16384, 128), (2, 64, 8, 1, 8192, 128),
    (1, 16, 16, 1, 65536, 128), (32, 32, 8, 1, 4096, 64), (1, 32, 8, 4, 65536, 128),
    (4, 32, 32, 1, 4096, 64), (2, 32, 2, 16, 32768, 128), (128, 32, 8, 1, 1024, 128),
]
LADDER = (1, 2, 4, 8, 16, 33, 66, 132)
FIELDS = ["B", "H", "H_kv", "S_q", "S_kv", "D", "splits", "ms", "spread", "max_diff"]
F_GRID = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
C_GRID = (0, 50_000, 100_000, 200_000, 400_000, 800_000, 1_600_000)


def ladder(p, num_sms: int) -> list[int]:
    """The split counts timed for ``p``: the ladder up to the model's maximum for its cache."""
    from spec.decode import max_splits, n_tiles, packing, tile_n_for
    top = max_splits(n_tiles(p[4], tile_n_for(p[5], math.prod(packing(p[1] // p[2], p[3])))))
    return [s for s in LADDER if s <= top]


def measure(out: Path, reps: int) -> int:
    import torch

    from experiments.measurement.timing import time_interleaved
    from experiments.speed.decode_bench import decode_inputs
    from kernels.host import backend
    from kernels.host.warm import DecodeJob, warm_decode
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    jobs = [DecodeJob(*p, "bf16", False, s, False) for p in FIT for s in ladder(p, sms)]
    for e in warm_decode(jobs):
        print("decode_splits: build:", e, file=sys.stderr)
    partial = out.with_name(out.name + ".partial")
    rows = []
    with partial.open("w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        for p in FIT:
            B, H, H_kv, S_q, S_kv, D = p
            q, k, v = decode_inputs(p)
            with torch.no_grad():
                one = backend.attention(q, k, v, schedule="decode1").float()
                fns, diff = {}, {}
                for s in ladder(p, sms):
                    diff[s] = (backend.attention(q, k, v, schedule=f"decode{s}").float()
                               - one).abs().max().item()
                    fns[s] = (lambda s=s: backend.attention(q, k, v, schedule=f"decode{s}"))
                t = time_interleaved(fns, reps=reps, l2="cold")
            for s, smp in t.items():
                r = dict(B=B, H=H, H_kv=H_kv, S_q=S_q, S_kv=S_kv, D=D, splits=s,
                         ms=smp.median, spread=smp.spread, max_diff=diff[s])
                w.writerow(r)
                rows.append(r)
            f.flush()
            best = min(t, key=lambda s: t[s].median)
            print(f"{p}: best {best} splits {t[best].median * 1e3:.1f} us; 1 split "
                  f"{t[1].median * 1e3:.1f} us; max diff {max(diff.values()):.2e}")
    partial.rename(out)
    return 0


def choose_with(p, num_sms: int, F: float, C: float) -> int:
    """``spec.decode.choose_splits`` for problem ``p`` with the constants (F, C)."""
    import spec.decode as sd
    from kernels.host.decode import CTAS_PER_SM
    from spec.decode import packing, tile_n_for
    B, H, H_kv, S_q, S_kv, D = p
    hg, sqp = packing(H // H_kv, S_q)
    saved = sd.FIXED_TILES, sd.MERGE_LAUNCH_BYTES
    sd.FIXED_TILES, sd.MERGE_LAUNCH_BYTES = F, C
    try:
        return sd.choose_splits(B=B, H=H, H_kv=H_kv, S_q=S_q, S_kv=S_kv, D=D, elt=2,
                                tile_n=tile_n_for(D, hg * sqp), head_chunks=H // H_kv // hg,
                                slots=num_sms * CTAS_PER_SM)
    finally:
        sd.FIXED_TILES, sd.MERGE_LAUNCH_BYTES = saved


def fit(rows: list[dict], num_sms: int) -> list[str]:
    """Score each (F, C) of the grid on the measured ladders (module docstring); the report."""
    by: dict[tuple, dict[int, float]] = {}
    for r in rows:
        p = tuple(int(r[k]) for k in ("B", "H", "H_kv", "S_q", "S_kv", "D"))
        by.setdefault(p, {})[int(r["splits"])] = float(r["ms"])

    def score(F, C):
        loss = []
        for p, t in by.items():
            s = choose_with(p, num_sms, F, C)
            near = min(t, key=lambda x: abs(x - s))      # the timed count nearest the choice
            loss.append(t[near] / min(t.values()))
        return math.exp(sum(map(math.log, loss)) / len(loss)), max(loss), loss

    grid = sorted(((score(F, C)[0], F, C) for F in F_GRID for C in C_GRID),
                  key=lambda x: (round(x[0], 6), x[1], x[2]))
    g, F, C = grid[0]
    _, worst, loss = score(F, C)
    lines = [f"{len(by)} problems; best (F, C) = ({F}, {C}): chosen split count's time over the "
             f"fastest measured, geometric mean {g:.3f}, worst {worst:.3f}"]
    import spec.decode as sd
    g0, w0, _ = score(sd.FIXED_TILES, sd.MERGE_LAUNCH_BYTES)
    lines.append(f"current (F, C) = ({sd.FIXED_TILES}, {sd.MERGE_LAUNCH_BYTES}): geometric mean "
                 f"{g0:.3f}, worst {w0:.3f}")
    for (p, t), x in zip(by.items(), loss):
        lines.append(f"  {p}: chooses {choose_with(p, num_sms, F, C)}, fastest "
                     f"{min(t, key=t.get)} ({x:.3f})")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.tuning.decode_splits",
                                 description=__doc__.split("\n\n")[0].strip("`"))
    ap.add_argument("--out", type=Path, help="measure: the CSV to write (must not exist)")
    ap.add_argument("--fit", type=Path, help="fit: a run directory or CSV this module wrote")
    ap.add_argument("--sms", type=int, default=132, help="fit: the GPU's SMs (H100/H200: 132)")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--dry-run", action="store_true", help="print the problems, run nothing")
    a = ap.parse_args(argv)
    if a.dry_run:
        for p in FIT:
            print(p, "splits", ladder(p, 132))
        print(f"{len(FIT)} problems, {sum(len(ladder(p, 132)) for p in FIT)} launches timed")
        return 0
    if a.fit is not None:
        path = a.fit
        if path.is_dir():
            path = next((path / n for n in ("decode-splits.csv", "decode-splits.csv.xz")
                         if (path / n).is_file()), path / "decode-splits.csv")
        if not path.is_file():
            print(f"decode_splits: {path} is not a file; pass a run directory holding "
                  "decode-splits.csv[.xz] or the CSV itself", file=sys.stderr)
            return 2
        import lzma
        with (lzma.open(path, "rt") if path.suffix == ".xz" else path.open()) as f:
            rows = list(csv.DictReader(f))
        if not rows or set(FIELDS) - set(rows[0]):
            print(f"decode_splits: {path} has no rows of this module's columns", file=sys.stderr)
            return 2
        print("\n".join(fit(rows, a.sms)))
        return 0
    if a.out is None:
        print("decode_splits: pass --out (measure), --fit (fit) or --dry-run", file=sys.stderr)
        return 2
    if a.out.exists():
        print(f"decode_splits: {a.out} exists; pass a new path", file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available():
        print("decode_splits: needs a CUDA GPU (use --dry-run or --fit here)", file=sys.stderr)
        return 2
    a.out.parent.mkdir(parents=True, exist_ok=True)
    return measure(a.out, a.reps)


if __name__ == "__main__":
    sys.exit(main())

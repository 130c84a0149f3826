"""Decode bench (GPU): ``kernels.attention`` on decode problems beside SDPA's flash and cuDNN
backends, in one process on one GPU.

    python -m experiments.speed.decode_bench --out runs/decode-bench.csv [--reps 30] [--dry-run]

For each of the ``PROBLEMS`` (batch 1-64, cache 1K-128K, groups 1/4/8/32, D 64/128, S_q 1/4/16,
bf16, non-causal decode) it first checks each caller against the fp32 reference (SDPA on upcast
inputs; the design's error bar), then times: the kernel time (CUDA events around ``BATCH``
back-to-back calls, per call; the host's launch cost hides behind the GPU's work when a call
takes longer than its launch) and the eager call time (``experiments.speed.eager.eager_call_ms``:
events around one call after a sync, host included), the callers alternating. Bandwidth: K and V
bytes read once over the kernel time, beside a measured device-to-device copy bandwidth (a 4 GiB
copy, read + write bytes over its time) in the same run. A peer that refuses a shape (cuDNN on
some) is recorded 'n/a'. Writes a tidy CSV (one row per problem × caller × metric) to ``--out``
(refused when it exists) and prints a table last. ``--dry-run`` prints the problems only.
"""
from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from pathlib import Path

# (B, H, H_kv, S_q, S_kv, D)
PROBLEMS = [
    (1, 32, 8, 1, 32768, 128), (1, 32, 32, 1, 32768, 128), (1, 32, 8, 1, 131072, 128),
    (1, 32, 1, 1, 131072, 128), (1, 64, 8, 1, 65536, 128), (1, 32, 32, 1, 1024, 64),
    (4, 32, 8, 1, 8192, 128), (4, 32, 32, 4, 8192, 128), (4, 32, 4, 16, 16384, 128),
    (8, 32, 8, 1, 4096, 64), (8, 32, 1, 4, 32768, 64), (16, 32, 8, 1, 8192, 128),
    (16, 32, 32, 1, 2048, 128), (16, 32, 4, 16, 4096, 128), (32, 32, 8, 1, 2048, 128),
    (32, 32, 8, 4, 8192, 64), (64, 32, 8, 1, 2048, 128), (64, 32, 8, 1, 1024, 64),
    (64, 32, 32, 1, 1024, 128), (64, 32, 1, 16, 4096, 128), (2, 16, 16, 16, 65536, 64),
    (2, 32, 8, 4, 131072, 128), (1, 8, 1, 1, 131072, 64), (4, 64, 8, 1, 32768, 128),
    (8, 32, 4, 4, 16384, 128), (1, 32, 32, 16, 8192, 64),
]
BATCH = 20
FIELDS = ["problem", "B", "H", "H_kv", "S_q", "S_kv", "D", "caller", "metric", "value", "unit"]


def _label(p) -> str:
    B, H, H_kv, S_q, S_kv, D = p
    return f"B{B} H{H}/{H_kv} q{S_q} kv{S_kv} d{D}"


def copy_bandwidth_tbs(gib: int = 4) -> float:
    """Read + write bytes of a device-to-device copy over its median time, TB/s."""
    import torch
    n = gib * 2 ** 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    times = []
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    del a, b
    return 2 * n / (statistics.median(times) * 1e-3) / 1e12


def kernel_ms(fn, reps: int) -> float:
    """Median over ``reps`` of (events around ``BATCH`` back-to-back calls) / BATCH."""
    import torch
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(BATCH):
            fn()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) / BATCH)
    return statistics.median(out)


def _err(o, ref) -> float:
    return (o.float() - ref).abs().max().item()


def bench(p, reps: int, writer, table) -> None:
    import torch
    import torch.nn.functional as F

    from experiments.speed.eager import eager_call_ms, sdpa_peers
    from kernels import attention
    B, H, H_kv, S_q, S_kv, D = p
    g = torch.Generator(device="cuda").manual_seed(hash(p) % 2 ** 31)
    q = torch.randn(B, H, S_q, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(B, H_kv, S_kv, D, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn_like(k)
    peers = sdpa_peers(False, H != H_kv)
    callers = {"cutile": lambda: attention(q, k, v)}
    callers.update({n: (lambda f=f: f(q, k, v)) for n, f in peers.items()})
    with torch.no_grad():
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                             enable_gqa=H != H_kv)
        base = None
        res = {}
        for n, fn in callers.items():
            try:
                res[n] = _err(fn(), ref)
            except RuntimeError as e:       # a backend that refuses the shape
                res[n] = f"n/a: {str(e).splitlines()[0][:80]}"
        base = min((x for x in res.values() if isinstance(x, float)), default=None)
        live = {n: fn for n, fn in callers.items() if isinstance(res[n], float)}
        ok = {n: not math.isnan(e) and e <= 2 * (base or 0) + 2e-3
              for n, e in res.items() if isinstance(e, float)}
        kms = {n: kernel_ms(fn, reps) for n, fn in live.items()}
        eager = {n: statistics.median(t) for n, t in eager_call_ms(live, reps=reps).items()}
    kv_bytes = 2 * B * H_kv * S_kv * D * 2
    row = dict(problem=_label(p), B=B, H=H, H_kv=H_kv, S_q=S_q, S_kv=S_kv, D=D)
    for n in callers:
        if n not in live:
            writer.writerow({**row, "caller": n, "metric": "kernel_time", "value": "n/a",
                             "unit": "ms"})
            continue
        for metric, val, unit in (("max_error", res[n], "abs"), ("correct", ok[n], "bool"),
                                  ("kernel_time", kms[n], "ms"), ("eager_call", eager[n], "ms"),
                                  ("bandwidth", kv_bytes / (kms[n] * 1e-3) / 1e12, "TB/s")):
            writer.writerow({**row, "caller": n, "metric": metric, "value": val, "unit": unit})
    best = min(kms.get("flash", math.inf), kms.get("cudnn", math.inf))
    table.append((_label(p), kms.get("cutile"), best, kv_bytes / (kms["cutile"] * 1e-3) / 1e12
                  if "cutile" in kms else float("nan"), ok.get("cutile", False)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.speed.decode_bench",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="the CSV to write (must not exist)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--dry-run", action="store_true", help="print the problems, run nothing")
    a = ap.parse_args(argv)
    if a.dry_run:
        for p in PROBLEMS:
            print(_label(p))
        print(f"{len(PROBLEMS)} problems; callers: cutile, flash, cudnn")
        return 0
    if a.out is None:
        print("decode_bench: --out is required (or --dry-run)", file=sys.stderr)
        return 2
    if a.out.exists():
        print(f"decode_bench: {a.out} exists; pass a new path", file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available():
        print("decode_bench: needs a CUDA GPU (use --dry-run here)", file=sys.stderr)
        return 2
    a.out.parent.mkdir(parents=True, exist_ok=True)
    copy = copy_bandwidth_tbs()
    table: list = []
    with a.out.open("w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerow(dict(problem="copy", caller="d2d", metric="bandwidth", value=copy,
                        unit="TB/s"))
        for p in PROBLEMS:
            bench(p, a.reps, w, table)
            f.flush()
    ratios = []
    print(f"{torch.cuda.get_device_name()}: copy bandwidth {copy:.2f} TB/s")
    print(f"{'problem':32} {'cutile ms':>10} {'best SDPA':>10} {'x SDPA':>7} {'TB/s':>6} "
          f"{'% copy':>7} ok")
    for label, cu, best, bw, ok in table:
        r = best / cu if cu and math.isfinite(best) else float("nan")
        if math.isfinite(r):
            ratios.append(r)
        print(f"{label:32} {cu or float('nan'):10.4f} {best:10.4f} {r:7.2f} {bw:6.2f} "
              f"{100 * bw / copy:6.1f}% {'yes' if ok else 'NO'}")
    if ratios:
        gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"geometric mean {gm:.3f}x the best SDPA backend, lowest {min(ratios):.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

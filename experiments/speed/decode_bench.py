"""Decode bench (GPU): ``kernels.attention`` and ``cuda_baseline.attention`` on decode problems
beside SDPA's flash and cuDNN backends, in one process on one GPU.

    python -m experiments.speed.decode_bench --out runs/decode-bench.csv [--reps 30] [--dry-run]

For each of the ``PROBLEMS`` (batch 1-64, cache 1K-128K, groups 1/4/8/32, D 64/128, S_q 1/4/16,
bf16, non-causal decode) it first checks each caller against the fp32 reference (SDPA on upcast
inputs; the design's error bar), then times, callers alternating launch by launch, with the
project's protocol (``experiments.measurement.timing.time_interleaved``): the kernel time with a
cold L2 (a 2x-L2 buffer written before each launch, the GPU held by a spin while the host
enqueues, so the events bracket GPU time and never the host's launch cost: a decode step's K/V
of one layer is not in L2 when its turn comes, the other layers passed in between), the same
with a warm L2 (back-to-back, the cache possibly resident: labelled, never the headline), and the
eager call time (``experiments.speed.eager.eager_call_ms``: events around one call after a sync,
host included). Bandwidth: K and V bytes the call must read (each sequence's length) over the
cold kernel time, beside a measured device-to-device copy bandwidth (a 4 GiB copy, read + write
bytes over its time) in the same run; and over the kernel time with a *clean* cold L2 (the flush
followed by a read of another buffer, so the L2's dirty lines are written back before the
events: the protocol's cold flush leaves up to an L2 of write-backs to the timed kernel, which a
cache of two or three L2s pays visibly), printed as ``clean`` for cuTile and ``SDPA`` for the
best SDPA backend. ``=copy``: a device-to-device copy of the same bytes (read + write = the
call's K+V bytes, timed in the same interleave) over cuTile's clean-cold time: that size's own
launch and ramp, where the 4 GiB copy is an asymptote (its writes, up to an L2's worth, need not
reach DRAM within its timing: a flattering peer below a few L2s).

``RAGGED`` problems give each sequence its own cache length (``kv_lengths``, drawn uniformly in
[1, S_kv] from a fixed seed): both families are checked against an fp32 reference masked per
sequence, and the peers, which take no lengths, run on the padded cache without a mask (what a
user who pads pays; their result is not the masked one and is not checked). A peer that refuses
a shape (cuDNN on some) is recorded 'n/a'. The decode builds are compiled first in parallel
(``kernels.host.warm.warm_decode``). Writes a tidy CSV (one row per problem × caller × metric)
to ``--out`` (refused when it exists; values to ``timing.STORED_DIGITS`` significant digits) and
prints a table last. ``--dry-run`` prints the problems
only.
"""
from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from pathlib import Path

from spec.decode import cache_bytes

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
RAGGED = [(16, 32, 8, 1, 8192, 128), (64, 32, 8, 1, 4096, 128), (8, 32, 8, 4, 16384, 64)]
OURS = ("cutile", "cuda")
COPY = "copy-same-bytes"
"""The size-matched copy: a device-to-device copy whose read + write bytes are the call's K+V
bytes, timed clean-cold beside the callers (its own launch and ramp at that size)."""
FIELDS = ["problem", "B", "H", "H_kv", "S_q", "S_kv", "D", "caller", "metric", "value", "unit"]


def _label(p, ragged: bool = False) -> str:
    B, H, H_kv, S_q, S_kv, D = p
    return f"B{B} H{H}/{H_kv} q{S_q} kv{S_kv}{' ragged' if ragged else ''} d{D}"


def _problem(p):
    from spec import Problem
    B, H, H_kv, S_q, S_kv, D = p
    return Problem(B=B, H=H, H_kv=H_kv, S_q=S_q, S_kv=S_kv, D=D, dtype="bf16", causal=False)


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


def decode_inputs(p):
    """Seeded bf16 (q, k, v) of a decode problem (B, H, H_kv, S_q, S_kv, D) on the GPU: the
    bench's, the split sweep's and the tactic exploration's inputs."""
    import torch
    B, H, H_kv, S_q, S_kv, D = p
    g = torch.Generator(device="cuda").manual_seed(hash(p) % 2 ** 31)
    q = torch.randn(B, H, S_q, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(B, H_kv, S_kv, D, device="cuda", dtype=torch.bfloat16, generator=g)
    return q, k, torch.randn_like(k)


def _err(o, ref) -> float:
    return (o.float() - ref).abs().max().item()


def bench(p, reps: int, writer, table, ragged: bool = False) -> None:
    import torch
    import torch.nn.functional as F

    import cuda_baseline
    from experiments.measurement.timing import stored, time_interleaved
    from experiments.speed.eager import eager_call_ms, sdpa_peers
    from kernels import attention
    from kernels.host import backend
    B, H, H_kv, S_q, S_kv, D = p
    q, k, v = decode_inputs(p)
    lengths = [S_kv] * B
    peers = sdpa_peers(False, H != H_kv)
    if ragged:
        lengths = torch.randint(1, S_kv + 1, (B,), generator=torch.Generator().manual_seed(B))
        lengths = [int(x) for x in lengths]
        lens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
        callers = {"cutile": lambda: attention(q, k, v, kv_lengths=lens),
                   "cuda": lambda: cuda_baseline.attention(q, k, v, kv_lengths=lens)}
    else:
        callers = {"cutile": lambda: attention(q, k, v),
                   "cuda": lambda: cuda_baseline.attention(q, k, v)}
    callers.update({n: (lambda f=f: f(q, k, v)) for n, f in peers.items()})
    kv_bytes = cache_bytes(1, H_kv, sum(lengths), D)     # what the call must read
    with torch.no_grad():
        if ragged:
            L = torch.tensor(lengths, device="cuda").view(B, 1, 1, 1)
            keep = torch.arange(S_kv, device="cuda").view(1, 1, 1, S_kv) < L
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                 attn_mask=keep, enable_gqa=H != H_kv)
        else:
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                 enable_gqa=H != H_kv)
        res = {}
        for n, fn in callers.items():
            try:
                res[n] = _err(fn(), ref) if (n in OURS or not ragged) else 0.0
            except RuntimeError as e:       # a backend that refuses the shape
                res[n] = f"n/a: {str(e).splitlines()[0][:80]}"
        base = min((x for n, x in res.items() if isinstance(x, float) and n not in OURS),
                   default=None)
        if ragged:      # the peers' padded, unmasked result is not the reference: SDPA's own
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
                base = _err(F.scaled_dot_product_attention(q, k, v, attn_mask=keep,
                                                           enable_gqa=H != H_kv), ref)
        live = {n: fn for n, fn in callers.items() if isinstance(res[n], float)}
        ok = {n: not math.isnan(e) and e <= 2 * (base or 0) + 2e-3
              for n, e in res.items() if isinstance(e, float)}
        cold = time_interleaved(live, reps=reps, l2="cold")
        src = torch.empty(kv_bytes // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        clean = time_interleaved(live | {COPY: lambda: dst.copy_(src)}, reps=reps, l2="clean")
        warm = time_interleaved(live, reps=reps, l2="warm")
        eager = {n: statistics.median(t) for n, t in eager_call_ms(live, reps=reps).items()}
    row = dict(problem=_label(p, ragged), B=B, H=H, H_kv=H_kv, S_q=S_q, S_kv=S_kv, D=D)
    for n in callers:
        if n not in live:
            writer.writerow({**row, "caller": n, "metric": "kernel_time", "value": "n/a",
                             "unit": "ms"})
            continue
        kms = cold[n].median
        for metric, val, unit in (
                ("max_error", res[n], "abs"), ("correct", ok[n] if n in OURS or not ragged
                                               else "padded, not checked", "bool"),
                ("kernel_time", kms, "ms"), ("kernel_time_spread", cold[n].spread, "rel"),
                ("kernel_time_warm_l2", warm[n].median, "ms"),
                ("kernel_time_clean_l2", clean[n].median, "ms"),
                ("host_time", cold[n].host_median, "ms"), ("eager_call", eager[n], "ms"),
                ("bandwidth", kv_bytes / (kms * 1e-3) / 1e12, "TB/s")):
            writer.writerow({**row, "caller": n, "metric": metric, "value": stored(val),
                             "unit": unit})
        if n == "cutile":
            plan = backend.launch_for(q, k, v, False).plan if not ragged else None
            if plan is not None:
                writer.writerow({**row, "caller": n, "metric": "splits", "value": plan.splits,
                                 "unit": "count"})
    writer.writerow({**row, "caller": COPY, "metric": "kernel_time_clean_l2",
                     "value": stored(clean[COPY].median), "unit": "ms"})
    t = {n: s.median for n, s in cold.items()}
    best = min(t.get("flash", math.inf), t.get("cudnn", math.inf))
    tc = {n: s.median for n, s in clean.items()}
    best_clean = min(tc.get("flash", math.inf), tc.get("cudnn", math.inf))
    table.append((_label(p, ragged), t.get("cutile"), best,
                  kv_bytes / (t["cutile"] * 1e-3) / 1e12 if "cutile" in t else float("nan"),
                  kv_bytes / (tc["cutile"] * 1e-3) / 1e12 if "cutile" in tc else float("nan"),
                  kv_bytes / (best_clean * 1e-3) / 1e12,
                  ok.get("cutile", False), eager.get("cutile"),
                  min(eager.get("flash", math.inf), eager.get("cudnn", math.inf)),
                  t.get("cuda"), ok.get("cuda", False),
                  tc[COPY] / tc["cutile"] if "cutile" in tc else float("nan")))


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
        for p in RAGGED:
            print(_label(p, True))
        print(f"{len(PROBLEMS)} problems of equal lengths and {len(RAGGED)} ragged; callers: "
              "cutile, cuda, flash, cudnn")
        return 0
    if a.out is None:
        print("decode_bench: --out is required (or --dry-run)", file=sys.stderr)
        return 2
    if a.out.exists():
        print(f"decode_bench: {a.out} exists; pass a new path", file=sys.stderr)
        return 2
    if a.reps < 5:
        print(f"decode_bench: --reps {a.reps}: at least 5 (the spread needs quartiles)",
              file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available():
        print("decode_bench: needs a CUDA GPU (use --dry-run here)", file=sys.stderr)
        return 2
    from experiments.measurement.timing import stored
    from kernels.host.warm import decode_job, warm_decode
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    errors = warm_decode([decode_job(_problem(p), sms) for p in PROBLEMS]
                         + [decode_job(_problem(p), sms, lengths=True) for p in RAGGED])
    from cuda_baseline.host.decode import plan as cuda_plan
    from cuda_baseline.host.decode import precompile
    precompile([cuda_plan(_problem(p), sms).instance() for p in PROBLEMS + RAGGED])
    for e in errors:
        print("decode_bench: build:", e, file=sys.stderr)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    partial = a.out.with_name(a.out.name + ".partial")
    copy = copy_bandwidth_tbs()
    table: list = []
    with partial.open("w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerow(dict(problem="copy", caller="d2d", metric="bandwidth", value=stored(copy),
                        unit="TB/s"))
        for p in PROBLEMS:
            bench(p, a.reps, w, table)
            f.flush()
        for p in RAGGED:
            bench(p, a.reps, w, table, ragged=True)
            f.flush()
    partial.rename(a.out)
    print(f"{torch.cuda.get_device_name()}: copy bandwidth {copy:.2f} TB/s; kernel time cold "
          "L2 (median); eager: one call, host included")
    print(f"{'problem':36} {'cutile ms':>9} {'best SDPA':>9} {'x SDPA':>6} {'TB/s':>5} "
          f"{'% copy':>6} {'clean':>6} {'SDPA':>6} {'=copy':>6} {'eager x':>7} ok "
          f"{'cuda x':>6} ok")
    ratios: dict[bool, list] = {False: [], True: []}
    cuda_ratios: dict[bool, list] = {False: [], True: []}
    eager_ratios = []
    for label, cu, best, bw, bw_clean, bw_peer, ok, e_cu, e_best, cd, cd_ok, same in table:
        r = best / cu if cu and math.isfinite(best) else float("nan")
        rc = best / cd if cd and math.isfinite(best) else float("nan")
        er = e_best / e_cu if e_cu and math.isfinite(e_best) else float("nan")
        if math.isfinite(r):
            ratios["ragged" in label].append(r)
        if math.isfinite(rc):
            cuda_ratios["ragged" in label].append(rc)
        if math.isfinite(er):
            eager_ratios.append(er)
        print(f"{label:36} {cu or float('nan'):9.4f} {best:9.4f} {r:6.2f} {bw:5.2f} "
              f"{100 * bw / copy:5.1f}% {100 * bw_clean / copy:5.1f}% "
              f"{100 * bw_peer / copy:5.1f}% {100 * same:5.1f}% {er:7.2f} "
              f"{'yes' if ok else 'NO ':3} {rc:6.2f} "
              f"{'yes' if cd_ok else 'NO'}")

    def gm(xs):
        return math.exp(sum(map(math.log, xs)) / len(xs))
    if ratios[False]:
        print(f"equal lengths: geometric mean {gm(ratios[False]):.3f}x the best SDPA backend "
              f"(kernel, cold L2), lowest {min(ratios[False]):.3f}x; eager call "
              f"{gm(eager_ratios):.3f}x over all problems")
    if cuda_ratios[False]:
        print(f"CUDA twin, equal lengths: {gm(cuda_ratios[False]):.3f}x the best SDPA backend, "
              f"lowest {min(cuda_ratios[False]):.3f}x")
    if ratios[True]:
        print(f"ragged (peers on the padded cache): {gm(ratios[True]):.3f}x, lowest "
              f"{min(ratios[True]):.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

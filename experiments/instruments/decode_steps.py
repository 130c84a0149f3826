"""Measure the decode locality prediction: DRAM reads of the second of two decode steps.

    python -m experiments.instruments.decode_steps --out DIR [--repeats 3]    (GPU, ncu)
    python -m experiments.instruments.decode_steps --dry-run

The cases are the H100/H200 rows of the committed prediction
(``profiles/cpu/prediction-decode-20261128``, ``experiments.simulation.decode``): the cuTile
decode kernels of ``kernels.host.decode.plan(..., group=, reverse=)`` on the prediction's shape
and cache sizes. Per case and repeat: an L2 flush (a buffer of twice the L2 written), step 1
(every chunk forward), then step 2 (forward, or backward for ``alternate``) with nothing
between. The parent runs the child under ncu (``--cache-control none``: no flush ncu's own,
``--clock-control none``; one-pass metric ``dram__bytes_read.sum``) on every decode kernel, and
maps the kernels back to (case, repeat, step) from the launch counts the child writes. Step 2's
bytes are its split kernel's and its merge's. Writes ``measured.csv`` (case, repeat, step 2's
DRAM read bytes and their ratio to the K+V bytes, beside the prediction's ratio) and the raw ncu
CSV; prints the table. Every output is checked against the fp32 reference first.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

from experiments.simulation.decode import ORDERS, PACKINGS, SHAPE, SIZES, capacity

METRIC = "dram__bytes_read.sum"


def cases(arch_name: str) -> list[dict]:
    cap = capacity(arch_name)
    per_token = 2 * SHAPE["B"] * SHAPE["H_kv"] * SHAPE["D"] * 2
    return [dict(size=size, S_kv=int(size * cap / per_token) // 256 * 256, order=o, packing=p)
            for size in SIZES for o in ORDERS for p in PACKINGS]


def child(arch_name: str, repeats: int, launches_file: Path) -> int:
    """Run every case's two steps ``repeats`` times; write how many kernels each step launched."""
    import torch
    import torch.nn.functional as F

    from kernels.host.decode import DecodeLaunch, plan
    from spec import Problem
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")
    s = SHAPE
    log = []
    for c in cases(arch_name):
        pr = Problem(B=s["B"], H=s["H"], H_kv=s["H_kv"], S_q=s["S_q"], S_kv=c["S_kv"], D=s["D"],
                     dtype="bf16", causal=False)
        g = torch.Generator(device="cuda").manual_seed(c["S_kv"])
        q = torch.randn(pr.B, pr.H, 1, pr.D, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(pr.B, pr.H_kv, pr.S_kv, pr.D, device="cuda", dtype=torch.bfloat16,
                        generator=g)
        v = torch.randn_like(k)
        group = c["packing"] == "group"
        p1 = plan(pr, sms, group=group)
        p2 = plan(pr, sms, group=group, reverse=c["order"] == "alternate")
        step1, step2 = DecodeLaunch(p1, 0), DecodeLaunch(p2, 0)
        out = torch.full_like(q, float("nan"))
        with torch.no_grad():
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                 enable_gqa=True)
            for launch in (step1, step2):
                out.fill_(float("nan"))
                launch(q, k, v, out)
                err = (out.float() - ref).abs().max().item()
                if not err < 2e-2:
                    raise SystemExit(f"decode_steps: {c}: max error {err:.3g}")
            torch.cuda.synchronize()
            for r in range(repeats):
                flush.fill_(r)
                step1(q, k, v, out)
                step2(q, k, v, out)
            torch.cuda.synchronize()
        n1, n2 = (1 + (x.splits > 1) for x in (p1, p2))
        log.append(dict(c, splits=p1.splits, kernels=(n1, n2),
                        kv_bytes=2 * pr.B * pr.H_kv * pr.S_kv * pr.D * 2))
    launches_file.write_text(json.dumps(log))
    return 0


def parent(arch_name: str, repeats: int, out: Path) -> int:
    ncu = os.environ.get("NCU", "ncu")
    launches = out / "launches.json"
    cmd = [ncu, "--cache-control", "none", "--clock-control", "none", "-k", "regex:decode",
           "--metrics", METRIC, "--csv", "--print-units", "base", sys.executable, "-m",
           "experiments.instruments.decode_steps", "--child", str(launches), "--arch",
           arch_name, "--repeats", str(repeats)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    (out / "ncu.csv").write_text(r.stdout)
    if r.returncode != 0 or not launches.exists():
        print(f"decode_steps: the ncu run failed (exit {r.returncode}): "
              f"{(r.stderr or r.stdout)[-800:]}", file=sys.stderr)
        return 1
    text = r.stdout[r.stdout.index('"ID"'):]
    values = [float(row["Metric Value"].replace(",", "")) for row in csv.DictReader(io.StringIO(
        text)) if row["Metric Name"] == METRIC]
    log = json.loads(launches.read_text())
    need = sum((repeats + 1) * (a + b) for a, b in (x["kernels"] for x in log))
    if len(values) != need:
        print(f"decode_steps: {len(values)} kernels profiled, {need} expected", file=sys.stderr)
        return 1
    from experiments.simulation.decode import step2_read_misses
    from spec import get_arch
    sms, cap = get_arch(arch_name).num_sms, capacity(arch_name)
    rows, i = [], 0
    for x in log:
        n1, n2 = x["kernels"]
        pred, _ = step2_read_misses(x["S_kv"], x["order"], x["packing"], sms, cap)
        i += n1 + n2                                  # the correctness check's two steps
        for rep in range(repeats):
            i += n1
            b2 = sum(values[i:i + n2])
            i += n2
            rows.append(dict(arch=arch_name, size=x["size"], S_kv=x["S_kv"], order=x["order"],
                             packing=x["packing"], splits=x["splits"], repeat=rep,
                             kv_bytes=x["kv_bytes"], step2_dram_read_bytes=int(b2),
                             measured_over_kv=round(b2 / x["kv_bytes"], 4),
                             predicted_over_kv=round(pred / x["kv_bytes"], 4)))
    with (out / "measured.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"{'K+V/L2':>6} {'order':9} {'packing':7} {'measured/K+V (repeats)':>28} predicted")
    for k in range(0, len(rows), repeats):
        grp = rows[k:k + repeats]
        r0 = grp[0]
        got = " ".join("%.3f" % g["measured_over_kv"] for g in grp)
        print(f"{r0['size']:6.2f} {r0['order']:9} {r0['packing']:7} {got:>28} "
              f"{r0['predicted_over_kv']:.3f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.instruments.decode_steps",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="a new directory")
    ap.add_argument("--arch", default="h200", choices=("h100", "h200"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child is not None:
        return child(a.arch, a.repeats, a.child)
    if a.dry_run:
        for c in cases(a.arch):
            print(c)
        print(f"{len(cases(a.arch))} cases x {a.repeats} repeats, two steps each")
        return 0
    if a.out is None or a.out.exists():
        print("decode_steps: pass --out with a new directory (or --dry-run)", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True)
    return parent(a.arch, a.repeats, a.out)


if __name__ == "__main__":
    sys.exit(main())

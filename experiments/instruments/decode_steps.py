"""The decode study on the GPU: DRAM reads and time of the second of two decode steps in a row.

``measure_rows`` is what ``python -m experiments.run decode`` runs on a GPU (the module's own
command line is the child it starts under ncu). The cases are the study's grid
(``experiments.simulation.decode.study_cases``): the cuTile decode kernels of
``kernels.host.decode.plan(..., group=, reverse=)`` at each case's shape and cache size, every
output checked against the fp32 reference first. Per case and repeat: an L2 flush (a buffer of
twice the L2 written), step 1 (every chunk forward), then step 2 (forward, or backward for
``alternate``) with nothing between. ``profile_steps`` runs the child under ncu
(``--cache-control none``: no flush of ncu's own, ``--clock-control none``; the one-pass metric
``dram__bytes_read.sum``) on every decode kernel and maps the kernels back to (case, repeat,
step) from the launch counts the child writes; step 2's bytes are its split kernel's and its
merge's. ``time_steps`` times each case's second step beside SDPA's flash and cuDNN backends
doing the same.
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

from experiments.simulation.decode import STEP2, study_cases, study_row
from spec.decode import cache_bytes

METRIC = "dram__bytes_read.sum"


def _problem(c: dict):
    from spec import Problem
    return Problem(B=c["B"], H=c["H"], H_kv=c["H_kv"], S_q=c["S_q"], S_kv=c["S_kv"], D=c["D"],
                   dtype="bf16", causal=False)


def _inputs(c: dict):
    import torch
    pr = _problem(c)
    g = torch.Generator(device="cuda").manual_seed(c["S_kv"])
    q = torch.randn(pr.B, pr.H, pr.S_q, pr.D, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(pr.B, pr.H_kv, pr.S_kv, pr.D, device="cuda", dtype=torch.bfloat16,
                    generator=g)
    return pr, q, k, torch.randn_like(k)


def _steps(c: dict, pr, sms: int):
    """The case's two plans: both steps forward, or the second backward (``alternate``)."""
    from kernels.host.decode import plan
    group = c["packing"] == "group"
    return (plan(pr, sms, group=group),
            plan(pr, sms, group=group, reverse=c["order"] == "alternate"))


def child(arch_name: str, repeats: int, launches_file: Path) -> int:
    """Run every case's two steps ``repeats`` times; write how many kernels each step launched."""
    import torch
    import torch.nn.functional as F

    from kernels.host.decode import DecodeLaunch
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")
    log = []
    for c in study_cases(arch_name):
        pr, q, k, v = _inputs(c)
        p1, p2 = _steps(c, pr, sms)
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
        log.append(dict(c, splits=p1.splits, kernels=(n1, n2), hg=p1.hg, sqp=p1.sqp,
                        tile_n=p1.tile_n, kv_bytes=cache_bytes(pr.B, pr.H_kv, pr.S_kv, pr.D)))
    launches_file.write_text(json.dumps(log))
    return 0


class MeasureError(RuntimeError):
    """The ncu run failed or its kernels do not pair with the launches."""


def profile_steps(arch_name: str, repeats: int, out: Path) -> list[dict]:
    """Run the child under ncu; per case and repeat the second step's DRAM read bytes (its split
    kernel's and its merge's), with the case's plan. Writes ``ncu.csv`` and ``launches.json``
    into ``out``."""
    ncu = os.environ.get("NCU", "ncu")
    launches = out / "launches.json"
    cmd = [ncu, "--cache-control", "none", "--clock-control", "none", "-k", "regex:decode",
           "--metrics", METRIC, "--csv", "--print-units", "base", sys.executable, "-m",
           "experiments.instruments.decode_steps", "--child", str(launches), "--arch",
           arch_name, "--repeats", str(repeats)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    (out / "ncu.csv").write_text(r.stdout)
    if r.returncode != 0 or not launches.exists() or '"ID"' not in r.stdout:
        raise MeasureError(f"the ncu run failed (exit {r.returncode}): "
                           f"{(r.stderr or r.stdout)[-800:]}")
    text = r.stdout[r.stdout.index('"ID"'):]
    values = [float(row["Metric Value"].replace(",", "")) for row in csv.DictReader(io.StringIO(
        text)) if row["Metric Name"] == METRIC]
    log = json.loads(launches.read_text())
    need = sum((repeats + 1) * (a + b) for a, b in (x["kernels"] for x in log))
    if len(values) != need:
        raise MeasureError(f"{len(values)} kernels profiled, {need} expected")
    rows, i = [], 0
    for x in log:
        n1, n2 = x["kernels"]
        i += n1 + n2                                  # the correctness check's two steps
        for rep in range(repeats):
            i += n1
            rows.append(dict(x, repeat=rep, step2_dram_read_bytes=int(sum(values[i:i + n2]))))
            i += n2
    return rows


def time_steps(arch_name: str, run: str, reps: int, log: list[dict]) -> list:
    """Kernel time of the second step of each case (cold L2 before the first, the first step
    untimed, then the second timed: ``time_interleaved``'s ``prime``), beside SDPA's flash and
    cuDNN backends doing the same (their own scan order, two calls in a row), per shape and
    cache size: ``kernel_time_ms`` rows, one per sample."""
    import torch

    from experiments.measurement.timing import sdpa_peers, time_interleaved
    from kernels.host.decode import DecodeLaunch
    from spec.records import Metric
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    by_cache: dict = {}
    for x in log:
        by_cache.setdefault((x["shape"], x["size"]), []).append(x)
    for group in by_cache.values():
        pr, q, k, v = _inputs(group[0])
        out = torch.empty_like(q)
        fns, prime, who = {}, {}, {}
        for x in group:
            p1, p2 = _steps(x, pr, sms)
            name = f"decode.{x['order']}.{x['packing']}"
            s1, s2 = DecodeLaunch(p1, 0), DecodeLaunch(p2, 0)
            prime[name] = lambda s1=s1: s1(q, k, v, out)
            fns[name] = lambda s2=s2: s2(q, k, v, out)
            who[name] = (x, "cutile")
        for name, fn in sdpa_peers(q, k, v, False).items():
            fns[name], prime[name], who[name] = fn, fn, (group[0], name)
        samples = time_interleaved(fns, reps=reps, l2="cold", prime=prime)
        for name, smp in samples.items():
            x, backend = who[name]
            rows += [study_row(x, arch_name, run, backend, Metric.KERNEL_TIME_MS, ms, i,
                          f"{STEP2}; l2=cold before step 1") for i, ms in enumerate(smp.ms)]
    return rows


def measure_rows(arch_name: str, *, run: str, repeats: int, reps: int,
                 work: Path) -> tuple[list, list]:
    """The decode study measured (``python -m experiments.run decode`` on a GPU): (ncu rows,
    timing rows) of its grid. ncu: the second step's ``dram__bytes_read.sum`` per repeat
    (``profile_steps``, raw files in ``work``); timing: ``time_steps``."""
    from spec.records import Metric
    got = profile_steps(arch_name, repeats, work)
    counters = [study_row(x, arch_name, run, "cutile", Metric.DRAM_READ_BYTES,
                     x["step2_dram_read_bytes"], x["repeat"],
                     f"{STEP2}; ncu {METRIC}, --cache-control none, after an L2 flush")
                for x in got]
    first = {(x["shape"], x["size"], x["order"], x["packing"]): x for x in got}
    return counters, time_steps(arch_name, run, reps, list(first.values()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.instruments.decode_steps",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="h200", choices=("h100", "h200"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dry-run", action="store_true", help="list the cases")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child is not None:
        return child(a.arch, a.repeats, a.child)
    if not a.dry_run:
        print("decode_steps: the study is measured by python -m experiments.run decode --arch "
              f"{a.arch}; add --dry-run to list its cases here", file=sys.stderr)
        return 2
    for c in study_cases(a.arch):
        print(c)
    print(f"{len(study_cases(a.arch))} cases x {a.repeats} repeats, two steps each")
    return 0

if __name__ == "__main__":
    sys.exit(main())

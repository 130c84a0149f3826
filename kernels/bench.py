"""cuTile FlashAttention benchmark: correctness, timing beside PyTorch SDPA flash / cuDNN, sawtooth.

    python -m kernels.bench --out profiles/h100/cutile_bench.csv [--sections peers,sawtooth,ladder]

Protocol (experiments/timing.py): CUDA events on the current stream, warm-up first, cold L2 (a
2×L2 buffer written before every repetition), launches of all contenders interleaved, every sample
kept. Each cuTile variant is checked against the fp32 reference first (outputs poisoned); a failed
check is reported in the CSV ``note`` and the table, and the benchmark goes on.

Sections:
- ``peers``: the arch's best default configuration (kernels/configs/<arch>.json), fp16, B=1, H=16,
  S in {4K, 16K, 32K}, D in {64, 128}, non-causal and causal, beside ``sdpa-flash`` and ``sdpa-cudnn``.
- ``sawtooth``: sawtooth vs linear, same tiles, hints and persistent schedule (P = SM count):
  S=16K (B=1, H=16; K/V of a head fits L2) and S=128K (B=1, H=1, D=128; K/V 64 MiB > L2).
- ``ladder``: the NVIDIA tuning ladder, levels 1..6, S=16K, B=1, H=16.

Rows follow spec/records.py (one per sample for ``kernel_time_ms``, one ``tflops`` per median);
a manifest JSON with the environment sits beside the CSV. A short table is printed last.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

from spec import Problem
from spec.orders import ScanOrder
from spec.problem import Tiles
from spec.records import Metric, Row, Source, write_csv
from spec.schedules import CtaSchedule
from spec.variant import Backend, Variant

K = 1024


def _git() -> tuple[str, bool]:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain"], capture_output=True,
                                    text=True).stdout.strip())
        return sha, dirty
    except Exception:  # noqa: BLE001 - the GPU machine's copy may have no .git
        return os.environ.get("GIT_COMMIT", "unknown"), False


class Bench:
    def __init__(self, run_id: str, reps: int, warmup: int):
        import torch

        from spec import arch
        from .backend import CutileBackend
        self.arch = arch.detect()
        self.run_id, self.reps, self.warmup = run_id, reps, warmup
        self.rows: list[Row] = []
        self.table: list[str] = []
        self.be = CutileBackend()
        self.torch = torch

    # ------------------------------------------------------------------------------------------
    def _rows(self, study, problem, name, samples, variant=None, tiles=None, occ=None, note=""):
        from spec.records import case_fields
        base = dict(run=self.run_id, study=study, arch=self.arch.name, source=Source.MEASURED.value)
        if variant is not None:
            cf = case_fields(problem, variant)
        else:
            cf = case_fields(problem) | dict(variant=name, backend="torch", order="",
                                             schedule="", occupancy=None, tile_m=0, tile_n=0)
        for i, ms in enumerate(samples.ms):
            self.rows.append(Row(**base, **cf, metric=Metric.KERNEL_TIME_MS, value=round(ms, 5),
                                 unit="ms", sample=i, note=note))
        self.rows.append(Row(**base, **cf, metric=Metric.TFLOPS,
                             value=round(samples.tflops(problem.flops), 2), unit="TFLOP/s",
                             sample=0, note=f"median of {len(samples.ms)}; {note}".strip("; ")))

    def _inputs(self, problem, seed=0):
        from experiments.correctness import random_inputs
        return random_inputs(problem, seed)

    def _cutile(self, variant, problem, q, k, v, level=6):
        """Launcher closure (arguments prebuilt) and a correctness verdict."""
        import cuda.tile as ct

        from experiments.correctness import check, poisoned_like

        from . import fmha
        from .backend import CutileBackend, _dummy_trace
        be = self.be if level == 6 else CutileBackend(level=level)
        p = be.prepare(variant, problem)
        out = poisoned_like(q)
        be.run(p, q, k, v, out)               # compiles; validates the tensors once
        res = check(out, q, k, v, problem.causal)
        kern = fmha.get_kernel(p.occupancy, p.worker_warps)
        args = (q, k, v, out, _dummy_trace(q.device), p.qk_scale) + p.consts + (False,)
        stream = self.torch.cuda.current_stream()
        grid = (p.n_ctas, 1, 1)

        def launch():
            ct.launch(stream, grid, kern, args)
        return launch, res, p

    # ------------------------------------------------------------------------------------------
    def peers(self, seqs, dims, modes):
        from experiments.timing import sdpa_peers, time_interleaved

        from .backend import default_schedule
        from .config import default_config
        for D in dims:
            for causal in modes:
                cfg = default_config(self.arch.name, D, causal)
                for S in seqs:
                    problem = Problem(B=1, H=16, S_q=S, D=D, causal=causal)
                    q, k, v = self._inputs(problem)
                    sched = default_schedule(problem, cfg, cfg.tiles, self.arch.num_sms)
                    var = Variant(Backend.CUTILE, ScanOrder.linear(), sched, cfg.tiles,
                                  cfg.occupancy)
                    try:
                        launch, res, p = self._cutile(var, problem, q, k, v)
                    except Exception as e:  # noqa: BLE001 - reported, the run goes on
                        traceback.print_exc()
                        self.table.append(f"peers {problem.label}: cutile FAILED {e}")
                        continue
                    fns = {"cutile": launch} | sdpa_peers(q, k, v, causal)
                    s = time_interleaved(fns, reps=self.reps, warmup=self.warmup, l2="cold")
                    note = f"check={'ok' if res.passed else 'FAIL'} max_err={res.max_err:.2e}"
                    if cfg.worker_warps:
                        note += f" worker_warps={cfg.worker_warps}"
                    self._rows("peers", problem, p.id, s["cutile"], var, note=note)
                    for name in ("sdpa-flash", "sdpa-cudnn"):
                        if name in s:
                            self._rows("peers", problem, name, s[name])
                    tf = {n: x.tflops(problem.flops) for n, x in s.items()}
                    fl, cu = tf.get("sdpa-flash", float("nan")), tf.get("sdpa-cudnn", float("nan"))
                    self.table.append(
                        f"D={D:3d} {'causal' if causal else 'full  '} S={S // K:3d}K  "
                        f"cutile {tf['cutile']:6.1f} (±{100 * s['cutile'].spread:.1f}%)  "
                        f"flash {fl:6.1f}  cudnn {cu:6.1f}  x_flash {tf['cutile'] / fl:5.2f}  "
                        f"x_cudnn {tf['cutile'] / cu:5.2f}  {res}  [{p.id}]")
                    print(self.table[-1], flush=True)
                    del q, k, v
                    self.torch.cuda.empty_cache()

    def sawtooth(self, cases):
        from experiments.timing import time_interleaved

        for (B, H, S, D, causal, P, reps, tiles, occ) in cases:
            problem = Problem(B=B, H=H, S_q=S, D=D, causal=causal)
            q, k, v = self._inputs(problem, 1)
            fns, ress, vars_ = {}, {}, {}
            for order in ("linear", "sawtooth"):
                var = Variant(Backend.CUTILE, ScanOrder.parse(order), CtaSchedule.persistent(P),
                              Tiles(*tiles), occ)
                fns[order], ress[order], _ = self._cutile(var, problem, q, k, v)
                vars_[order] = var
            s = time_interleaved(fns, reps=reps, warmup=2, l2="cold")
            for order in fns:
                r = ress[order]
                self._rows("sawtooth", problem, order, s[order], vars_[order],
                           note=f"check={'ok' if r.passed else 'FAIL'} max_err={r.max_err:.2e}")
            lin, saw = s["linear"].median, s["sawtooth"].median
            kv_mib = 2 * S * D * 2 / (1 << 20)
            self.table.append(
                f"sawtooth vs linear {problem.label} P={P} (K/V per head {kv_mib:.0f} MiB): "
                f"linear {s['linear'].tflops(problem.flops):6.1f}  sawtooth "
                f"{s['sawtooth'].tflops(problem.flops):6.1f} TFLOPS  speedup {lin / saw:5.3f}  "
                f"[{vars_['sawtooth'].id(problem)}] {ress['linear']} / {ress['sawtooth']}")
            print(self.table[-1], flush=True)
            del q, k, v
            self.torch.cuda.empty_cache()

    def ladder(self, cases):
        from experiments.timing import time_interleaved

        from .backend import default_schedule
        from .config import LEVELS, default_config
        for (S, D, causal) in cases:
            problem = Problem(B=1, H=16, S_q=S, D=D, causal=causal)
            cfg = default_config(self.arch.name, D, causal)
            q, k, v = self._inputs(problem, 2)
            sched = default_schedule(problem, cfg, cfg.tiles, self.arch.num_sms)
            var = Variant(Backend.CUTILE, ScanOrder.linear(), sched, cfg.tiles, cfg.occupancy)
            fns, ress = {}, {}
            for level in LEVELS:
                fns[level], ress[level], _ = self._cutile(var, problem, q, k, v, level=level)
            s = time_interleaved(fns, reps=max(5, self.reps // 2), warmup=2, l2="cold")
            parts = []
            for level, name in LEVELS.items():
                self._rows("ladder", problem, name, s[level], var,
                           note=f"level={level} {name}; check="
                                f"{'ok' if ress[level].passed else 'FAIL'}")
                parts.append(f"{level}:{s[level].tflops(problem.flops):.0f}"
                             + ("" if ress[level].passed else "!"))
            self.table.append(f"ladder {problem.label} [{var.id(problem)}]: " + " ".join(parts))
            print(self.table[-1], flush=True)


def diag(b: "Bench") -> None:
    """Launch overhead and protocol sensitivity of one config (printed, not written)."""
    import torch

    from experiments.timing import sdpa_peers, time_interleaved, time_one

    from .backend import default_schedule
    from .config import default_config
    for D, causal in ((128, False), (128, True)):
        problem = Problem(B=1, H=16, S_q=16 * K, D=D, causal=causal)
        cfg = default_config(b.arch.name, D, causal)
        q, k, v = b._inputs(problem)
        var = Variant(Backend.CUTILE, ScanOrder.linear(),
                      default_schedule(problem, cfg, cfg.tiles, b.arch.num_sms), cfg.tiles,
                      cfg.occupancy)
        launch, res, p = b._cutile(var, problem, q, k, v)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(50):
            launch()
        host_us = (time.perf_counter() - t0) / 50 * 1e6
        torch.cuda.synchronize()
        alone = time_one(launch, reps=15, l2="cold").tflops(problem.flops)
        warm = time_one(launch, reps=15, l2="warm").tflops(problem.flops)
        inter = time_interleaved({"c": launch} | sdpa_peers(q, k, v, causal), reps=15, l2="cold")
        st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        st.record()
        for _ in range(20):
            launch()
        en.record()
        torch.cuda.synchronize()
        b2b = problem.flops / (st.elapsed_time(en) / 20 * 1e-3) / 1e12
        print(f"diag {problem.label} {p.id}: host launch {host_us:.0f} us; alone cold {alone:.0f}, "
              f"warm {warm:.0f}, back-to-back {b2b:.0f}, interleaved "
              + ", ".join(f"{n} {x.tflops(problem.flops):.0f}" for n, x in inter.items()),
              flush=True)


def manifest(run_id: str, arch) -> dict:
    import torch
    try:
        import cuda.tile as ct
        ctv = ct.__version__
    except Exception:  # noqa: BLE001
        ctv = None
    sha, dirty = _git()
    props = torch.cuda.get_device_properties(0)
    drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    from .toolchain import inspect
    tc = inspect()
    return {"schema": 1, "run": run_id, "gpu": props.name, "sm_count": props.multi_processor_count,
            "l2_bytes": props.L2_cache_size, "driver": drv, "cuda_runtime": torch.version.cuda,
            "torch": torch.__version__, "cuda_tile": ctv, "tileiras": tc.tileiras_version,
            "cudnn": torch.backends.cudnn.version(), "python": platform.python_version(),
            "git_commit": sha, "git_dirty": dirty, "seed": 0, "l2_state": "cold",
            "ncu": None, "clock_control": "none (card as found)", "arch": arch.name}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="CSV path")
    ap.add_argument("--sections", default="peers,sawtooth,ladder")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seqs", default="4096,16384,32768")
    ap.add_argument("--dims", default="64,128")
    args = ap.parse_args(argv)
    if args.out.exists() or args.out.with_suffix(".json").exists():
        ap.error(f"{args.out} (or its .json manifest) exists; results are never overwritten: "
                 "pass another --out")
    run_id = time.strftime("%Y%m%dT%H%M%S")
    b = Bench(run_id, args.reps, args.warmup)
    sections = args.sections.split(",")
    seqs = [int(s) for s in args.seqs.split(",")]
    dims = [int(d) for d in args.dims.split(",")]
    P = b.arch.num_sms
    # (B, H, S, D, causal, P, reps, tiles, occupancy): configurations whose linear and sawtooth
    # persistent builds are both spill-free on sm_90 (tests/cpu/test_cutile_compile.py); 64x64 is
    # the paper's tile
    saw_cases = [(1, 16, 16 * K, 128, False, P, 10, (128, 64), 2),
                 (1, 16, 16 * K, 128, False, P, 10, (64, 64), 2),
                 (1, 1, 128 * K, 128, False, P, 8, (128, 64), 2),
                 (1, 1, 128 * K, 128, False, P, 8, (64, 64), 2),
                 (1, 16, 16 * K, 64, False, P, 10, (128, 64), 2),
                 (1, 16, 16 * K, 64, False, P, 10, (64, 64), 2),
                 (1, 1, 128 * K, 64, False, P, 8, (64, 64), 2),
                 (1, 1, 128 * K, 128, True, P, 8, (128, 128), 1),
                 # the arch's default tiles (128x128, occupancy 1, 8 worker warps on sm_90)
                 (1, 16, 16 * K, 128, False, P, 10, (128, 128), 1),
                 (1, 1, 128 * K, 128, False, P, 8, (128, 128), 1),
                 (1, 16, 128 * K, 128, False, P, 5, (128, 128), 1)]
    ladder_cases = [(16 * K, 128, False), (16 * K, 64, True)]
    t0 = time.time()
    try:
        if "diag" in sections:
            diag(b)
        if "peers" in sections:
            b.peers(seqs, dims, (False, True))
        if "sawtooth" in sections:
            b.sawtooth(saw_cases)
        if "ladder" in sections:
            b.ladder(ladder_cases)
    except BaseException:
        print("\n".join(b.table))
        print(f"\nbenchmark interrupted: nothing written to {args.out}", file=sys.stderr)
        raise
    # complete files only: written beside the target, then renamed into place
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_csv, tmp_json = (args.out.with_name(f".{args.out.name}.partial"),
                         args.out.with_name(f".{args.out.stem}.json.partial"))
    n = write_csv(tmp_csv, b.rows)
    tmp_json.write_text(json.dumps(manifest(run_id, b.arch), indent=1))
    tmp_json.rename(args.out.with_suffix(".json"))
    tmp_csv.rename(args.out)
    print(f"\nwrote {n} rows to {args.out} ({time.time() - t0:.0f}s)\n")
    print("\n".join(b.table))
    return 0


if __name__ == "__main__":
    sys.exit(main())

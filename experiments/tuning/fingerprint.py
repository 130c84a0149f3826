"""SASS fingerprints of every build the test suites compile: proof that a refactor of the device
code left the machine code alone.

A build's fingerprint is the sha256 of its cubin's ``.text.*`` section *contents*, concatenated in
section-name order; the names are left out (a cuTile kernel's mangled name can carry module
paths), so is everything else in the cubin (debug PTX, ELF layout, notes). Two checkouts whose
fingerprints agree build the same instructions for every kernel the tests exercise.

What is enumerated (each distinct build once, named by what decides its code):

* cuTile forward (``kernels.build.signatures.CompileCase`` with its occupancy / worker-warp
  hints) and backward (``BackwardCase``) builds of the CPU compile tests
  (tests/cpu/kernels/test_cutile_compile.py, test_cutile_backward_compile.py,
  test_study_builds.py, test_backward_study_builds.py) and of the GPU tests' ``builds(arch)``
  lists (tests/gpu/test_cutile.py, test_attention_op.py) and backward trace test;
* CUDA forward instances (``cuda_baseline.build.source``: ``ci_instances``, ``stage_instances``,
  the training builds, the GPU tests' instances; ``--cuda-all``: ``all_instances`` too) and
  backward kernels (``cuda_baseline.build.bwd_source``: ``ci_bwd_instances`` and the trace and
  opt-in builds of its compile test), each compiled alone with nvcc ``-cubin``.

Everything is compiled for sm_90. Usage::

    python -m experiments.tuning.fingerprint --out A.json [--family cutile|cuda|both]
        [--jobs N] [--limit K] [--match REGEX] [--names FILE] [--source DIR]
    python -m experiments.tuning.fingerprint --compare A.json B.json
    python -m experiments.tuning.fingerprint --list

``--limit K`` takes K builds spread evenly over the enumeration (a sample); ``--match`` keeps the
builds whose name the regular expression finds, ``--names FILE`` those listed. ``--source DIR``
fingerprints the checkout at DIR (e.g. ``git archive`` of another commit unpacked there): this
file runs there as a script, importing DIR's packages and test lists. ``--compare`` prints the
builds whose fingerprints differ or that only one file has, and exits 1 if there are any, 0 if
the files agree, 2 on unreadable input.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

ARCH = "sm_90"
SCHEMA = 1


# ------------------------------------------------------------------------------------------------
# naming
# ------------------------------------------------------------------------------------------------
def _case_label(case) -> str:
    """A dataclass case by its fields that differ from the defaults, in name order (stable
    across commits that reorder or regroup the fields)."""
    default = type(case)()
    parts = [f"{n}={getattr(case, n)}" for n in sorted(f.name for f in dataclasses.fields(case))
             if getattr(case, n) != getattr(default, n)]
    return ",".join(parts)


def _cutile_fwd(case, occ, ww, lse=False):
    kind = "cutile.fwd_lse" if lse else "cutile.fwd"
    return (f"{kind}[{_case_label(case)}] occ={occ} ww={ww}", ("fwd", case, occ, ww, lse))


def _cutile_bwd(case, occ, ww):
    return (f"cutile.bwd[{_case_label(case)}] occ={occ} ww={ww}", ("bwd", case, occ, ww))


def _cuda(name: str):
    return (f"cuda.{name}", ("cuda", name))


# ------------------------------------------------------------------------------------------------
# enumeration (what each test compiles; the test modules are read, never run)
# ------------------------------------------------------------------------------------------------
def _cutile_cpu_forward() -> list:
    from experiments.registry.plans import sawtooth_plan
    from experiments.tuning.candidates import tactic_trials
    from kernels.build.signatures import CompileCase
    from kernels.device.tactics import TACTIC_PREFETCH_Q
    from kernels.host.backend import compile_hints, default_schedule
    from kernels.rules.config import KernelConfig
    from spec import Backend, Problem, ScanOrder, Variant, get_arch
    from tests.cpu.kernels import test_cutile_compile as t
    out = []
    for p in t._matrix():
        sm, causal, sched, order = p.values
        case, cfg = t._case(t.ARCHS[sm], 128 if causal else 64, causal, order, sched)
        out.append(_cutile_fwd(case, cfg.occupancy, cfg.worker_warps))
    for sm in t.ARCHS:
        for level in (1, 3, 6):
            case, cfg = t._case(t.ARCHS[sm], 64, True, "sawtooth", "static", S=1000, level=level)
            out.append(_cutile_fwd(case, cfg.occupancy if level >= 5 else None, None))
        case, cfg = t._case(t.ARCHS[sm], 64, True, "sawtooth", "tile2", S=1000, trace=True)
        out.append(_cutile_fwd(case, cfg.occupancy, cfg.worker_warps))
    for D in (64, 128):
        for causal in (False, True):
            for order in ("linear", "sawtooth"):
                for sched in ("static", "grid"):
                    for dtype in ("fp16", "bf16"):
                        case, cfg = t._case("h100", D, causal, order, sched, dtype=dtype)
                        out.append(_cutile_fwd(case, cfg.occupancy, cfg.worker_warps))
    arch = get_arch("h100")
    for D, causal in ((64, False), (64, True), (128, True)):
        pr = Problem(B=1, H=8, S_q=3001, S_kv=3001, D=D, dtype="bf16", causal=causal)
        for c in tactic_trials(D, causal):
            cfg = c.config()
            v = Variant(Backend.CUTILE, ScanOrder.linear(),
                        default_schedule(pr, cfg, cfg.tiles, arch), cfg.tiles, c.occupancy)
            occ, ww = compile_hints(v, pr, arch.name, 6, cfg)
            out.append(_cutile_fwd(CompileCase.of(v, pr, tactic=cfg.tactic), occ, ww))
    for S in (256, 577):
        for causal in (False, True):
            pr = Problem(B=32, H=12, S_q=S, S_kv=S, D=64, dtype="fp16", causal=causal)
            for c in tactic_trials(64, causal):
                if not c.tactic & TACTIC_PREFETCH_Q:
                    continue
                for tactic in (c.tactic, c.tactic & ~TACTIC_PREFETCH_Q):
                    cfg = KernelConfig(c.tile_m, c.tile_n, c.occupancy, c.worker_warps,
                                       c.schedule, tactic=tactic)
                    v = Variant(Backend.CUTILE, ScanOrder.linear(),
                                default_schedule(pr, cfg, cfg.tiles, arch), cfg.tiles,
                                c.occupancy)
                    occ, ww = compile_hints(v, pr, arch.name, 6, cfg)
                    out.append(_cutile_fwd(CompileCase.of(v, pr, tactic=tactic), occ, ww))
    for tactic in (0, TACTIC_PREFETCH_Q):
        case, cfg = t._case("h100", 64, True, "linear", "grid", S=577)
        out.append(_cutile_fwd(dataclasses.replace(case, tactic=tactic), cfg.occupancy,
                               cfg.worker_warps))
    case, cfg = t._case("h100", 64, False, "linear", "static")
    for aligned in (True, False):
        out.append(_cutile_fwd(dataclasses.replace(case, aligned=aligned), cfg.occupancy,
                               cfg.worker_warps))
    for a in (get_arch("h100"), get_arch("gb10")):
        for c in sawtooth_plan(a):
            if c.variant.backend.value == "cutile" and c.variant.schedule.kind.name == "TILE_X":
                out.append(_cutile_fwd(CompileCase.of(c.variant, c.problem), c.variant.occupancy,
                                       None))
    return out


def _cutile_study_forward() -> list:
    from experiments.registry.studies import get_study
    from kernels.build.signatures import CompileCase
    from kernels.host.backend import compile_hints, default_schedule
    from kernels.rules.choice import BY_LABEL, load_rule
    from kernels.rules.config import ShapeClass, class_config, representative
    from spec import Backend, Case, ScanOrder, Variant, get_arch
    arch = get_arch("h100")
    cases = [c for s in ("sawtooth", "longseq", "bench", "shapes", "models", "hostpath")
             for c in get_study(s).plan(arch) if c.variant.backend == Backend.CUTILE]
    picks = []
    for cls in ShapeClass:
        for D in (64, 128):
            for causal in (False, True):
                p = representative(cls, D, causal)
                picks.append((p, class_config("h100", p), cls.value))
    rule = load_rule("h100")
    for key, per in (rule.constants if rule else {}).items():
        D, causal = int(key.split(".")[0][1:]), key.endswith("causal")
        for label in per:
            for cls in (ShapeClass.LONG, ShapeClass.TINY, ShapeClass.UNEVEN):
                picks.append((representative(cls, D, causal), BY_LABEL[label], label))
    cases += [Case(p, Variant(Backend.CUTILE, ScanOrder.linear(),
                              default_schedule(p, cfg, cfg.tiles, arch), cfg.tiles,
                              cfg.occupancy), arch.num_sms, panel) for p, cfg, panel in picks]
    return [_cutile_fwd(CompileCase.of(c.variant, c.problem),
                        *compile_hints(c.variant, c.problem, "h100")) for c in cases]


def _cutile_gpu_forward() -> list:
    from kernels.build.signatures import CompileCase
    from kernels.host.backend import compile_hints
    from spec import Backend, get_arch
    from tests.gpu import test_attention_op, test_cutile
    arch = get_arch("h100")
    out = []
    for mod in (test_cutile, test_attention_op):
        for triples in mod.builds(arch).values():
            for v, p, trace in triples:
                if v.backend != Backend.CUTILE:
                    continue
                level = v.level or 6
                case = CompileCase.of(v, p, trace=trace, level=level)
                out.append(_cutile_fwd(case, *compile_hints(v, p, arch.name, level)))
    return out


def _cutile_backward() -> list:
    from experiments.registry.plans import backward_plan
    from kernels.build.signatures import BackwardCase, CompileCase
    from kernels.host.backend import default_variant
    from kernels.host.backward import BASE, SUM_TILE_N, PassConfig
    from kernels.rules.backward_choice import CANDIDATES
    from kernels.rules.backward_config import WIDE
    from kernels.rules.config import default_config
    from spec import Problem, get_arch
    from spec.orders import OrderKind
    from spec.problem import Tiles
    from spec.schedules import ScheduleKind, WorkOrder
    from tests.cpu.kernels import test_cutile_backward_compile as t
    from tests.gpu import test_backward_trace as g
    out = []
    for D in (64, 128):
        for causal in (False, True):
            for kernel in ("dkdv", "dq"):
                for pc in CANDIDATES.values():
                    out.append(_cutile_bwd(t._case(kernel, D, causal, pc), pc.occupancy,
                                           pc.worker_warps))
            cfg = default_variant(Problem(1, 16, 4096, D, causal=causal), get_arch("h100"),
                                  training=True).backward
            out.append(_cutile_bwd(t._case("split_sum", D, causal, cfg.dkdv, split=4, H_kv=2,
                                           tile_n=SUM_TILE_N), None, None))
            for split, H_kv in ((1, 16), (4, 2)):          # test_one_pass_builds
                out.append(_cutile_bwd(t._case("dkdv", D, causal, BASE, H_kv=H_kv, split=split,
                                               one_pass=True), BASE.occupancy,
                                       BASE.worker_warps))
                if D == 64:
                    out.append(_cutile_bwd(t._case("dkdv", D, causal, WIDE, H_kv=H_kv,
                                                   split=split, one_pass=True), 1, 8))
            if D == 128:
                out.append(_cutile_bwd(t._case("dkdv", D, causal, PassConfig(Tiles(64, 64), 2),
                                               one_pass=True), 2, None))
            pc = cfg.dkdv
            for order in (OrderKind.LINEAR, OrderKind.SAWTOOTH):
                for sched in (ScheduleKind.GRID, ScheduleKind.PERSISTENT):
                    out.append(_cutile_bwd(t._case("dkdv", D, causal, pc, order=int(order),
                                                   sched=int(sched)), pc.occupancy,
                                           pc.worker_warps))
        pc = default_variant(Problem(1, 32, 4096, D, H_kv=1, causal=True), get_arch("h100"),
                             training=True).backward.dkdv
        out.append(_cutile_bwd(t._case("dkdv", D, True, pc, H=32, H_kv=1, split=16),
                               pc.occupancy, pc.worker_warps))
        for kernel in ("prep", "dq_cast"):                  # test_one_pass_builds
            out.append(_cutile_bwd(t._case(kernel, D, False, BASE, tile_m=SUM_TILE_N), None,
                                   None))
    for D, causal in ((64, False), (128, True)):
        cfg = default_config("h100", D, causal)
        case = CompileCase(D=D, causal=causal, tile_m=cfg.tile_m, tile_n=cfg.tile_n, S_q=1000,
                           S_kv=1000)
        out.append(_cutile_fwd(case, cfg.occupancy, cfg.worker_warps, lse=True))
    for kernel in ("dkdv", "dq"):
        for causal in (False, True):
            plain = BackwardCase(kernel=kernel, H=4, H_kv=2, S_q=333,
                                 S_kv=333 if causal else 461, causal=causal, tile_m=64,
                                 tile_n=128, order=1, sched=2, work=1)
            out += [_cutile_bwd(plain, 1, 8),
                    _cutile_bwd(dataclasses.replace(plain, trace=True, n_ctas=5), 1, 8)]
    for c in backward_plan(get_arch("h100")):
        v, p = c.variant, c.problem
        case = BackwardCase(kernel=v.bwd.value, B=p.B, H=p.H, H_kv=p.H_kv, D=p.D,
                            dtype=p.dtype.value, causal=p.causal, S_q=p.S_q, S_kv=p.S_kv,
                            tile_m=v.tiles.m, tile_n=v.tiles.n, order=int(v.order.kind),
                            sched=int(v.schedule.kind))
        out.append(_cutile_bwd(case, v.occupancy, None))
    for kernel in g.PASSES:
        for order in g.ORDERS:
            for sched in g.CUTILE_SCHEDULES:
                for causal in (False, True):
                    pr = g.cutile_problem(causal)
                    pc = g._cutile_config(order, sched).dkdv
                    s = pc.schedule
                    work = int(s.work_order) if s.kind == ScheduleKind.PERSISTENT \
                        else int(WorkOrder.Q_MAJOR)
                    case = BackwardCase(kernel=kernel, B=pr.B, H=pr.H, H_kv=pr.H_kv,
                                        S_q=pr.S_q, S_kv=pr.S_kv, D=pr.D, causal=causal,
                                        tile_m=pc.tiles.m, tile_n=pc.tiles.n,
                                        order=int(pc.order.kind), group=pc.order.group,
                                        sched=int(s.kind), work=work, trace=True,
                                        n_ctas=s.num_ctas or 16)
                    out.append(_cutile_bwd(case, pc.occupancy, pc.worker_warps))
    return out


def _cuda_builds(every: bool) -> list:
    from cuda_baseline.build.bwd_source import bwd_names, ci_bwd_instances, parse_bwd_options
    from cuda_baseline.build.source import (
        TESTED_TILES,
        Instance,
        all_instances,
        ci_instances,
        stage_instances,
    )
    from cuda_baseline.host.backend import instance_for
    from cuda_baseline.host.training import training_builds
    from experiments.registry.suites import model_problems
    from spec import Backend, get_arch
    from spec.orders import OrderKind
    from spec.problem import DType
    from spec.schedules import ScheduleKind, WorkOrder
    from tests.gpu import test_attention_op, test_backward_trace, test_cuda_baseline
    arch = get_arch("h100")
    names = [i.name for i in ci_instances() + stage_instances()]
    if every:
        names += [i.name for i in all_instances()]
    names += [i.name for o in (OrderKind.LINEAR, OrderKind.SAWTOOTH)
              for s in (ScheduleKind.GRID, ScheduleKind.LONGEST_FIRST) for t in TESTED_TILES
              for d in (64, 128) for c in (False, True) for dt in (DType.FP16, DType.BF16)
              for i in (Instance(o, s, WorkOrder.Q_MAJOR, t, d, c, dt),
                        Instance(o, s, WorkOrder.Q_MAJOR, t, d, c, dt, lse=True))]
    for mod in (test_cuda_baseline, test_attention_op):
        for triples in mod.builds(arch).values():
            names += [instance_for(v, p, trace=tr).name for v, p, tr in triples
                      if v.backend == Backend.CUDA]
    names += bwd_names(ci_bwd_instances())
    g = test_backward_trace
    probs = [g.cuda_problem(d, c) for d in g.HEAD_DIMS for c in (False, True)]
    names += training_builds(probs, g.ORDERS, (ScheduleKind.GRID, ScheduleKind.PERSISTENT),
                             arch=arch, trace=True)[1]
    probs = [pr for _, h, pr in model_problems() if h == "validation"]
    for opts in ("onepart+dqsq", "onepart+dqsq+dqv4"):
        names += training_builds(probs, arch=arch, options=parse_bwd_options(opts))[1]
    return [_cuda(n) for n in names]


def enumerate_builds(family: str = "both", cuda_all: bool = False) -> list:
    """[(name, job)] of every distinct build, in a fixed order."""
    out = []
    if family in ("cutile", "both"):
        out += (_cutile_cpu_forward() + _cutile_study_forward() + _cutile_gpu_forward()
                + _cutile_backward())
    if family in ("cuda", "both"):
        out += _cuda_builds(cuda_all)
    return list(dict(out).items())


# ------------------------------------------------------------------------------------------------
# compiling and hashing
# ------------------------------------------------------------------------------------------------
def text_sections(cubin: bytes) -> list[bytes]:
    """The contents of the cubin's ``.text.*`` sections, in section-name order."""
    from kernels.build import resources
    # a checkout before the name went public (``--source`` of an older commit) calls it _sections
    sections = getattr(resources, "elf_sections", None) or getattr(resources, "_sections")
    return [cubin[o:o + n] for name, o, n in sorted(sections(cubin))
            if name.startswith(b".text.")]


def _cuda_cubin(name: str) -> bytes:
    from cuda_baseline.build.bwd_source import bwd_compile_options
    from cuda_baseline.build.source import CompileError, compile_options, nvcc_path
    bwd = name.startswith("flash_bwd")
    entry, opts = (("flash_bwd.cu", bwd_compile_options()) if bwd
                   else ("flash_fwd.cu", compile_options()))
    with tempfile.TemporaryDirectory(prefix="fingerprint_") as d:
        cu, cubin = Path(d, "unit.cu"), Path(d, "unit.cubin")
        cu.write_text(f'#include "{entry}"\nstatic void* const k[] = {{ (void*)&{name} }};\n')
        cmd = [nvcc_path() or "nvcc", f"-arch={ARCH}", "-cubin", "-ftz=true", *opts, "-o",
               str(cubin), str(cu)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise CompileError(f"nvcc failed on {name}:\n{r.stdout}{r.stderr}")
        return cubin.read_bytes()


def _cutile_cubin(job) -> bytes:
    from kernels.build.resources import compile_backward_cubin, compile_cubin
    if job[0] == "bwd":
        _, case, occ, ww = job
        return compile_backward_cubin(case, ARCH, occ, ww)
    _, case, occ, ww, lse = job
    if not lse:
        return compile_cubin(case, ARCH, occ, ww)
    return _lse_cubin(case, occ, ww)


def _lse_cubin(case, occ, ww) -> bytes:
    """The training forward ``fmha_fwd_lse`` as test_cutile_backward_compile builds it."""
    import cuda.tile as ct
    from cuda.tile.compilation import (
        CallingConvention,
        KernelSignature,
        ScalarConstraint,
        export_kernel,
    )

    from kernels.build.signatures import jit_like_array
    from kernels.device import fmha
    q = jit_like_array((case.B, case.H, case.S_q, case.D), ct.float16)
    lse = jit_like_array((case.B, case.H, case.S_q), ct.float32,
                         strides=(case.H * case.S_q, case.S_q, 1))
    params = [q, q, q, q, lse, ScalarConstraint(ct.float32)] + list(case.constants()[:-1])
    sig = KernelSignature(params, CallingConvention.cutile_python_v2()) \
        .with_mangled_symbol("fmha_fwd_lse")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        export_kernel(fmha.get_kernel(occ, ww, save_lse=True), [sig], path, gpu_code=ARCH,
                      output_format="cubin")
        return Path(path).read_bytes()


def fingerprint(job) -> tuple[str, int]:
    """(sha256 of the build's ``.text.*`` contents, their total bytes)."""
    cubin = _cuda_cubin(job[1]) if job[0] == "cuda" else _cutile_cubin(job)
    texts = text_sections(cubin)
    if not texts:
        raise RuntimeError("the cubin has no .text section")
    h = hashlib.sha256()
    for t in texts:
        h.update(t)
    return h.hexdigest(), sum(map(len, texts))


def _work(item):
    name, job = item
    t0 = time.perf_counter()
    try:
        sha, size = fingerprint(job)
        return name, sha, size, None, time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - recorded per build, the run goes on
        return name, None, 0, f"{type(e).__name__}: {str(e)[:2000]}", time.perf_counter() - t0


def sample(builds: list, limit: int | None, match: str | None, names=None) -> list:
    """The builds named in ``names`` (all without it) that ``match`` finds (all without it),
    then ``limit`` of them spread evenly."""
    if names is not None:
        keep = set(names)
        builds = [b for b in builds if b[0] in keep]
    if match:
        rx = re.compile(match)
        builds = [b for b in builds if rx.search(b[0])]
    if limit is not None and 0 < limit < len(builds):
        step = len(builds) / limit
        builds = [builds[int(i * step)] for i in range(limit)]
    return builds


def run(builds: list, jobs: int, progress=None) -> dict:
    progress = progress or sys.stderr
    results, errors, sizes = {}, {}, {}
    t0 = time.perf_counter()
    ctx = get_context("spawn")
    with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=ctx) as ex:
        futs = [ex.submit(_work, b) for b in builds]
        for k, f in enumerate(as_completed(futs), 1):
            name, sha, size, err, dt = f.result()
            if err:
                errors[name] = err
            else:
                results[name], sizes[name] = sha, size
            print(f"[{k}/{len(builds)}] {dt:5.1f}s {'ERROR ' if err else ''}{name}",
                  file=progress, flush=True)
    fams = {"cutile": 0, "cuda": 0}
    for name in results:
        fams[name.split(".")[0]] += 1
    return {"schema": SCHEMA, "arch": ARCH, "commit": _commit(),
            "counts": {"builds": len(builds), "fingerprinted": len(results),
                       "errors": len(errors), **fams},
            "seconds": round(time.perf_counter() - t0, 1),
            "builds": dict(sorted(results.items())), "text_bytes": dict(sorted(sizes.items())),
            "errors": dict(sorted(errors.items()))}


def _commit() -> str | None:
    """The tree's commit (``spec.install.git_state``), "+dirty" appended where it is dirty."""
    from spec.install import git_state
    g = git_state()
    return None if g["commit"] is None else g["commit"] + ("+dirty" if g["dirty"] else "")


# ------------------------------------------------------------------------------------------------
# comparing
# ------------------------------------------------------------------------------------------------
def _load(path: str) -> dict:
    d = json.loads(Path(path).read_text())
    if not isinstance(d, dict) or not isinstance(d.get("builds"), dict):
        raise ValueError(f"{path}: not a fingerprint file (no 'builds' table)")
    return d


def compare(a_path: str, b_path: str, out=None) -> int:
    """Print the builds whose ``.text`` differs or that only one file fingerprinted; 1 if any,
    0 if none, 2 when a file cannot be read."""
    out = out or sys.stdout
    try:
        a, b = _load(a_path), _load(b_path)
    except (OSError, ValueError) as e:
        print(f"bad input: {e}", file=out)
        return 2
    fa, fb = a["builds"], b["builds"]
    differ = sorted(n for n in fa.keys() & fb.keys() if fa[n] != fb[n])
    only_a, only_b = sorted(fa.keys() - fb.keys()), sorted(fb.keys() - fa.keys())
    for n in differ:
        print(f"differs: {n}", file=out)
    for n in only_a:
        print(f"only in {a_path}: {n}", file=out)
    for n in only_b:
        print(f"only in {b_path}: {n}", file=out)
    for path, d in ((a_path, a), (b_path, b)):
        if d.get("errors"):
            print(f"{path}: {len(d['errors'])} builds failed to compile", file=out)
    same = len(fa.keys() & fb.keys()) - len(differ)
    print(f"{same} identical, {len(differ)} differ, {len(only_a)} only in {a_path}, "
          f"{len(only_b)} only in {b_path}", file=out)
    return 1 if differ or only_a or only_b else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.tuning.fingerprint",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="the JSON file to write")
    ap.add_argument("--family", choices=("cutile", "cuda", "both"), default="both")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--limit", type=int, help="K builds spread evenly over the enumeration")
    ap.add_argument("--match", help="only the builds whose name this regex finds")
    ap.add_argument("--names", help="a file of build names, one a line (as --list prints)")
    ap.add_argument("--cuda-all", action="store_true", help="all_instances() too")
    ap.add_argument("--source", help="fingerprint the checkout at this directory")
    ap.add_argument("--list", action="store_true", help="print the build names and stop")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"))
    args = ap.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.source:
        return _in_checkout(args.source, argv if argv is not None else sys.argv[1:])
    if not args.out and not args.list:
        ap.error("--out FILE (or --list, or --compare A B)")
    names = Path(args.names).read_text().splitlines() if args.names else None
    builds = sample(enumerate_builds(args.family, args.cuda_all), args.limit, args.match, names)
    if args.list:
        for name, _ in builds:
            print(name)
        print(f"{len(builds)} builds", file=sys.stderr)
        return 0
    result = run(builds, args.jobs)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    c = result["counts"]
    print(f"{c['fingerprinted']} of {c['builds']} builds fingerprinted ({c['cutile']} cuTile, "
          f"{c['cuda']} CUDA), {c['errors']} errors, {result['seconds']} s -> {args.out}")
    for name, err in result["errors"].items():
        print(f"ERROR {name}: {err.splitlines()[0] if err else ''}")
    return 1 if c["errors"] else 0


def _in_checkout(source: str, argv: list[str]) -> int:
    """Run this file as a script inside ``source``, so that its packages are imported."""
    root = Path(source).resolve()
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--source":
            skip = True
            continue
        if a.startswith("--source="):
            continue
        rest.append(a)
    rest = [str(Path(a).resolve()) if a.endswith((".json", ".txt")) else a for a in rest]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(root)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return subprocess.run([sys.executable, str(Path(__file__).resolve()), *rest], cwd=root,
                          env=env).returncode


if __name__ == "__main__":
    if __package__ in (None, ""):          # run as a script (--source): the checkout's packages
        sys.path.insert(0, os.getcwd())
    sys.exit(main())

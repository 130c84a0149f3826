"""What each build does per K/V step, read from its compiled code, with two cuTile toolchains.

    python -m kernels.paper_builds.toolchains --out DIR       # compile, disassemble, write the CSV
    python -m kernels.paper_builds.toolchains --dry-run       # the plan; checks nothing is missing
    python -m kernels.paper_builds.toolchains --sass LISTING  # loops of one ``nvdisasm -c`` listing
    python -m kernels.paper_builds.toolchains --table CSV     # the per-build table of a builds.csv

A build's speed per K/V step decides how far its concurrent CTAs drift apart, so how often a K/V
tile is still in L2 when the next CTA asks for it. The step cost is the code of the K/V loops: its
MMAs, and its local-memory traffic when registers spill (LDL/STL go through L1 and L2 beside K
and V). The same source compiles differently with different cuda-tile releases, so each build is
compiled with the toolchain the paper's authors likely used (cuda-tile 1.0.x with tileiras
13.1.80: the releases before their counts were committed) and with the project's (the cuda-tile
of the running interpreter), for sm_121 (GB10) and sm_90 (H100). Builds: the study's eight GB10
cuTile builds (``study_builds``: Static on 48 SMs and Tile-based X = 2, linear and sawtooth,
causal and not) and, when a copy of the authors' repository is given, their four kernel files in
both causal modes (``kernels.paper_builds.sources``).

Per cubin: registers, stack, shared memory, CTA size and CTAs per SM under the target's published
limits; per loop of its SASS (``kernels.paper_builds.sass_loops``): length, MMAs, LDL/STL, global
and TMA loads. One CSV row per build x toolchain x target x loop (``builds.csv.gz``), and
``manifest.json`` with the versions, the authors' commit and the sha256 of every cubin.

The old toolchain lives in its own virtualenv (``--old-venv``, default ``.venv-ct10`` in the
checkout):
``python -m kernels.paper_builds.toolchains --setup VENV`` prints the commands that create it.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from kernels.paper_builds import sass_loops
from kernels.paper_builds import sources as authors_sources
from kernels.paper_builds.compile_worker import Build
from kernels.paper_builds.cpu_driver import build_stub
from kernels.paper_builds.venv import (
    OLD_VENV,
    SetupError,
    check_venv,
    find_tool,
    setup_commands,
    tileiras_targets,
    venv_tool,
    venv_versions,
)
from spec import Backend, CtaSchedule, Problem, ScanOrder, Tiles, Variant, get_arch
from spec.family import published_limits
from spec.install import git_state
from spec.records import open_text

TARGETS = {"sm_121": "gb10", "sm_90": "h100"}
GB10_S = 131072                # the paper's sequence length
STUDY_OCCUPANCY = 1            # the authors' builds: one CTA per SM (experiments.registry.studies)
FIELDS = ("build", "source", "causal", "order", "schedule", "toolchain", "target", "status",
          "regs", "stack", "shared", "threads", "ctas_per_sm", "loop", "role", "depth",
          "loop_start", "loop_end", "loop_len", "mma", "ldl", "stl", "ldg", "ldgsts", "utmaldg",
          "fsel", "mufu", "mask_code", "bulk",
          "kernel_instructions", "kernel_mma", "kernel_ldl", "kernel_stl", "note")


def study_builds() -> list[Build]:
    """The sawtooth study's eight GB10 cuTile builds, as
    ``experiments.registry.plans.sawtooth_plan`` plans them (B = 8, H = 1, S = 128K, D = 64, fp16,
    64x64 tiles, occupancy 1; Static on every SM and Tile-based X = 2); a CPU test checks the two
    agree."""
    from kernels.build.signatures import CompileCase
    gb10 = get_arch("gb10")
    out = []
    for causal in (False, True):
        prob = Problem(B=8, H=1, S_q=GB10_S, D=64, causal=causal)
        for sched, sname in ((CtaSchedule.persistent(gb10.num_sms), "static"),
                             (CtaSchedule.tile_x(2), "tile2")):
            for order in (ScanOrder.linear(), ScanOrder.sawtooth()):
                v = Variant(Backend.CUTILE, order, sched, Tiles(64, 64), STUDY_OCCUPANCY)
                c = CompileCase.of(v, prob)
                q = (c.B, c.H, c.S_q, c.D)
                kv = (c.B, c.H_kv, c.S_kv, c.D)
                args = (("array", q, "f16"), ("array", kv, "f16"), ("array", kv, "f16"),
                        ("array", q, "f16"), ("array", (1, 1, 4), "i32"),
                        ("f32", 0.125)) + tuple(("const", x) for x in c.constants())
                mode = "causal" if causal else "noncausal"
                out.append(Build(f"{v.id(prob)}.{mode}", "study", causal, order.label, sname,
                                 "kernels.device.fmha", "fmha_fwd", STUDY_OCCUPANCY, args))
    return out


def compile_all(venv: Path, builds: list[Build], targets: list[str], workdir: Path,
                stub_dir: Path, repo: Path) -> dict:
    """Compile every build for every target with the venv's cuda-tile; {(build, target): result}."""
    jobs, keys = [], []
    for b in builds:
        for t in targets:
            jobs.append(b.job(t, workdir / f"{b.id}.{t}.cubin"))
            keys.append((b.id, t))
    jf = workdir / "jobs.json"
    jf.write_text(json.dumps(jobs))
    env = dict(os.environ)
    env.pop("CUDA_HOME", None)
    env.pop("CUDA_PATH", None)
    env["LD_LIBRARY_PATH"] = f"{stub_dir}:" + env.get("LD_LIBRARY_PATH", "")
    env["PATH"] = f"{venv_tool(venv, 'tileiras').parent}:{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(repo)
    env["CUDA_TILE_TEMP_DIR"] = str(workdir)
    proc = subprocess.run([str(venv / "bin" / "python"), "-m",
                           "kernels.paper_builds.compile_worker", str(jf)],
                          check=False, capture_output=True, text=True, env=env, cwd=repo)
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    if len(lines) != len(jobs):
        tail = " ".join(proc.stderr.split()[-40:])
        raise SetupError(f"the compile worker in {venv} stopped after {len(lines)} of {len(jobs)} "
                         f"jobs: {tail}")
    return dict(zip(keys, lines))


def analyse(cubin: bytes, target: str, tools_venvs: tuple[Path, ...] = ()
            ) -> tuple[dict, list[sass_loops.Loop], sass_loops.Function]:
    """Resources (cuobjdump), CTAs per SM under the target's published limits, and the loops of
    the SASS (nvdisasm) of one cubin."""
    from kernels.build.resources import PTXAS_RESOURCES, required_threads
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "k.cubin"
        p.write_bytes(cubin)
        res = subprocess.run([str(find_tool("cuobjdump", tools_venvs)), "--dump-resource-usage",
                              str(p)], capture_output=True, text=True, check=True).stdout
        sass = subprocess.run([str(find_tool("nvdisasm", tools_venvs)), "-c", str(p)],
                              capture_output=True, text=True, check=True).stdout
    regs, stack, shared, _ = (int(g) for g in PTXAS_RESOURCES.search(res).groups())
    threads = required_threads(cubin)
    limits = published_limits(get_arch(TARGETS[target]))
    per_sm = limits.ctas_per_sm(threads, regs, shared - limits.reserved_smem_per_block)
    func = sass_loops.kernel(sass)
    return ({"regs": regs, "stack": stack, "shared": shared, "threads": threads,
             "ctas_per_sm": per_sm}, func.loops(), func)


def loop_role(lp: sass_loops.Loop, loops: list[sass_loops.Loop]) -> str:
    """step-mma: a per-step MMA loop; step-load: a loop issuing K/V loads and no MMA, holding no
    other loading loop (a producer warp's per-step loop); outer: holds a step loop; wait: the
    rest (barrier spins)."""
    loads = sum(lp.count(op) for op in sass_loops.LOAD_OPS)
    if lp.innermost_mma:
        return "step-mma"
    if any(lp.contains(o) and (o.mma or sum(o.count(x) for x in sass_loops.LOAD_OPS))
           for o in loops):
        return "outer"
    if loads and not lp.mma:
        return "step-load"
    return "wait"


MASK_FSEL = 16
"""FSELs that mark a step loop as holding the causal mask's code: the mask selects -inf per
score element, 32 or 64 FSEL per thread for a 64x64 tile in every build here; loops without the
mask have none."""


def mask_code(lp: sass_loops.Loop) -> bool:
    return lp.mma > 0 and lp.count("FSEL") >= MASK_FSEL


def bulk_loops(loops: list[sass_loops.Loop]) -> list[sass_loops.Loop]:
    """The step loops that run the bulk of a work item's K/V steps. A causal kernel either
    splits its scan into an unmasked loop and a loop for the masked (diagonal) tiles, the
    compiler's loop split or the project's explicit loops: then the bulk is the loops without
    mask code; or it keeps the mask under a per-step branch (the authors' sawtooth kernels):
    then every step loop holds mask code and every one is bulk."""
    steps = [lp for lp in loops if lp.innermost_mma]
    plain = [lp for lp in steps if not mask_code(lp)]
    return plain or steps


def rows_for(build: Build, toolchain: str, target: str, res: dict | None,
             loops: list, func, status: str, note: str = "") -> list[dict]:
    base = {"build": build.id, "source": build.source, "causal": int(build.causal),
            "order": build.order, "schedule": build.schedule, "toolchain": toolchain,
            "target": target, "status": status, "note": note}
    if res is None:
        return [base]
    k = func.opcode_counts()
    base.update(res, kernel_instructions=len(func.instructions),
                kernel_mma=sum(n for op, n in k.items() if op in sass_loops.MMA_OPS),
                kernel_ldl=k.get("LDL", 0), kernel_stl=k.get("STL", 0))
    bulk = bulk_loops(loops)
    out = []
    for i, lp in enumerate(loops):
        out.append(dict(base, loop=i, role=loop_role(lp, loops), depth=lp.depth,
                        loop_start=f"{lp.start:#x}", loop_end=f"{lp.end:#x}",
                        loop_len=lp.instructions, mma=lp.mma, ldl=lp.count("LDL"),
                        stl=lp.count("STL"), ldg=lp.count("LDG"), ldgsts=lp.count("LDGSTS"),
                        utmaldg=lp.count("UTMALDG"), fsel=lp.count("FSEL"),
                        mufu=lp.count("MUFU"), mask_code=int(mask_code(lp)),
                        bulk=int(lp in bulk)))
    return out


def run(out: Path, old_venv: Path, new_venv: Path, authors: Path | None, targets: list[str],
        repo: Path, command: str = "") -> int:
    if out.exists() and any(out.iterdir()):
        raise SetupError(f"{out} exists and is not empty; pass a new --out directory")
    versions = {"old": check_venv(old_venv, True, fix=True),
                "new": check_venv(new_venv, False, fix=True)}
    builds = study_builds()
    scratch = repo / ".scratch" / "authors-toolchain"      # ignored by git; kept between runs
    scratch.mkdir(parents=True, exist_ok=True)
    authors_commit = None
    if authors is not None:
        abuilds, authors_commit = authors_sources.builds(authors, scratch / "authors")
        builds += abuilds
    else:
        print("authors' builds skipped: no copy of SchrodingerZhu/AttnFMHA (pass --authors DIR)")
    rows, cubins = [], {}
    with tempfile.TemporaryDirectory(dir=scratch) as d:
        stub = build_stub(Path(d) / "stub")
        for side, venv in (("old", old_venv), ("new", new_venv)):
            v = versions[side]
            tc = f"cuda-tile {v['cuda-tile']} / tileiras {v.get('nvidia-cuda-tileiras', '?')}"
            ok_targets = tileiras_targets(venv, TARGETS)
            work = Path(d) / side
            work.mkdir()
            todo = [t for t in targets if t in ok_targets]
            results = compile_all(venv, builds, todo, work, stub, repo) if todo else {}
            for b in builds:
                for t in targets:
                    if t not in ok_targets:
                        rows += rows_for(b, tc, t, None, [], None, "unsupported-target",
                                         f"tileiras {v.get('nvidia-cuda-tileiras')} has no {t}")
                        continue
                    r = results[b.id, t]
                    if not r["ok"]:
                        rows += rows_for(b, tc, t, None, [], None, "compile-error", r["error"])
                        continue
                    data = Path(r["out"]).read_bytes()
                    cubins[f"{b.id}|{tc}|{t}"] = hashlib.sha256(data).hexdigest()
                    res, loops, func = analyse(data, t, (old_venv,))
                    rows += rows_for(b, tc, t, res, loops, func, "ok")
    out.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(out / "builds.csv.gz", "wb", mtime=0) as gz, \
            io.TextIOWrapper(gz, newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    git = git_state()
    manifest = {"command": command or f"python -m kernels.paper_builds.toolchains --out {out}",
                "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "git": git, "mode": "compile (no GPU)", "toolchains": versions,
                "disassembler": venv_versions(old_venv).get("nvidia-cuda-nvdisasm"),
                "authors_repository": "SchrodingerZhu/AttnFMHA" if authors else None,
                "authors_commit": authors_commit, "targets": targets,
                "cubin_sha256": cubins}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    print(summary(rows))
    print(f"wrote {out}/builds.csv.gz ({len(rows)} rows) and manifest.json")
    return 0


def summary(rows: list[dict]) -> str:
    """Per build, toolchain and target: resources and the per-step MMA loops' counts."""
    lines = [(f"{'build':48} {'toolchain':30} {'target':6} regs stack ctas  step loops "
             "(len mma ldl stl)")]
    seen: dict = {}
    for r in rows:
        key = (r["build"], r["toolchain"], r["target"])
        seen.setdefault(key, []).append(r)
    for (b, tc, t), rs in seen.items():
        r0 = rs[0]
        if r0["status"] != "ok":
            lines.append(f"{b:48} {tc:30} {t:6} {r0['status']}: {r0['note'][:60]}")
            continue
        steps = "; ".join(f"{r['loop_len']} {r['mma']} {r['ldl']} {r['stl']}" for r in rs
                          if r["role"] == "step-mma")
        lines.append(f"{b:48} {tc:30} {t:6} {r0['regs']:4} {r0['stack']:5} "
                     f"{r0['ctas_per_sm']:4}  {steps}")
    return "\n".join(lines)


def step_table(csv_path: Path) -> str:
    """The per-build table of a committed ``builds.csv`` (markdown): per build, toolchain and
    target the registers, stack and CTAs per SM; then the bulk K/V step loops (``bulk``) and the
    other step loops (the masked diagonal tiles), each as MMAs, LDL+STL and body length per
    iteration, loops separated by ``/``."""
    with open_text(csv_path) as f:
        rows = list(csv.DictReader(f))
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["build"], r["toolchain"], r["target"]), []).append(r)

    def cell(rs, key):
        return " / ".join(key(r) for r in rs) or "-"

    out = ["| build | cuda-tile / tileiras | target | regs | stack B | CTAs/SM | bulk step: MMA "
           "| bulk step: LDL+STL | bulk step: instructions | diagonal step: LDL+STL "
           "| diagonal step: instructions |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (b, tc, t), rs in groups.items():
        r0 = rs[0]
        if r0["status"] != "ok":
            continue
        steps = [r for r in rs if r["role"] == "step-mma"]
        bulk = [r for r in steps if r["bulk"] == "1"]
        diag = [r for r in steps if r["bulk"] != "1"]
        out.append(f"| {b} | {tc.replace('cuda-tile ', '').replace(' / tileiras ', ' / ')} "
                   f"| {t} | {r0['regs']} | {r0['stack']} | {r0['ctas_per_sm']} "
                   f"| {cell(bulk, lambda r: r['mma'])} "
                   f"| {cell(bulk, lambda r: r['ldl'] + '+' + r['stl'])} "
                   f"| {cell(bulk, lambda r: r['loop_len'])} "
                   f"| {cell(diag, lambda r: r['ldl'] + '+' + r['stl'])} "
                   f"| {cell(diag, lambda r: r['loop_len'])} |")
    return "\n".join(out)


def sass_report(path: Path) -> str:
    with open_text(path) as f:
        func = sass_loops.kernel(f.read())
    loops = func.loops()
    out = [f"{func.name}: {len(func.instructions)} instructions, {len(loops)} loops",
           "loop start    end      depth role      len  mma  ldl  stl  ldg ldgsts utmaldg"]
    for i, lp in enumerate(loops):
        out.append(f"{i:4} {lp.start:#07x} {lp.end:#07x} {lp.depth:5} {loop_role(lp, loops):9} "
                   f"{lp.instructions:4} {lp.mma:4} {lp.count('LDL'):4} {lp.count('STL'):4} "
                   f"{lp.count('LDG'):4} {lp.count('LDGSTS'):6} {lp.count('UTMALDG'):7}")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernels.paper_builds.toolchains",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="directory for builds.csv.gz and manifest.json")
    ap.add_argument("--old-venv", type=Path, default=OLD_VENV,
                    help="virtualenv with cuda-tile 1.0.x and tileiras 13.1.80")
    ap.add_argument("--new-venv", type=Path, default=Path(sys.prefix),
                    help="virtualenv with the project's cuda-tile (default: this interpreter's)")
    ap.add_argument("--authors", type=Path, default=None,
                    help="a copy of SchrodingerZhu/AttnFMHA (work tree or git directory)")
    ap.add_argument("--targets", default="sm_121,sm_90")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, compile nothing")
    ap.add_argument("--sass", type=Path, help="print the loops of one `nvdisasm -c` listing")
    ap.add_argument("--table", type=Path, metavar="CSV",
                    help="print the per-build table (markdown) of a builds.csv")
    ap.add_argument("--setup", type=Path, metavar="VENV",
                    help="print the commands that create the old toolchain's venv")
    a = ap.parse_args(argv)
    repo = Path(__file__).resolve().parents[2]
    try:
        if a.setup:
            print("\n".join(setup_commands(a.setup)))
            return 0
        if a.table:
            if not a.table.is_file():
                raise SetupError(f"{a.table}: no such file; "
                                 "pass a builds.csv.gz this command wrote")
            print(step_table(a.table))
            return 0
        if a.sass:
            if not a.sass.is_file():
                raise SetupError(f"{a.sass}: no such file; pass the output of `nvdisasm -c`")
            print(sass_report(a.sass))
            return 0
        targets = [t.strip() for t in a.targets.split(",") if t.strip()]
        bad = [t for t in targets if t not in TARGETS]
        if bad:
            raise SetupError(f"unknown target {bad[0]}; choose from {', '.join(TARGETS)}")
        if a.dry_run:
            builds = study_builds()
            n_auth = 8 if a.authors else 0
            print(f"{len(builds)} study builds + {n_auth} authors' builds x 2 toolchains "
                  f"({a.old_venv}, {a.new_venv}) x targets {', '.join(targets)}")
            for b in builds:
                print(f"  {b.id}  occupancy {b.occupancy}")
            for side, venv in (("old", a.old_venv), ("new", a.new_venv)):
                try:
                    v = check_venv(venv, side == "old")
                    print(f"{side} toolchain {venv}: cuda-tile {v['cuda-tile']}, tileiras "
                          f"{v.get('nvidia-cuda-tileiras')}, targets "
                          f"{', '.join(sorted(tileiras_targets(venv, TARGETS)))}")
                except SetupError as e:
                    print(f"{side} toolchain missing: {e}")
            return 0
        if a.out is None:
            raise SetupError("pass --out DIR (a new directory) or --dry-run")
        return run(a.out, a.old_venv, a.new_venv, a.authors, targets, repo,
                   "python -m kernels.paper_builds.toolchains "
                   + " ".join(sys.argv[1:] if argv is None else argv))
    except (SetupError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

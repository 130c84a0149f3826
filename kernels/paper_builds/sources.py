"""The paper's published cuTile kernels (SchrodingerZhu/AttnFMHA) as builds to compile.

Nothing of that repository is kept here: a copy fetched at run time (a work tree, or a git
directory read at its HEAD) is read, and each kernel file's ``@ct.kernel`` function with the
module-level constants and the ``cuda.tile`` / numpy / math imports it needs is written to a
scratch file (their launch wrappers import torch and their benchmark helpers, which a compile
does not need). The arguments are those of their launch wrappers for the paper's GB10 counts:
B = 8, H = 1, S = 128K, D = 64, fp16, 64x64 tiles; the Static kernels take NUM_VSM = 48 and
SEQ_LEN_Q, the Tile-based ones TILE_X = 2. The occupancy hint is the decorator's.
"""
from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from kernels.paper_builds.compile_worker import Build
from spec.paper import (
    PAPER_B,
    PAPER_BUILDS,
    PAPER_D,
    PAPER_H,
    PAPER_NUM_VSM,
    PAPER_S,
    PAPER_TILE,
    PAPER_TILE_X,
)

S, B, H, D = PAPER_S, PAPER_B, PAPER_H, PAPER_D
TILE, NUM_VSM, TILE_X = PAPER_TILE, PAPER_NUM_VSM, PAPER_TILE_X


def _read(repo: Path, name: str) -> tuple[str, str | None]:
    if (repo / name).is_file():
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"],
                              check=False, capture_output=True, text=True)
        return (repo / name).read_text(), head.stdout.strip() or None
    git = ["git", f"--git-dir={repo}"]
    src = subprocess.run(git + ["show", f"HEAD:{name}"],
                         check=False, capture_output=True, text=True)
    if src.returncode != 0:
        raise FileNotFoundError(f"{repo}: no {name} (expected a copy of SchrodingerZhu/AttnFMHA)")
    head = subprocess.run(git + ["rev-parse", "HEAD"], check=False, capture_output=True, text=True)
    return src.stdout, head.stdout.strip()


def kernel_source(src: str) -> tuple[str, int | None]:
    """The compile-relevant part of one kernel file, and the decorator's occupancy hint."""
    tree = ast.parse(src)
    keep, occupancy, found = [], None, False
    for node in tree.body:
        wanted_import = isinstance(node, ast.Import) and all(
            a.name.split(".")[0] in ("math", "numpy")
            or (a.name.startswith("cuda.tile") and a.name != "cuda.tile_experimental")
            for a in node.names)
        wanted_from = (isinstance(node, ast.ImportFrom) and node.module is not None
                       and node.module.split(".")[0] in ("cuda", "numpy", "math"))
        if wanted_import or wanted_from or isinstance(node, ast.Assign):
            keep.append(node)
        elif isinstance(node, ast.FunctionDef) and any(
                "kernel" in ast.unparse(d) for d in node.decorator_list):
            keep.append(node)
            found = True
            for d in node.decorator_list:
                for kw in getattr(d, "keywords", []):
                    if kw.arg == "occupancy" and isinstance(kw.value, ast.Constant):
                        occupancy = kw.value.value
    if not found:
        raise ValueError("no @ct.kernel function in the file")
    return ast.unparse(ast.Module(body=keep, type_ignores=[])) + "\n", occupancy


def builds(repo: Path, scratch: Path) -> tuple[list, str | None]:
    """(the eight builds: four files x causal / non-causal, the copy's commit). The kernel
    sources go to a directory named after the commit under ``scratch``: the compiler writes the
    source path into the cubin's line table, so a fixed path keeps the cubins' hashes
    reproducible."""
    out, commit = [], None
    arr = ("array", (B, H, S, D), "f16")
    for build in PAPER_BUILDS:
        name, sched, order = f"{build.stem}.py", build.schedule, build.order
        src, commit = _read(repo, name)
        text, occ = kernel_source(src)
        where = scratch / f"attnfmha-{(commit or 'copy')[:12]}"
        where.mkdir(parents=True, exist_ok=True)
        path = where / f"authors_{Path(name).stem}.py"
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        for causal in (False, True):
            common = (arr, arr, arr, arr, ("f32", 0.125), ("i32", 0), ("const", D),
                      ("const", H), ("const", TILE), ("const", TILE), ("const", 1),
                      ("const", causal), ("const", S % TILE == 0))
            tail = ((("const", NUM_VSM), ("i32", S)) if sched == "static"
                    else (("const", TILE_X),))
            out.append(Build(build.id(causal), "authors", causal, order, sched,
                             str(path), "fmha_kernel", occ, common + tail))
    return out, commit

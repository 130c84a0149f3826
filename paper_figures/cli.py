"""``main()`` of every figure module: ``python -m paper_figures.<module> --arch h200 [--run DIR]
[--out DIR]`` draws that one figure (or table) from the same stored runs as ``python -m
paper_figures``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def figure_main(module_name: str, argv=None) -> int:
    from . import render
    from .data import ROOT, find_runs, load_rows
    mod = sys.modules[module_name]
    ap = argparse.ArgumentParser(prog=f"python -m {mod.__spec__.name if mod.__spec__ else ''}",
                                 description=(mod.__doc__ or "").splitlines()[0])
    ap.add_argument("--arch", required=True)
    ap.add_argument("--run", type=Path, action="append", help="run directory (repeatable)")
    ap.add_argument("--out", type=Path, help="output directory (default paper_figures/out/<arch>)")
    a = ap.parse_args(argv)
    runs = a.run or find_runs(a.arch)
    report = render(load_rows(runs), a.arch, a.out or ROOT / "paper_figures" / "out" / a.arch,
                    modules=[mod])
    for r in report:
        print(f"{r['figure']}: " + (", ".join(r["files"]) if "files" in r
                                    else f"skipped ({r['skipped']})"))
    return 0

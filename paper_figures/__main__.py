"""``python -m paper_figures --arch <name> [--run DIR ...] [--out DIR]``: redraw the figures.

Without ``--run`` it reads the committed datasets under ``profiles/<arch>/`` and the latest local
run of each study under ``runs/<arch>/``. It says which figures it skipped and why.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from spec import known_archs

from . import find_runs, load_rows, render

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m paper_figures", description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, help=f"one of {', '.join(known_archs())}")
    ap.add_argument("--run", type=Path, action="append", help="run directory (repeatable)")
    ap.add_argument("--out", type=Path, help="output directory (default paper_figures/out/<arch>)")
    a = ap.parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 150)
    if a.arch not in known_archs():
        print(f"error: unknown arch {a.arch!r}; known: {', '.join(known_archs())}", file=sys.stderr)
        return 2
    runs = a.run or find_runs(a.arch)
    missing = [r for r in runs if not r.is_dir()]
    if missing:
        print(f"error: run directory {missing[0]} does not exist", file=sys.stderr)
        return 2
    out = a.out or ROOT / "paper_figures" / "out" / a.arch
    console.print(f"reading {len(runs)} run(s): " + ", ".join(str(r) for r in runs) if runs
                  else "no stored runs found: drawing the analytic figures only")
    report = render(load_rows(runs), a.arch, out, console)
    drawn = sum("files" in r for r in report)
    console.print(f"{drawn} figure(s) written to {out}, {len(report) - drawn} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())

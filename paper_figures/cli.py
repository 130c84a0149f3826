"""The command line of ``python -m paper_figures`` and of every figure module's ``main()``
(``python -m paper_figures.<module> --arch h200 [--run DIR] [--out DIR]`` draws that one figure or
table from the same runs).

Without ``--run`` the runs are those ``analysis.data.default_runs`` selects for the arch (per
study: committed before local, measured before simulated, latest stamp, default parameters, with
its repeats). Output: ``--out DIR``, or ``paper_figures/out/<arch>/<runs>`` where ``<runs>`` is
``default`` or the name of the one run named (``runs-N`` for N named runs); a new directory each
time, an existing one is refused. Bad input (a run that is absent, empty, binary, truncated or
lacks a column, an output directory that exists) is one line on stderr and exit 2, and so is a
named run that no figure applies to.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from spec import get_arch, known_archs
from spec.arch import UnknownArch

ROOT = Path(__file__).resolve().parents[1]


def default_out(arch: str, runs: list[Path] | None) -> Path:
    tag = "default" if not runs else Path(runs[0]).name if len(runs) == 1 else f"runs-{len(runs)}"
    return ROOT / "paper_figures" / "out" / arch / tag


def run_cli(argv, modules, prog: str = "python -m paper_figures", description: str = "") -> int:
    from rich.console import Console

    from analysis.data import DatasetError, default_runs, load_rows

    from .drawing import render, summary
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--arch", required=True, help=f"one of {', '.join(known_archs())}")
    ap.add_argument("--run", type=Path, action="append",
                    help="run directory (repeatable); default: the runs analysis.data selects")
    ap.add_argument("--source", choices=("measured", "simulated"),
                    help="without --run: select only runs of this source")
    ap.add_argument("--out", type=Path,
                    help="new output directory (default paper_figures/out/<arch>/<runs>)")
    a = ap.parse_args(argv)
    err = lambda s: print(f"error: {s}", file=sys.stderr)  # noqa: E731
    try:
        get_arch(a.arch)
    except UnknownArch as e:
        err(str(e))
        return 2
    console = Console(width=None if sys.stdout.isatty() else 150)
    runs = a.run or [d.path for d in default_runs(a.arch, a.source)]
    out = a.out or default_out(a.arch, a.run)
    try:
        rows = load_rows(runs)
        console.print(f"reading {len(runs)} run(s): " + ", ".join(str(r) for r in runs) if runs
                      else "no stored runs found: drawing the analytic figures only")
        report = render(rows, a.arch, out, modules, console)
    except (DatasetError, FileExistsError) as e:
        err(str(e))
        return 2
    if a.run and not any("files" in r for r in report):
        err(f"no figure applies to the run(s) named ({', '.join(str(r) for r in a.run)}); each "
            f"figure's reason is above. Check --arch and that the run holds the rows a figure "
            f"needs")
        return 2
    console.print(summary(report, out))
    return 0


def figure_main(module_name: str, argv=None) -> int:
    mod = sys.modules[module_name]
    name = mod.__spec__.name if mod.__spec__ else module_name
    return run_cli(argv, modules=[mod], prog=f"python -m {name}",
                   description=(mod.__doc__ or "").splitlines()[0])

"""The command line of ``python -m paper_figures`` and of every figure module's ``main()``
(``python -m paper_figures.<module> --arch h200 [--run DIR] [--out DIR]`` draws that one figure or
table from the same runs).

Without ``--run`` the runs are those ``analysis.data.default_runs`` selects for the arch (per
study: committed before local, measured before simulated, latest stamp, default parameters, with
its repeats). Output: ``--out DIR``, or ``paper_figures/out/<arch>/<runs>`` where ``<runs>`` is
``default`` or the name of the one run named (``runs-N`` for N named runs); a new directory each
time, an existing one is refused. Bad input (a run that is absent, empty, binary, truncated or
lacks a column, a run of another arch than ``--arch``, an output directory that exists, a disk
that fills up while the figures are written) is one line on stderr and exit 2, and so is a named
run that no figure applies to. ``--run`` takes a run directory or its ``manifest.json``.

Output: a line per figure drawn, a line per figure whose study has rows but that could not be
drawn (with the reason), and one line for the figures of studies the runs do not hold
(``--verbose``: a line with the reason for each).
"""
from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path

from spec import get_arch, known_archs
from spec.arch import UnknownArch
from spec.install import output_root


def default_out(arch: str, runs: list[Path] | None, root: Path | None = None) -> Path:
    """``paper_figures/out/<arch>/<runs>`` under the checkout (installed: the working directory),
    numbered ``-2``, ``-3``, ... when taken: the documented commands run twice, and an earlier
    output is never overwritten (``--out`` names one exactly, and refuses one that exists)."""
    tag = "default" if not runs else Path(runs[0]).name if len(runs) == 1 else f"runs-{len(runs)}"
    base = (root or output_root()) / "paper_figures" / "out" / arch
    out, n = base / tag, 1
    while out.exists() and (not out.is_dir() or any(out.iterdir())):
        n += 1
        out = base / f"{tag}-{n}"
    return out


def run_dir(path: Path) -> Path:
    """A run named by its directory or by its ``manifest.json``."""
    path = Path(path)
    return path.parent if path.name == "manifest.json" and not path.is_dir() else path


def arch_mismatch(rows: list[dict], arch: str) -> str | None:
    """One line when a run holds rows of another arch than the one the figures are drawn for."""
    from analysis.data import run_of
    other = {}
    for r in rows:
        if r.get("arch") and r["arch"] != arch:
            other.setdefault(run_of(r), r["arch"])
    if not other:
        return None
    run, theirs = next(iter(other.items()))
    return (f"run {run} holds {theirs} data, not {arch}: pass --arch {theirs}, or --run a run of "
            f"{arch} (figures are titled with the arch they are drawn for)")


def report_lines(report: list[dict], rows: list[dict], verbose: bool) -> list[str]:
    """A line per figure drawn; a line per figure not drawn although its study has rows; one
    line for the figures of studies the rows do not hold (each with its reason if ``verbose``)."""
    from .catalogue import figure_studies
    STUDIES = figure_studies()
    present = {r["study"] for r in rows}
    lines, absent = [], []
    for r in report:
        if "files" in r:
            runs = f" ({', '.join(r['runs'])})" if r.get("runs") else ""
            lines.append(f"  {r['figure']}: {', '.join(r['files'])}{runs}")
        elif verbose or set(STUDIES.get(r["figure"], ())) & present:
            lines.append(f"  {r['figure']}: skipped ({r['skipped']})")
        else:
            absent.append(r["figure"])
    if absent:
        studies = sorted({s for f in absent for s in STUDIES.get(f, ())})
        lines.append(f"  {len(absent)} figures not drawn: the runs read hold no rows of their "
                     f"studies ({', '.join(studies)}); --verbose gives each reason")
    return lines


def run_cli(argv, modules, prog: str = "python -m paper_figures", description: str = "") -> int:
    """The figures of ``modules`` (None: every figure, ``paper_figures.collection.FIGURES``).
    The figure modules and the drawing code (matplotlib, the analysis models) are imported only
    once the arguments, the output directory and the runs' rows have been checked: ``--help``
    and bad input answer in well under a second."""
    from rich.console import Console

    from analysis.data import DatasetError, default_runs, load_rows, output_problem
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--arch", required=True, help=f"one of {', '.join(known_archs())}")
    ap.add_argument("--run", type=Path, action="append",
                    help="run directory (repeatable); default: the runs analysis.data selects")
    ap.add_argument("--source", choices=("measured", "simulated"),
                    help="without --run: select only runs of this source")
    ap.add_argument("--out", type=Path,
                    help="new output directory (default paper_figures/out/<arch>/<runs>, numbered "
                         "-2, -3, ... when taken)")
    ap.add_argument("--verbose", "-v", action="store_true",
                    help="a line for every figure not drawn, with the reason")
    a = ap.parse_args(argv)
    err = lambda s: print(f"error: {s}", file=sys.stderr)  # noqa: E731
    try:
        get_arch(a.arch)
    except UnknownArch as e:
        err(str(e))
        return 2
    console = Console(width=None if sys.stdout.isatty() else 150)
    named = [run_dir(r) for r in a.run] if a.run else None
    runs = named or [d.path for d in default_runs(a.arch, a.source)]
    out = a.out or default_out(a.arch, named)
    problem = output_problem(out)
    if problem:                                       # before any run is read or line printed
        err(problem)
        return 2
    try:
        rows = load_rows(runs)
        wrong = arch_mismatch(rows, a.arch)
        if wrong:
            err(wrong)
            return 2
        console.print(f"reading {len(runs)} run(s): " + ", ".join(str(r) for r in runs) if runs
                      else "no stored runs found: drawing the analytic figures only")
        from .drawing import render
        if modules is None:
            from .collection import FIGURES as modules
        report = render(rows, a.arch, out, modules)
    except (DatasetError, FileExistsError) as e:
        err(str(e))
        return 2
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        err(f"no space left on the device while writing {e.filename or out}; nothing was kept "
            f"there: free some space or pass --out on another disk")
        return 2
    for line in report_lines(report, rows, a.verbose):
        console.print(line, highlight=False, soft_wrap=True)
    if named and not any("files" in r for r in report):
        err(f"no figure applies to the run(s) named ({', '.join(str(r) for r in named)}); "
            f"--verbose gives each figure's reason. Check that the run holds the rows a figure "
            f"needs")
        return 2
    from .drawing import summary
    console.print(summary(report, out))
    return 0


def figure_main(module_name: str, argv=None) -> int:
    mod = sys.modules[module_name]
    name = mod.__spec__.name if mod.__spec__ else module_name
    return run_cli(argv, modules=[mod], prog=f"python -m {name}",
                   description=(mod.__doc__ or "").splitlines()[0])

"""The figure modules themselves (imported: matplotlib and the analysis layer come with them)
and the render entry points over them (``paper_figures`` re-exports these lazily)."""
from __future__ import annotations

import importlib
from pathlib import Path

from analysis.data import load_rows

from .catalogue import FIGURE_MODULES, figure_studies
from .drawing import render as _draw
from .drawing import summary

FIGURES = tuple(importlib.import_module(f".{m}", __package__) for m in FIGURE_MODULES)
STUDIES = figure_studies()
"""``{figure id: the studies it reads}``, as the figure modules declare them."""


def render(rows: list[dict], arch: str, out_dir: Path, console=None, modules=None,
           each: bool = True) -> list[dict]:
    """Draw every figure (or ``modules``) into the new directory ``out_dir``
    (``drawing.render``); returns one record per figure."""
    return _draw(rows, arch, out_dir, modules or FIGURES, console, each)


def render_run(run_dir: Path, arch: str, out_dir: Path, console=None) -> list[dict]:
    """The figures of one run (``experiments.run`` after a study): one summary line on
    ``console`` instead of a line per figure."""
    report = render(load_rows([run_dir]), arch, out_dir, console, each=False)
    if console is not None:
        console.print(summary(report, out_dir))
    return report

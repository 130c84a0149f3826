"""Figures and tables of the study, redrawn from stored data (tidy CSV rows), no GPU needed.

Each figure is one module with ``FIGURE`` (its id), ``STUDIES`` (the studies whose rows it reads:
the one declaration of that link, which ``experiments``' study registry, its dry-run estimate and
its skip messages read through ``paper_figures.catalogue``), ``load(rows)`` (raises ``Skip`` with
the reason when the data is not there), ``plot(data, arch)`` (a matplotlib Figure) and ``main()``
(that one figure from the command line). A table module also has ``table(data, arch)`` -> (columns,
rows): ``render`` writes it as ``<id>.csv`` and ``<id>.md`` beside the drawn PNG/PDF. ``render``
draws every figure the rows allow and reports the others as skipped, with the reason.

Which runs: ``analysis.data`` selects them (the rule in its docstring; the findings report
uses the same one) or the user names them. Each figure states the run(s) it drew in a line at its
foot, and the output directory holds
``figures.json``: per figure its files and runs, or why it was not drawn. An output directory is
new for every render: it is filled beside its final name and renamed into place, and an existing
one (unless empty) is refused, so old and new figures never mix.
"""
from __future__ import annotations

import importlib

from .catalogue import FIGURE_MODULES, figure_studies, figures_of

_LAZY = {"FIGURES": ".collection", "STUDIES": ".collection", "render": ".collection",
         "render_run": ".collection", "runs_drawn": ".drawing", "summary": ".drawing",
         "write_table": ".drawing", "Skip": ".data", "DatasetError": "analysis.data",
         "default_runs": "analysis.data", "load_rows": "analysis.data"}


def __getattr__(name: str):
    """The figures and the drawing functions, imported on first use: the catalogue above is
    all that plan-only commands need, and the figure modules bring matplotlib."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["FIGURES", "FIGURE_MODULES", "STUDIES", "DatasetError", "Skip", "default_runs",
           "figure_studies", "figures_of", "load_rows", "render", "render_run", "runs_drawn",
           "summary", "write_table"]

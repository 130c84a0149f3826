"""Figures and tables of the study, redrawn from stored data (tidy CSV rows), no GPU needed.

Each figure is one module with ``FIGURE`` (its id), ``load(rows)`` (raises ``Skip`` with the reason
when the data is not there), ``plot(data, arch)`` (a matplotlib Figure) and ``main()`` (that one
figure from the command line). A table module also has ``table(data, arch)`` -> (columns, rows):
``render`` writes it as ``<id>.csv`` and ``<id>.md`` beside the drawn PNG/PDF. ``render`` draws
every figure the rows allow and reports the others as skipped, with the reason.

Which runs: ``analysis.data`` selects them (the rule in its docstring; the findings report
uses the same one) or the user names them. Each figure states the run(s) it drew in a line at its
foot (``STUDIES``: the studies each figure reads), and the output directory holds
``figures.json``: per figure its files and runs, or why it was not drawn. An output directory is
new for every render: it is filled beside its final name and renamed into place, and an existing
one (unless empty) is refused, so old and new figures never mix.
"""
from __future__ import annotations

from pathlib import Path

from analysis.data import DatasetError, default_runs, load_rows

from . import (
    drift,
    f01_l1l2_short,
    f02_l1l2_long,
    f03_traffic_noncausal,
    f04_traffic_causal,
    f05_divergence,
    f06_active_sms,
    f07_access_order,
    f08_cuda_batch,
    f08b_cuda_tflops,
    f08c_cuda_time,
    f09_cutile_noncausal,
    f09b_cutile_tflops,
    f10_cutile_causal,
    f10b_cutile_causal_tflops,
    ladder,
    longseq,
    misscost,
    misscost_regimes,
    repeats,
    reuse,
    scaling,
    t1_l1l2_table,
    t2_model_error,
)
from .data import Skip
from .drawing import STUDIES, runs_drawn, summary, write_table
from .drawing import render as _draw

FIGURES = (f01_l1l2_short, f02_l1l2_long, t1_l1l2_table, f03_traffic_noncausal,
           f04_traffic_causal, t2_model_error, f05_divergence, f06_active_sms, f07_access_order,
           f08_cuda_batch, f08b_cuda_tflops, f08c_cuda_time, f09_cutile_noncausal,
           f09b_cutile_tflops, f10_cutile_causal, f10b_cutile_causal_tflops, repeats, ladder,
           scaling, longseq, drift, reuse, misscost, misscost_regimes)



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


__all__ = ["FIGURES", "STUDIES", "DatasetError", "Skip", "default_runs", "load_rows", "render",
           "render_run", "runs_drawn", "summary", "write_table"]

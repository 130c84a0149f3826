"""Figures and tables of the study, redrawn from stored data (tidy CSV rows), no GPU needed.

Each figure is one module with ``FIGURE`` (its id), ``load(rows)`` (raises ``Skip`` with the reason
when the data is not there), ``plot(data, arch)`` (a matplotlib Figure) and ``main()`` (that one
figure from the command line). A table module also has ``table(data, arch)`` -> (columns, rows):
``render`` writes it as ``<id>.csv`` and ``<id>.md`` beside the drawn PNG/PDF. ``render`` draws
every figure the rows allow and reports the others as skipped, with the reason.
"""
from __future__ import annotations

import csv
from pathlib import Path

from . import (drift, f01_l1l2_short, f02_l1l2_long, f03_traffic_noncausal, f04_traffic_causal,
               f05_divergence, f06_active_sms, f07_access_order, f08_cuda_batch,
               f08b_cuda_tflops, f08c_cuda_time, f09_cutile_noncausal, f09b_cutile_tflops,
               f10_cutile_causal, f10b_cutile_causal_tflops, ladder, longseq, repeats, reuse,
               scaling, t1_l1l2_table, t2_model_error)
from .data import Skip, find_runs, load_rows

FIGURES = (f01_l1l2_short, f02_l1l2_long, t1_l1l2_table, f03_traffic_noncausal,
           f04_traffic_causal, t2_model_error, f05_divergence, f06_active_sms, f07_access_order,
           f08_cuda_batch, f08b_cuda_tflops, f08c_cuda_time, f09_cutile_noncausal,
           f09b_cutile_tflops, f10_cutile_causal, f10b_cutile_causal_tflops, repeats, ladder,
           scaling, longseq, drift, reuse)


def write_table(columns: list[str], rows: list[list], stem: Path) -> list[str]:
    """``<stem>.csv`` and a print-friendly ``<stem>.md``; returns the file names."""
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        w.writerows(rows)
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(str(c)), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    fmt = lambda r: "| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    md = [fmt([str(c) for c in columns]), "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"]
    md += [fmt(r) for r in cells]
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    return [stem.with_suffix(".csv").name, stem.with_suffix(".md").name]


def render(rows: list[dict], arch: str, out_dir: Path, console=None, modules=None) -> list[dict]:
    """Draw every figure (or ``modules``) into ``out_dir`` as PNG and PDF, tables also as CSV and
    markdown; returns one record per figure."""
    import matplotlib.pyplot as plt
    out_dir.mkdir(parents=True, exist_ok=True)
    report = []
    for mod in modules or FIGURES:
        try:
            data = mod.load(rows)
            fig = mod.plot(data, arch)
        except Skip as why:
            report.append({"figure": mod.FIGURE, "skipped": str(why)})
            if console is not None:
                console.print(f"  {mod.FIGURE}: skipped ({why})")
            continue
        paths = []
        for ext in ("png", "pdf"):
            p = out_dir / f"{mod.FIGURE}.{ext}"
            fig.savefig(p, dpi=150)
            paths.append(p.name)
        plt.close(fig)
        if hasattr(mod, "table"):
            paths += write_table(*mod.table(data, arch), out_dir / mod.FIGURE)
        report.append({"figure": mod.FIGURE, "files": paths})
        if console is not None:
            console.print(f"  {mod.FIGURE}: {', '.join(paths)}")
    return report


def render_run(run_dir: Path, arch: str, out_dir: Path, console=None) -> list[dict]:
    return render(load_rows([run_dir]), arch, out_dir, console)


__all__ = ["FIGURES", "Skip", "find_runs", "load_rows", "render", "render_run", "write_table"]

"""Figures and tables of the study, redrawn from stored data (tidy CSV rows), no GPU needed.

Each figure is one module with ``FIGURE`` (its id), ``load(rows)`` (raises ``Skip`` with the reason
when the data is not there) and ``plot(data, arch)``. ``render`` draws every figure the rows allow
and reports the others as skipped, with the reason.
"""
from __future__ import annotations

from pathlib import Path

from . import f07_access_order, f08_cuda_batch, f09_cutile_noncausal, f10_cutile_causal
from .data import Skip, find_runs, load_rows

FIGURES = (f07_access_order, f08_cuda_batch, f09_cutile_noncausal, f10_cutile_causal)


def render(rows: list[dict], arch: str, out_dir: Path, console=None) -> list[dict]:
    """Draw every figure into ``out_dir`` as PNG and PDF; returns one record per figure."""
    import matplotlib.pyplot as plt
    out_dir.mkdir(parents=True, exist_ok=True)
    report = []
    for mod in FIGURES:
        try:
            fig = mod.plot(mod.load(rows), arch)
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
        report.append({"figure": mod.FIGURE, "files": paths})
        if console is not None:
            console.print(f"  {mod.FIGURE}: {', '.join(paths)}")
    return report


def render_run(run_dir: Path, arch: str, out_dir: Path, console=None) -> list[dict]:
    return render(load_rows([run_dir]), arch, out_dir, console)


__all__ = ["FIGURES", "Skip", "find_runs", "load_rows", "render", "render_run"]

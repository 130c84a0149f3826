"""F8a: CUDA kernel L2 misses, linear vs sawtooth, over batch size (80×80 tiles, one persistent
CTA per SM, non-causal). F8b/F8c (GFLOPS, time) need measured timing rows.

Data: one run of the sawtooth study (``python -m experiments.run sawtooth --arch <arch>``); when
several are loaded (a run and its repeats ``<run>-r2``, ``-r3``) it draws the original
only (``data.one_run``: repeats ``<base>-r<k>`` are passed over) and says so in the title; the
run-to-run spread is the ``repeats`` figure."""
from __future__ import annotations

import sys

from spec.records import Metric

from .bars import MISS_LABEL, grouped_bars, miss_bars
from .data import Skip, one_run, select
from .published import paper_panel, with_paper
from .style import gpu_name, seq_label

FIGURE = "F8a"
STUDIES: tuple[str, ...] = ("sawtooth",)
ROWS = {"backend": "cuda"}
"""The rows it draws (``drawing.finish`` titles and notes them alone)."""


def load(rows: list[dict]) -> dict:
    rows, run = one_run(rows, "sawtooth")
    rows = select(rows, study="sawtooth", backend="cuda", metric=Metric.L2_TEX_MISSES)
    if not rows:
        raise Skip("no CUDA rows of the sawtooth study "
                   "(lts__t_sectors_srcunit_tex_lookup_miss.sum)")
    batches = sorted({r["B"] for r in rows})
    series, errors = miss_bars(rows, lambda r: r["B"], batches)
    return {"groups": [f"B={b}" for b in batches], "series": series, "errors": errors,
            "S": rows[0]["S_q"], "run": run,
            "paper": paper_panel("cuda", False, batches, rows=rows)}


def plot(data: dict, arch: str | None = None, columns: int = 2):
    """``columns``: 2 puts the paper's panel beside the run's, 1 below it."""
    return with_paper(lambda ax: grouped_bars(
        data["groups"], data["series"], errors=data.get("errors"), ax=ax,
        ylabel=MISS_LABEL if data.get("errors") else "L2 misses (M sectors)",
        title=f"F8a: CUDA split-Q, S={seq_label(data['S'])}, 80×80 tiles, {gpu_name(arch)}"
              + (f"\n{data['run']['note']}" if data["run"]["note"] else "")), data, columns)


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

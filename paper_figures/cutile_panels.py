"""F9a and F10a share one layout: cuTile L2 misses for Static and Tile-based, linear vs sawtooth.

Data: one run of the sawtooth study (``python -m experiments.run sawtooth --arch <arch>``); of
several loaded runs (the original and its repeats -r2, -r3) only the original is drawn
(``data.one_run``), and the title says so; the ``repeats`` figure shows every run."""
from __future__ import annotations

from analysis.data.published import schedule_kind
from spec.records import Metric

from .bars import MISS_LABEL, grouped_bars, miss_bars
from .data import Skip, one_run, select
from .modules import figure_module
from .published import paper_panel, with_paper
from .style import gpu_name, seq_label

SCHEDULE_NAMES = {"static": "Static (persistent)", "tile": "Tile-based"}


def _schedule_name(label: str) -> str:
    for prefix, name in SCHEDULE_NAMES.items():
        if label.startswith(prefix):
            return f"{name}\n{label}"
    return label


def load_misses(rows: list[dict], causal: bool) -> dict:
    rows, run = one_run(rows, "sawtooth")
    rows = select(rows, study="sawtooth", backend="cutile", causal=causal,
                  metric=Metric.L2_TEX_MISSES)
    if not rows:
        raise Skip(f"no cuTile {'causal' if causal else 'non-causal'} rows of the sawtooth study")
    schedules = sorted({r["schedule"] for r in rows})
    series, errors = miss_bars(rows, lambda r: r["schedule"], schedules)
    return {"groups": [_schedule_name(s) for s in schedules], "series": series,
            "errors": errors, "S": rows[0]["S_q"], "B": rows[0]["B"], "run": run,
            "paper": paper_panel("cutile", causal, [schedule_kind(s) for s in schedules],
                                 rows=rows)}


def plot_misses(data: dict, figure: str, causal: bool, arch: str | None, columns: int = 2):
    mode = "causal" if causal else "non-causal"
    return with_paper(lambda ax: grouped_bars(
        data["groups"], data["series"], errors=data.get("errors"), ax=ax,
        ylabel=MISS_LABEL if data.get("errors") else "L2 misses (M sectors)",
        title=f"{figure}: cuTile {mode}, B={data['B']}, S={seq_label(data['S'])}, "
              f"64×64 tiles, {gpu_name(arch)}"
              + (f"\n{data['run']['note']}" if data["run"]["note"] else "")), data, columns)


def misses_module(name: str, figure: str, causal: bool) -> tuple:
    """``(ROWS, load, plot, main)`` of F9a (``causal`` False) or F10a (True)."""
    return figure_module(name, {"backend": "cutile", "causal": causal},
                         lambda rows: load_misses(rows, causal=causal),
                         lambda data, arch=None, columns=2: plot_misses(data, figure, causal,
                                                                        arch, columns))

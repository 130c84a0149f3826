"""T1: the L1/L2 counters of the l1l2 study at the full SM count (the largest persistent CTA count
measured), at both sequence lengths, with the L1 hit fraction."""
from __future__ import annotations

import sys

from analysis.data.rows import persistent_ctas
from spec.records import Metric

from . import lines
from .data import Skip, mean_by, sources
from .l1l2_panels import l1l2_rows
from .style import gpu_name

FIGURE = "T1"
STUDIES: tuple[str, ...] = ("l1l2",)
COLUMNS = ["S", "CTAs", "source", "L2 sectors (all)", "L2 sectors from L1TEX", "L1 sectors",
           "L1 hits", "L1 hit %"]


def load(rows: list[dict]) -> dict:
    rows = l1l2_rows(rows)
    P = max(persistent_ctas(r["schedule"]) for r in rows)
    rows = [r for r in rows if persistent_ctas(r["schedule"]) == P]
    vals = mean_by(rows, "S_q", "source", "metric")
    table = []
    for S, source in sorted({(k[0], k[1]) for k in vals}):
        get = lambda m: vals.get((S, source, m), float("nan"))  # noqa: E731
        l1, hits = get(Metric.L1_SECTORS), get(Metric.L1_HITS)
        pct = 100 * hits / l1 if l1 and l1 == l1 else float("nan")
        table.append([S, P, source, f"{get(Metric.L2_SECTORS):,.0f}",
                      f"{get(Metric.L2_TEX_SECTORS):,.0f}", f"{l1:,.0f}", f"{hits:,.0f}",
                      f"{pct:.4f}"])
    if not table:
        raise Skip("no l1l2 rows at the full CTA count")
    return {"columns": COLUMNS, "rows": table, "P": P, "sources": sources(rows)}


def table(data: dict, arch: str | None = None) -> tuple[list[str], list[list]]:
    return data["columns"], data["rows"]


def plot(data: dict, arch: str | None = None):
    return lines.table_figure(data["columns"], data["rows"],
                              f"T1: L1/L2 counters at {data['P']} persistent CTAs, CUDA split-Q, "
                              f"B=H=1, {gpu_name(arch)}", data["sources"])


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

"""T2: the traffic model's error (MAPE over the S sweep, and the largest single error) per mode,
for the exact model and for the paper's closed form, against both L2 sector counters."""
from __future__ import annotations

import sys

from . import lines
from .data import Skip
from .style import gpu_name
from .traffic_panels import errors, load_mode

FIGURE = "T2"
STUDIES: tuple[str, ...] = ("traffic",)
COLUMNS = ["mode", "counter", "source", "model", "MAPE %", "max |error| %", "points", "S range"]


def load(rows: list[dict]) -> dict:
    table, srcs = [], set()
    for causal in (False, True):
        try:
            data = load_mode(rows, causal)
        except Skip:
            continue
        srcs |= data["sources"]
        for e in errors(data):
            table.append(["causal" if causal else "non-causal", e["metric"], e["source"],
                          e["model"], f"{e['mape']:.2f}", f"{e['max_abs']:.2f}", e["n"],
                          f"{e['S'][0]}..{e['S'][1]}"])
    if not table:
        raise Skip("no rows of the traffic study (lts__t_sectors.sum, ..._srcunit_tex.sum)")
    return {"columns": COLUMNS, "rows": table, "sources": srcs | {"model"}}


def table(data: dict, arch: str | None = None):
    return data["columns"], data["rows"]


def plot(data: dict, arch: str | None = None):
    return lines.table_figure(data["columns"], data["rows"],
                              f"T2: L2 sector traffic model error, CUDA split-Q, {gpu_name(arch)}",
                              data["sources"])


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

"""decode: DRAM reads of the second of two decode steps in a row over its K+V bytes, against the
cache's K+V size over the L2 (decode study), one panel per shape: linear (every step scans each
split's chunk forward) and alternate (the second step backward), the GQA group packed in one CTA
(filled markers) or one query head per CTA (triangles); measured solid (median of the repeats,
error bars their min..max), simulated dashed. 1.0: the whole cache read again from DRAM."""
from __future__ import annotations

import statistics
import sys

from spec.decode import cache_bytes

from . import lines
from .data import Skip, sources
from .style import gpu_name

FIGURE = "decode"
STUDIES: tuple[str, ...] = ("decode",)
METRIC = "dram__bytes_read.sum"
ORDER_KEY = {"linear": "linear", "alternate": "sawtooth"}   # the style table's colours


def load(rows: list[dict]) -> dict:
    rows = [r for r in rows if r["study"] == "decode" and r["metric"] == METRIC]
    if not rows:
        raise Skip(f"no rows of the decode study ({METRIC})")
    panels: dict[tuple, dict] = {}
    for r in rows:
        kv = cache_bytes(r["B"], r["H_kv"], r["S_kv"], r["D"])
        shape = (r["B"], r["H"], r["H_kv"], r["S_q"], r["D"])
        panels.setdefault(shape, {}).setdefault((r["variant"], r["source"]), {}).setdefault(
            float(r["x"]), []).append(r["value"] / kv)
    return {"panels": dict(sorted(panels.items())), "sources": sources(rows)}


def plot(data: dict, arch: str | None = None, columns: int = 2):
    keys = list(data["panels"])
    fig, axes = lines.panels(len(keys), columns, width=4.6, height=3.4)
    for ax, key in zip(axes, keys):
        B, H, H_kv, S_q, D = key
        for (variant, source), pts in sorted(data["panels"][key].items()):
            _, order, packing = variant.split(".")
            xs = sorted(pts)
            med = [statistics.median(pts[x]) for x in xs]
            extra = {} if packing == "group" else dict(marker="^", markersize=6)
            lines.series(ax, xs, med, ORDER_KEY[order], source,
                         yerr=([min(pts[x]) for x in xs], [max(pts[x]) for x in xs]),
                         label=f"{order}, {'group packed' if packing == 'group' else 'head/CTA'}",
                         **extra)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({x for pts in data["panels"][key].values() for x in pts}))
        ax.xaxis.set_major_formatter("{x:g}")
        ax.set_xlabel("K+V bytes / L2")
        ax.set_ylabel("step-2 DRAM reads / K+V")
        ax.set_ylim(-0.03, 1.1)
        ax.set_title(f"B={B}, H={H}/{H_kv}, S_q={S_q}, D={D}", fontsize=9)
        lines.legend(ax, loc="lower right")
    lines.title(fig, f"decode: the second of two steps in a row, {gpu_name(arch)}",
                data["sources"])
    return fig


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

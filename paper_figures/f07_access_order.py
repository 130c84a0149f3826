"""F7: the K/V access order of one CTA over consecutive Q tiles, linear vs sawtooth.

Drawn from ``spec.visit_order`` (the definition the kernels are tested against), not hand-drawn:
x is the CTA's step, y the K/V tile it reads. The linear order restarts at tile 0 for every Q tile,
so the tiles it needs first are the ones it touched longest ago; the sawtooth order turns around
and starts on the tiles it just touched.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from spec import CtaSchedule, Problem, ScanOrder, TileGrid, Tiles, visit_order  # noqa: E402

from .style import order_style  # noqa: E402

FIGURE = "F7"
STUDIES: tuple[str, ...] = ()  # a diagram of the orders: no data
N_KV, N_Q = 8, 4


def load(rows=None) -> dict:
    g = TileGrid(Problem(1, 1, N_KV * 64, 64), Tiles(64, 64))
    one_cta = CtaSchedule.persistent(2)       # CTA 0 gets every other Q tile: 4 scans of 8 tiles
    return {o.label: visit_order(g, one_cta, o).table()[0][: N_Q * N_KV]
            for o in (ScanOrder.linear(), ScanOrder.sawtooth())}


def plot(data: dict, arch: str | None = None):
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True, constrained_layout=True)
    for ax, (order, table) in zip(axes, data.items()):
        st = order_style(order)
        steps = range(len(table))
        ax.plot(steps, table[:, 3], color=st["color"], marker=st["marker"], markersize=3, lw=1)
        for k in range(1, N_Q):
            ax.axvline(k * N_KV - 0.5, color="grey", lw=0.5, ls=":")
        ax.set_title(st["label"], fontsize=10)
        ax.set_xlabel("CTA step (4 consecutive Q tiles of one CTA)")
    axes[0].set_ylabel("K/V tile index")
    fig.suptitle("F7: K/V access order per Q tile (simulated: spec.visit_order, "
                 f"{N_KV} K/V tiles)", fontsize=10)
    return fig


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("."),
                    help="directory to write F7.png into (an F7.png there is never overwritten)")
    a = ap.parse_args(argv)
    target = a.out / "F7.png"
    if target.exists() or (a.out.exists() and not a.out.is_dir()):
        taken = target if target.exists() else a.out
        print(f"error: {taken} exists; pass another --out directory", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    plot(load()).savefig(target, dpi=150)
    return 0


if __name__ == "__main__":
    sys.exit(main())

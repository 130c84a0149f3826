"""``python -m paper_figures.docs``: the figures REPORT.md shows inline, redrawn from the committed
runs into ``docs/figures/`` as small PNGs (the same figures ``python -m paper_figures --arch h100``
draws, with their titles and footers, at 60 dpi and 16 colours to keep the repository small).

    python -m paper_figures.docs                 # replaces docs/figures/<figure>.png

Only the figures named in ``DOC_FIGURES`` are drawn; each PNG is written to a temporary file and
moved over the old one, so an interrupted run leaves the previous set whole.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path

from analysis.data import DatasetError, default_runs, load_rows

from .drawing import finish, runs_drawn

ROOT = Path(__file__).resolve().parents[1]
DOC_FIGURES = ("F5", "F6", "F8a", "F9a", "F10a", "misscost")
DPI = 60


def _png(fig) -> bytes:
    """The figure as a palette PNG (16 colours): a fifth of the size of the RGBA one."""
    from PIL import Image
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    im = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    out = io.BytesIO()
    im.quantize(colors=16, method=Image.Quantize.MEDIANCUT).save(out, format="png", optimize=True)
    return out.getvalue()


def main(argv=None) -> int:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from . import FIGURES
    ap = argparse.ArgumentParser(prog="python -m paper_figures.docs",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="h100")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "figures")
    a = ap.parse_args(argv)
    try:
        rows = load_rows(default_runs(a.arch))
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    mods = [m for m in FIGURES if m.FIGURE in DOC_FIGURES]
    a.out.mkdir(parents=True, exist_ok=True)
    for mod in mods:
        fig = mod.plot(mod.load(rows), a.arch)
        finish(fig, rows, mod.FIGURE, a.arch, runs_drawn(rows, mod.FIGURE), None,
               getattr(mod, "ROWS", None))
        data = _png(fig)
        plt.close(fig)
        tmp = a.out / f".{mod.FIGURE}.png.tmp-{os.getpid()}"
        tmp.write_bytes(data)
        os.replace(tmp, a.out / f"{mod.FIGURE}.png")
        print(f"{a.out / mod.FIGURE}.png: {len(data) // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

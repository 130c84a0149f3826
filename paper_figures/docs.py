"""``python -m paper_figures.docs``: the figures REPORT.md shows inline, redrawn from the committed
runs into ``docs/figures/`` as PNGs readable in a page's text column (the same figures ``python -m
paper_figures --arch h100`` draws, with their titles and footers).

    python -m paper_figures.docs                 # replaces docs/figures/<figure>.png

Readable: each PNG is ``WIDTH_PX`` wide, shown at its own size in a column of about 900 px (a
GitHub page), and every text of it is at least ``MIN_TEXT_PX`` pixels (em size). A figure's
panels are drawn in ``COLUMNS[figure]`` columns (its ``plot(..., columns=)``: stacked where a
row of panels would shrink the text below that), smaller texts are raised to it, and panel
titles and x labels are wrapped to their panel. Small: 16 colours, 4 bits per pixel, unfiltered
rows.

Each PNG carries, in its ``sawtooth:drawn`` text chunk, ``digest(fig)``: a hash of what the
figure shows (its texts and the coordinates of its lines, bars and markers, not its pixels), so a
test can tell a committed PNG that no longer matches the data or the drawing code without
comparing pixels across matplotlib versions. Only the figures named in ``DOC_FIGURES`` are
drawn; each PNG is written to a temporary file and moved over the old one, so an interrupted run
leaves the previous set whole.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import os
import struct
import sys
import zlib
from pathlib import Path

from analysis.data import DatasetError, default_runs, load_rows

from .drawing import FOOTER_PT, finish, runs_drawn
from .style import wrap_to

ROOT = Path(__file__).resolve().parents[1]
DOC_FIGURES = ("F5", "F6", "F8a", "F9a", "F10a", "misscost")
WIDTH_PX = 800
MIN_TEXT_PX = 11.0
COLUMNS = {"F6": 1, "F8a": 1, "F9a": 1, "F10a": 1, "misscost": 2}
"""Panel columns per figure, passed to its ``plot`` (a figure not named keeps its layout)."""
COLOURS = 16
DIGEST_KEY = "sawtooth:drawn"


def texts(fig) -> list:
    """The figure's visible, non-empty texts (tick labels once drawn)."""
    from matplotlib.text import Text
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def raise_small_text(fig, pt: float) -> None:
    """Every text below ``pt`` points set to ``pt`` (tick labels drawn later included)."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = axis.get_ticklabels()
            if labels and labels[0].get_fontsize() < pt:
                axis.set_tick_params(labelsize=pt)
    for t in texts(fig):
        if t.get_fontsize() < pt:
            t.set_fontsize(pt)


def wrap_to_panels(fig) -> None:
    """Each panel's title and x label wrapped to the panel's width (as laid out when last drawn):
    a text raised by ``raise_small_text`` may have grown past it."""
    width = fig.get_size_inches()[0]
    for ax in fig.axes:
        panel = width * ax.get_position().width
        for t in (ax.title, ax.xaxis.label):
            if t.get_text():
                t.set_text(wrap_to(t.get_text(), 0.97 * panel, t.get_fontsize()))


def draw(mod, rows: list[dict], arch: str):
    """``mod``'s figure laid out for the page, finished (title, footer); returns (fig, dpi)."""
    columns = {"columns": COLUMNS[mod.FIGURE]} if mod.FIGURE in COLUMNS else {}
    fig = mod.plot(mod.load(rows), arch, **columns)
    dpi = WIDTH_PX / fig.get_size_inches()[0]
    pt = MIN_TEXT_PX * 72 / dpi
    raise_small_text(fig, pt)
    fig.canvas.draw()                   # the layout: finish wraps the title to its panel
    finish(fig, rows, mod.FIGURE, arch, runs_drawn(rows, mod.FIGURE), None,
           getattr(mod, "ROWS", None), footer_pt=max(FOOTER_PT, pt))
    fig.canvas.draw()
    wrap_to_panels(fig)                 # after finish, which finds the GPU's name in the title
    raise_small_text(fig, pt)           # tick labels made by the draws
    return fig, dpi


def digest(fig) -> str:
    """A hash of what ``fig`` shows: its texts, and the data coordinates of its lines, bars,
    markers and error bars at 4 significant digits (no pixel, no layout)."""
    import numpy as np
    from matplotlib.collections import Collection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle
    parts = sorted(t.get_text() for t in texts(fig))
    fmt = lambda a: " ".join(f"{v:.4g}" for v in np.asarray(a, dtype=float).ravel())  # noqa: E731
    for ax in fig.axes:
        for a in ax.get_children():
            if isinstance(a, Line2D):
                parts.append("line " + fmt(a.get_xydata()))
            elif isinstance(a, Rectangle) and a is not ax.patch:
                parts.append("bar " + fmt([a.get_x(), a.get_y(), a.get_width(), a.get_height()]))
            elif isinstance(a, Collection):
                segs = getattr(a, "get_segments", lambda: [])()
                offsets = fmt(a.get_offsets())
                parts.append("coll " + " | ".join(fmt(s) for s in segs) + " " + offsets)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(fig, dpi: float) -> bytes:
    """``fig`` as a PNG of ``COLOURS`` colours at 4 bits per pixel, rows unfiltered (a fifth
    smaller than PIL's palette PNG of the same image), deflated by zopfli (7% smaller than
    zlib's level 9), with ``digest(fig)`` in a text chunk."""
    import numpy as np
    import zopfli.zlib
    from PIL import Image
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    im = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    q = im.quantize(colors=COLOURS, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    idx = np.asarray(q, dtype=np.uint8)
    h, w = idx.shape
    if w % 2:
        idx = np.pad(idx, ((0, 0), (0, 1)))
    packed = (idx[:, 0::2] << 4) | idx[:, 1::2]                  # two pixels per byte
    raw = np.hstack([np.zeros((h, 1), np.uint8), packed]).tobytes()  # filter 0 on each row
    palette = bytes(q.getpalette()[:3 * COLOURS])
    text = DIGEST_KEY.encode() + b"\0" + digest(fig).encode()
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 4, 3, 0, 0, 0))
            + _chunk(b"PLTE", palette) + _chunk(b"tEXt", text)
            + _chunk(b"IDAT", zopfli.zlib.compress(raw, numiterations=15)) + _chunk(b"IEND", b""))


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
        fig, dpi = draw(mod, rows, a.arch)
        data = png(fig, dpi)
        plt.close(fig)
        tmp = a.out / f".{mod.FIGURE}.png.tmp-{os.getpid()}"
        tmp.write_bytes(data)
        os.replace(tmp, a.out / f"{mod.FIGURE}.png")
        print(f"{a.out / mod.FIGURE}.png: {len(data) // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

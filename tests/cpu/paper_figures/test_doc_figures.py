"""The figures REPORT.md shows (``docs/figures/``, ``python -m paper_figures.docs``) are current
and readable.

- Current: each committed PNG is the size the module draws now and carries the digest of what it
  shows now (``paper_figures.docs.digest``: its texts and the data coordinates of its artists,
  not its pixels, which change with matplotlib and freetype). A new registered run, a changed
  figure module or a changed layout fails here until ``python -m paper_figures.docs`` is run
  and its PNGs committed.
- Readable in a page's column of about 900 px: at most 900 px wide, shown at its own size, and
  no text under ``MIN_TEXT_PX`` pixels.
- Small: the set stays under ``BUDGET`` bytes, and each PNG is a 4-bit palette image.
"""
from __future__ import annotations

import io

import pytest
from PIL import Image

from paper_figures import FIGURES, docs
from tests.conftest import ROOT

FIGURE_DIR = ROOT / "docs" / "figures"
BUDGET = 177_000
"""Bytes of docs/figures/*.png (77 kB when they were 60 dpi images, plus 100 kB)."""


@pytest.fixture(scope="module")
def rows():
    from analysis.data import default_runs, load_rows
    return load_rows(default_runs("h100"))


@pytest.mark.slow
@pytest.mark.parametrize("figure", docs.DOC_FIGURES)
def test_committed_doc_figure_is_what_the_module_draws_now(figure, rows):
    import matplotlib
    matplotlib.use("Agg")
    mod = next(m for m in FIGURES if m.FIGURE == figure)
    fig, dpi = docs.draw(mod, rows, "h100")
    data = docs.png(fig, dpi)
    path = FIGURE_DIR / f"{figure}.png"
    committed = Image.open(path)
    drawn = Image.open(io.BytesIO(data))
    stale = f"{path.relative_to(ROOT)} is stale: run `python -m paper_figures.docs` and commit it"
    assert committed.size == drawn.size, f"{stale} (size {committed.size}, now {drawn.size})"
    assert committed.info.get(docs.DIGEST_KEY) == docs.digest(fig), stale
    # readable at its own size in a ~900 px column
    assert drawn.size[0] == docs.WIDTH_PX <= 900
    small = [(t.get_text()[:40], round(t.get_fontsize() * dpi / 72, 1)) for t in docs.texts(fig)
             if t.get_fontsize() * dpi / 72 < docs.MIN_TEXT_PX - 1e-6]
    assert not small, f"{figure}: texts under {docs.MIN_TEXT_PX} px: {small}"


def test_doc_figures_stay_small():
    pngs = sorted(FIGURE_DIR.glob("*.png"))
    assert {p.stem for p in pngs} == set(docs.DOC_FIGURES)
    total = sum(p.stat().st_size for p in pngs)
    assert total <= BUDGET, f"docs/figures/*.png total {total} B, over the {BUDGET} B bar"
    for p in pngs:
        im = Image.open(p)
        assert im.mode == "P" and len(im.getpalette()) // 3 <= 16, p.name


def test_digest_sees_data_and_text_not_pixels():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def fig(y, label="a", dpi=100):
        f, ax = plt.subplots(figsize=(3, 2), dpi=dpi)
        ax.plot([1, 2, 3], y, label=label)
        ax.bar([1, 2], [y[0], y[1]])
        ax.legend()
        f.canvas.draw()
        return f

    base = docs.digest(fig([1, 2, 3]))
    assert docs.digest(fig([1, 2, 3], dpi=50)) == base
    assert docs.digest(fig([1, 2, 3.5])) != base
    assert docs.digest(fig([1, 2, 3], label="b")) != base

"""The figure <-> study link is declared once, in each figure module, and everything else reads it.

- Every figure module declares literal ``FIGURE`` and ``STUDIES``, the catalogue reads them
  without importing (what it reads is what the imported modules hold), and its module list is
  the package's ``FIGURES``.
- Every study a figure names exists; ``Study.figures`` is exactly the figures that name it.
- Every study's figures draw from committed data: for each (study, figure), some registered
  dataset of that study makes the figure's ``load`` succeed (F6 reads the first of its studies
  that has rows, so it is checked on the rows of the study alone).
- docs/cli.md's study table lists the figures the declarations give.
"""
from __future__ import annotations

import re

import pytest

from experiments.registry.studies import STUDIES, get_study
from paper_figures.catalogue import FIGURE_MODULES, figure_studies, figures_of
from tests.conftest import ROOT


def test_the_catalogue_reads_what_the_modules_declare():
    import paper_figures
    mods = paper_figures.FIGURES
    assert tuple(m.__name__.rsplit(".", 1)[1] for m in mods) == FIGURE_MODULES
    assert figure_studies() == {m.FIGURE: m.STUDIES for m in mods}
    assert paper_figures.STUDIES == figure_studies()
    # and the package holds no figure module the catalogue leaves out
    declared = {p.stem for p in (ROOT / "paper_figures").glob("*.py")
                if re.search(r"^FIGURE(, STUDIES)? = ", p.read_text(), re.M)}
    assert declared == set(FIGURE_MODULES)


def test_every_figures_study_exists_and_study_figures_derive_from_it():
    for figure, studies in figure_studies().items():
        for s in studies:
            assert s in STUDIES, f"{figure} reads study {s!r}, which is not registered"
    for s in STUDIES.values():
        assert s.figures == tuple(f for f, st in figure_studies().items() if s.name in st)
    assert get_study("sawtooth").figures == ("F8a", "F8b", "F8c", "F9a", "F9b", "F10a", "F10b",
                                             "repeats")
    assert get_study("misscost").figures == ("misscost", "misscost_regimes")


def _committed(study: str) -> list:
    from analysis.data import registry
    return [e for e in registry.find(role="dataset") if e.study == study]


@pytest.mark.parametrize("figure", [f for f, st in figure_studies().items() if st])
def test_every_studys_figures_draw_from_committed_data(figure):
    import paper_figures
    from analysis.data import load_rows
    from paper_figures.data import Skip
    mod = next(m for m in paper_figures.FIGURES if m.FIGURE == figure)
    for study in mod.STUDIES:
        entries = _committed(study)
        assert entries, f"no committed dataset of study {study!r} (read by {figure})"
        why = []
        for e in sorted(entries, key=lambda e: e.path, reverse=True):
            rows = [r for r in load_rows([e.abspath]) if r["study"] == study]
            if figure == "repeats":              # it needs every run of its study at once
                rows = [r for x in entries for r in load_rows([x.abspath])
                        if r["study"] == study and x.arch == e.arch]
            try:
                mod.load(rows)
                break
            except Skip as s:
                why.append(f"{e.path}: {s}")
        else:
            pytest.fail(f"{figure} draws from none of study {study!r}'s committed datasets: "
                        + "; ".join(why[:3]))


def test_cli_docs_list_the_declared_figures():
    text = (ROOT / "docs" / "cli.md").read_text()
    table = text[text.index("**The studies**"):]
    seen = set()
    lines = table.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("| study |"))
    for line in lines[start + 2:]:
        if not line.startswith("| `"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        study = cells[0].strip("`")
        figures = () if cells[2] == "—" else tuple(x.strip() for x in cells[2].split(","))
        assert figures == figures_of(study), study
        seen.add(study)
    assert seen == set(STUDIES)

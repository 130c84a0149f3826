"""What a figure module drawn by a shared panel holds besides its id and studies, made once:
``ROWS`` (the columns that select the rows it draws, read by ``drawing.finish`` so that its
title and foot speak of those rows only), ``load(rows)``, ``plot(data, arch=None)`` and
``main(argv=None)`` (that one figure from the command line). F1/F2, F3/F4, F8b/F8c and
F9a/F9b/F10a/F10b are such pairs; each panel module says how its figures differ."""
from __future__ import annotations

from typing import Callable


def figure_module(name: str, rows: dict | None, load: Callable, plot: Callable) -> tuple:
    """``(ROWS, load, plot, main)`` of the module ``name`` (its ``__name__``)."""
    def main(argv=None) -> int:
        from .cli import figure_main
        return figure_main(name, argv)
    return rows, load, plot, main

"""``python -m paper_figures --arch <name> [--run DIR ...] [--source S] [--out DIR]``: redraw the
figures (the options and the run selection are described in ``paper_figures.cli``)."""
from __future__ import annotations

import sys

from . import FIGURES
from . import __doc__ as doc
from .cli import run_cli


def main(argv=None) -> int:
    return run_cli(argv, FIGURES, description=doc.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())

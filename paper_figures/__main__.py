"""``python -m paper_figures --arch <name> [--run DIR ...] [--source S] [--out DIR]``: redraw the
figures (the options and the run selection are described in ``paper_figures.cli``)."""
from __future__ import annotations

import sys

from . import __doc__ as doc
from .cli import run_cli


def main(argv=None) -> int:
    """Every figure (``modules=None``: ``run_cli`` imports them once the arguments and the runs
    have been checked, so ``--help`` and bad input answer without loading matplotlib)."""
    return run_cli(argv, None, description=doc.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())

"""The figure modules and what each declares: its id (``FIGURE``) and the studies it reads
(``STUDIES``), the one place that link is written.

The declarations are read from the modules' source (literal assignments), not by
importing them: plan-only commands (``python -m experiments.run --list``, ``--dry-run``) ask which
figures a study feeds, and importing every figure module means matplotlib and the analysis layer
(about a second). ``tests/cpu/paper_figures/test_figure_links.py`` checks that what is read here
is what the imported modules hold.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

FIGURE_MODULES = ("f01_l1l2_short", "f02_l1l2_long", "t1_l1l2_table", "f03_traffic_noncausal",
                  "f04_traffic_causal", "t2_model_error", "f05_divergence", "f06_active_sms",
                  "f07_access_order", "f08_cuda_batch", "f08b_cuda_tflops", "f08c_cuda_time",
                  "f09_cutile_noncausal", "f09b_cutile_tflops", "f10_cutile_causal",
                  "f10b_cutile_causal_tflops", "repeats", "ladder", "scaling", "longseq", "drift",
                  "reuse", "misscost", "misscost_regimes", "backward", "decode")
"""The figure modules of ``paper_figures``, in the order they are drawn."""

_HERE = Path(__file__).resolve().parent


class BadDeclaration(ValueError):
    """A figure module whose ``FIGURE`` or ``STUDIES`` is missing or not a literal."""


def _declared(module: str) -> tuple[str, tuple[str, ...]]:
    path = _HERE / f"{module}.py"
    found: dict[str, object] = {}
    for node in ast.parse(path.read_text(), str(path)).body:
        target = (node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1
                  else node.target if isinstance(node, ast.AnnAssign) else None)
        pairs = ([(target, node.value)] if isinstance(target, ast.Name) else
                 list(zip(target.elts, node.value.elts))       # FIGURE, STUDIES = "F1", (...)
                 if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) else [])
        for name, value in pairs:
            if isinstance(name, ast.Name) and name.id in ("FIGURE", "STUDIES"):
                try:
                    found[name.id] = ast.literal_eval(value)
                except ValueError:
                    raise BadDeclaration(f"{path}: {name.id} must be a literal") from None
    figure, studies = found.get("FIGURE"), found.get("STUDIES")
    if not isinstance(figure, str) or not (isinstance(studies, tuple)
                                           and all(isinstance(s, str) for s in studies)):
        raise BadDeclaration(f"{path}: a figure module declares FIGURE = \"<id>\" and STUDIES = "
                             "(\"<study>\", ...) at its top level")
    return figure, studies


@functools.cache
def figure_studies() -> dict[str, tuple[str, ...]]:
    """``{figure id: the studies it reads}``, in drawing order (F6 reads the first of its two
    studies that has rows; F7, a diagram, reads none)."""
    return dict(_declared(m) for m in FIGURE_MODULES)


def figures_of(study: str) -> tuple[str, ...]:
    """The figures that read ``study``'s rows, in drawing order."""
    return tuple(f for f, studies in figure_studies().items() if study in studies)


def drawn_with(study: str) -> tuple[str, ...]:
    """The figures a run of ``study`` may draw: its own, and those that read no study (F7, a
    diagram, is drawn with every render)."""
    return tuple(f for f, studies in figure_studies().items() if study in studies or not studies)

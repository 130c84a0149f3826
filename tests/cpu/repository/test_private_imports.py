"""No module of ours reaches into another module's private names.

A name that starts with one underscore is its module's own business: another module that imports
it (``from analysis.cache.reuse import _key_and_weights``) or reads it through the module
(``timeloop._run_lru``) ties itself to an internal that its owner may change without notice. A
name two modules need is either shared, and then public and documented in the module that owns
the concept, or the two modules do one job and are one module.

Every ``.py`` file of our packages is parsed with ``ast`` (nothing is imported), lazy imports
inside functions included; relative imports resolve against the file's package; third-party
private names (a library's ``_compile``) are not ours to fix and are ignored. Tests may use
private names (they test the internals).
"""
from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT
from tests.cpu.repository.test_layering import _exists, _resolve, module_name, source_files

PACKAGES = ("spec", "kernels", "cuda_baseline", "profiles", "analysis", "paper_figures",
            "experiments", "explorations")

OTHERS_OPEN = {
    "kernels.device.fmha_bwd": {"kernels.device.fmha._record"},    # device code: SASS pinned
    "paper_figures.timing_panels": {"paper_figures.cutile_panels._schedule_name"},
}
"""Private imports in the kernel and figure packages, left to their own clean-up: importing
module -> the names (owner.name) it may still import. Nothing may be added here."""


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(root: Path, file: Path) -> list[tuple[int, str]]:
    """(line, "owner.name") for every private name of another module of ours that ``file``
    imports, or reads as an attribute of a module of ours it imported."""
    module = module_name(root, file)
    is_package = file.name == "__init__.py"
    tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    ours = set(PACKAGES)
    modules: dict[str, str] = {}          # local name -> module of ours it is bound to
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] not in ours:
                    continue
                if any(_private(p) for p in a.name.split(".")):
                    found.append((node.lineno, a.name))
                if a.asname:
                    modules[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(root, module, is_package, node)
            if base.split(".")[0] not in ours:
                continue
            for a in node.names:
                full = f"{base}.{a.name}"
                if _exists(root, full):
                    modules[a.asname or a.name] = full
                if _private(a.name) and base != module:
                    found.append((node.lineno, full))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _private(node.attr)
                and isinstance(node.value, ast.Name) and node.value.id in modules
                and modules[node.value.id] != module):
            found.append((node.lineno, f"{modules[node.value.id]}.{node.attr}"))
    return sorted(set(found))


def test_no_module_imports_another_modules_private_names():
    bad = []
    for f in source_files(ROOT, PACKAGES):
        module = module_name(ROOT, f)
        for line, name in private_uses(ROOT, f):
            if name not in OTHERS_OPEN.get(module, ()):
                bad.append(f"{f.relative_to(ROOT)}:{line}: {module} uses {name}, private to "
                           f"its module: make it public where its concept lives, or merge")
    assert not bad, "\n".join(bad)


def test_the_check_sees_each_form_of_a_private_use(tmp_path):
    """A control that must fail: absolute, relative and lazy imports of a private name, and a
    private attribute read through an imported module, each found; its own names are not."""
    pkg = tmp_path / "analysis" / "cache"
    pkg.mkdir(parents=True)
    (tmp_path / "analysis" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "loop.py").write_text("_RUN = 1\ndef _step():\n    pass\n")
    user = pkg / "user.py"
    user.write_text(
        "from analysis.cache.loop import _RUN\n"
        "from .loop import _step\n"
        "from analysis.cache import loop\n"
        "def f():\n"
        "    from analysis.cache.loop import _RUN as r\n"
        "    return loop._step, r\n"
        "def _mine():\n"
        "    return _mine\n")
    got = private_uses(tmp_path, user)
    assert got == [(1, "analysis.cache.loop._RUN"), (2, "analysis.cache.loop._step"),
                   (5, "analysis.cache.loop._RUN"), (6, "analysis.cache.loop._step")]
    assert private_uses(tmp_path, pkg / "loop.py") == []

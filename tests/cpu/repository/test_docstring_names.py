"""Every name of ours a docstring mentions exists: a dotted name (``analysis.cache.timesim``,
``spec.OrderKind.SAWTOOTH``, ``kernels.attention``) resolves to a module, and then to a
top-level name of it and an attribute of that; a path (``experiments/simulation/simulate.py``,
``profiles/h100/sawtooth-20261123``) exists in the checkout (or names a run retired into git
history, registered and restorable). A module that moves or a run that is
renamed leaves its old name in prose that no import checks: this test is that check.

Resolution is static (``ast``; nothing is imported, so the GPU modules are read on any machine):
a module's names are what it defines, assigns or imports at top level, a class's are its methods,
class-level assignments and annotations and the ``self.x`` it assigns, and a module-level
``__getattr__`` adds the names it compares ``name`` with, or the strings of the call that makes it
(a lazy attribute). An imported name is
followed to the module it comes from. A dotted name ending in a file suffix (``registry.json``)
is a file name, not a module path.
"""
from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("spec", "kernels", "cuda_baseline", "profiles", "analysis", "paper_figures",
            "experiments", "explorations", "tests")
SKIP_DIRS = {"build", "dist", ".ci-venv", ".venv", "__pycache__", ".git"}
FILE_SUFFIXES = {"json", "csv", "py", "md", "png", "pdf", "svg", "gz", "cu", "cuh", "txt", "toml",
                 "cubin", "ptx", "html", "log", "ncu-rep"}
PATTERN_MARKS = ("<", "*", "…", "{", "[")
OUTPUTS = ("paper_figures/out",)     # written by the commands, not in the checkout
_ALT = "|".join(PACKAGES)
DOTTED = re.compile(rf"(?<![\w./\-])((?:{_ALT})(?:\.[A-Za-z_]\w*)+)(?![\w/\-])")
PATH = re.compile(rf"(?<![\w./\-])((?:{_ALT})/[\w./\-]*\w)")


def sources() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py")
                  if not SKIP_DIRS & set(p.relative_to(ROOT).parts)
                  and p.relative_to(ROOT).parts[0] in PACKAGES)


def docstrings(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc


def module_file(dotted: str) -> Path | None:
    base = ROOT.joinpath(*dotted.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = _package_of(module, path).split(".")
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _class_names(cls: ast.ClassDef) -> dict[str, ast.AST]:
    out: dict[str, ast.AST] = {}
    for n in cls.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[n.name] = n
        elif isinstance(n, ast.Assign):
            for t in n.targets:
                for e in ast.walk(t):
                    if isinstance(e, ast.Name):
                        out[e.id] = n
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            out[n.target.id] = n
    for n in ast.walk(cls):
        if (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                and isinstance(n.value, ast.Name) and n.value.id == "self"):
            out.setdefault(n.attr, n)
    return out


@functools.lru_cache(maxsize=None)
def module_names(module: str) -> dict[str, object]:
    """Top-level names of ``module``: an AST node, or ('import', module, name) for imports."""
    path = module_file(module)
    out: dict[str, object] = {}
    for n in _tree(path).body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[n.name] = n
            if n.name == "__getattr__":
                for c in ast.walk(n):
                    if isinstance(c, ast.Constant) and isinstance(c.value, str):
                        out.setdefault(c.value, ("lazy",))
        elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in targets:
                for e in ast.walk(t):
                    if isinstance(e, ast.Name):
                        out[e.id] = n
                        if e.id == "__getattr__" and n.value is not None:   # a made hook
                            for c in ast.walk(n.value):
                                if isinstance(c, ast.Constant) and isinstance(c.value, str):
                                    out.setdefault(c.value, ("lazy",))
        elif isinstance(n, ast.ImportFrom):
            src = _absolute(module, path, n)
            for a in n.names:
                out[a.asname or a.name] = ("import", src, a.name)
        elif isinstance(n, ast.Import):
            for a in n.names:
                out[(a.asname or a.name).split(".")[0]] = ("module", a.name if a.asname
                                                          else a.name.split(".")[0])
        elif isinstance(n, (ast.If, ast.Try)):
            for sub in ast.walk(n):
                if isinstance(sub, (ast.FunctionDef, ast.ClassDef)):
                    out.setdefault(sub.name, sub)
                elif isinstance(sub, ast.ImportFrom):
                    for a in sub.names:
                        out.setdefault(a.asname or a.name,
                                       ("import", _absolute(module, path, sub), a.name))
    return out


def _resolve_in(module: str, attrs: list[str], depth: int = 0) -> bool:
    """Whether ``module.attrs[0].attrs[1]...`` names something."""
    if not attrs:
        return True
    if depth > 10:
        return False
    sub = f"{module}.{attrs[0]}"
    if module_file(sub) is not None:
        return _resolve_in(sub, attrs[1:], depth + 1)
    found = module_names(module).get(attrs[0])
    if found is None:
        return False
    rest = attrs[1:]
    if isinstance(found, tuple):
        if found[0] == "lazy":
            return not rest
        if found[0] == "module":
            return module_file(found[1]) is None or _resolve_in(found[1], rest, depth + 1)
        src, name = found[1], found[2]
        if module_file(src) is None:              # a third-party import: not ours to check
            return src.split(".")[0] not in PACKAGES
        return _resolve_in(src, [name, *rest], depth + 1)
    if not rest:
        return True
    if isinstance(found, ast.ClassDef):
        members = _class_names(found)
        if rest[0] in members:
            node = members[rest[0]]
            return len(rest) == 1 or (isinstance(node, ast.ClassDef)
                                      and all(r in _class_names(node) for r in rest[1:2]))
        return False
    return False                                   # an attribute of a function or a value


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    if parts[-1] in FILE_SUFFIXES:
        return True
    for n in range(len(parts), 0, -1):
        if module_file(".".join(parts[:n])) is not None:
            return _resolve_in(".".join(parts[:n]), parts[n:])
    return False


@functools.lru_cache(maxsize=None)
def _retired() -> tuple[str, ...]:
    from analysis.data import registry
    return tuple(f"profiles/{e.path}" for e in registry.find(retired=True))


def retired(path: str) -> bool:
    """A path inside a run retired into git history (``analysis.data.history``): registered and
    restorable, absent from the checkout by design, so a citation of it still names a run."""
    return any(path == r or path.startswith(f"{r}/") for r in _retired())


def unresolved() -> list[str]:
    bad = []
    for f in sources():
        rel = f.relative_to(ROOT)
        for line, doc in docstrings(_tree(f)):
            for m in DOTTED.finditer(doc):
                if not resolves(m.group(1)):
                    bad.append(f"{rel}:{line}: {m.group(1)}")
            for m in PATH.finditer(doc):
                if doc[m.end():m.end() + 2].lstrip("-.").startswith(PATTERN_MARKS):
                    continue                        # a pattern: simcheck-<arch>-*, x.*
                path = m.group(1).rstrip(".")
                if not path.startswith(OUTPUTS) and not (ROOT / path).exists() \
                        and not retired(path):
                    bad.append(f"{rel}:{line}: {m.group(1)}")
    return bad


def test_the_resolver_tells_a_moved_name_from_a_present_one():
    assert resolves("analysis.cache.timesim") and resolves("spec.OrderKind")
    assert resolves("analysis.data.registry.Entry.remedy") and resolves("kernels.attention")
    assert not resolves("analysis.cache.nosuchmodule") and not resolves("spec.NoSuchName")
    assert not resolves("analysis.data.registry.Entry.no_such_method")


def test_every_name_a_docstring_mentions_resolves():
    bad = unresolved()
    assert not bad, f"{len(bad)} names in docstrings name nothing:\n" + "\n".join(bad)

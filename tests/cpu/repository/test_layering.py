"""The import graph of the source is a stack, and it has no cycles.

    spec/                                            the vocabulary: imports nothing of ours
    kernels/  cuda_baseline/  profiles/  analysis/   side by side: each imports only spec/
    paper_figures/                                   spec/ and analysis/ only
    experiments/                                     on top: anything

Inside ``analysis/`` the subpackages form a stack of their own (``ANALYSIS_ORDER``, bottom first):
the data door, the closed-form models, the cache simulators, the launch diagnostics, the
calibration, the findings report; a subpackage imports only those below it. ``experiments/`` is
built the same way (``EXPERIMENTS_ORDER``), with its CLI entry ``experiments.run`` on top.

Every ``.py`` file of these packages is parsed with ``ast`` (nothing is imported), so imports inside
functions ("lazy" imports), under ``if TYPE_CHECKING`` and ``importlib.import_module("...")`` with a
literal name count the same as top-level ones; relative imports are resolved against the file's
package. Third-party imports are ignored. A failure names the file, the line and the rule broken.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

# package -> the packages of ours it may import (itself always included)
ALLOWED: dict[str, frozenset[str]] = {
    "spec": frozenset(),
    "kernels": frozenset({"spec"}),
    "cuda_baseline": frozenset({"spec"}),
    "profiles": frozenset({"spec"}),
    "analysis": frozenset({"spec"}),
    "paper_figures": frozenset({"spec", "analysis"}),
    "experiments": frozenset({"spec", "kernels", "cuda_baseline", "profiles", "analysis",
                              "paper_figures"}),
}


ANALYSIS_ORDER = ("data", "models", "cache", "launch", "calibration", "findings")
"""analysis/ subpackages, bottom first: each may import only itself and those before it."""

EXPERIMENTS_ORDER = ("registry", "rundirs", "measurement", "simulation", "instruments", "speed",
                     "sharding", "runner", "tuning")
"""experiments/ subpackages, bottom first: the study registry (plain data: it names the hooks of
the layers above, never imports them), run directories, the two modes' engines (measurement on
the GPU, simulation on the CPU), the instruments and the user-speed studies built on measurement,
sharding, the runner of ``python -m experiments.run``, tuning. Above them only the CLI entry
``experiments.run``, which nothing of the package imports."""
EXPERIMENTS_TOP = ("run", "__main__")

KERNELS_ORDER = ("device", "build", "rules", "host", "paper_builds")
"""kernels/ rooms by job, bottom first: device code (kernel bodies, the work scheduler, tactic
bits), build tools (export signatures, resources, toolchain checks), configuration rules, the
host path (the family, the backward's launches, ``attention()``), and the paper authors' builds
(which nothing on the kernel path imports). The package's ``__init__`` re-exports from them."""
CUDA_ORDER = ("build", "host")
"""cuda_baseline/ rooms by job, bottom first (its C++ lives in ``device/``, data not modules)."""


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. "kernels.host.backend"
    file: Path
    line: int
    target: str  # the imported module of ours, resolved, e.g. "experiments.measurement.correctness"


def module_name(root: Path, file: Path) -> str:
    parts = list(file.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(root: Path, module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names (relative levels resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level - 1 > len(base) - 1:
        raise ValueError(f"relative import beyond the top-level package: level {node.level} "
                         f"in {module}")
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _exists(root: Path, module: str) -> bool:
    p = root.joinpath(*module.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def imports_of(root: Path, file: Path, ours: set[str]) -> list[Import]:
    """Every import of one of ``ours`` packages in ``file``, anywhere in it."""
    module = module_name(root, file)
    is_package = file.name == "__init__.py"
    tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(root, module, is_package, node)
            for a in node.names:        # `from pkg import sub` imports the module pkg.sub
                sub = f"{base}.{a.name}" if base else a.name
                found.append((node.lineno, sub if a.name != "*" and _exists(root, sub) else base))
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name)
                       and node.func.id in ("import_module", "__import__")))):
            found.append((node.lineno, node.args[0].value))
    return [Import(module, file, line, target) for line, target in sorted(dict.fromkeys(found))
            if target.split(".")[0] in ours]


def source_files(root: Path, packages) -> list[Path]:
    return sorted(f for p in packages for f in (root / p).rglob("*.py")
                  if "__pycache__" not in f.parts)


def layering_violations(imports: list[Import], root: Path, allowed=ALLOWED) -> list[str]:
    out = []
    for imp in imports:
        mine, theirs = imp.module.split(".")[0], imp.target.split(".")[0]
        if theirs == mine or theirs in allowed[mine]:
            continue
        may = ", ".join(f"{p}/" for p in sorted(allowed[mine])) or "nothing of ours"
        out.append(f"{imp.file.relative_to(root)}:{imp.line}: {imp.module} imports {imp.target}: "
                   f"{mine}/ may import only {may} (and third-party libraries)")
    return out


def _owner(root: Path, target: str) -> str:
    """The module of ours a target names: itself, or its nearest existing parent (an attribute
    import such as ``spec.Problem`` is an edge to ``spec``)."""
    parts = target.split(".")
    while parts and not _exists(root, ".".join(parts)):
        parts.pop()
    return ".".join(parts)


def import_cycles(imports: list[Import], root: Path) -> list[list[str]]:
    """Strongly connected components of more than one module (or a module importing itself)."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        dst = _owner(root, imp.target)
        graph.setdefault(imp.module, set())
        if dst:
            graph[imp.module].add(dst)
            graph.setdefault(dst, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    sccs: list[list[str]] = []

    def visit(v: str) -> None:          # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                sccs.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sccs


def _cycle_message(comp: list[str], imports: list[Import], root: Path) -> str:
    """One shortest cycle through the component's first module, each edge with its file:line."""
    members = set(comp)
    edge = {}
    for i in imports:
        dst = _owner(root, i.target)
        if i.module in members and dst in members:
            edge.setdefault((i.module, dst), f"{i.file.relative_to(root)}:{i.line}")
    start = comp[0]
    prev: dict[str, str] = {}
    frontier, back = [start], None
    while frontier and back is None:        # breadth first: the shortest way back to start
        nxt = []
        for v in frontier:
            for (a, b) in sorted(edge):
                if a != v:
                    continue
                if b == start:
                    back = v
                    break
                if b not in prev:
                    prev[b] = v
                    nxt.append(b)
            if back is not None:
                break
        frontier = nxt
    path = [start]
    v = back
    while v != start:
        path.insert(1, v)
        v = prev[v]
    path.append(start)
    steps = " -> ".join(f"{a} ({edge[(a, b)]})" for a, b in zip(path, path[1:])) + f" -> {start}"
    others = f" ({len(comp)} modules in the cycle's component)" if len(comp) > len(path) - 1 else ""
    return f"import cycle: {steps}{others}"


def check(root: Path, allowed=ALLOWED) -> list[str]:
    ours = set(allowed)
    imports = [i for f in source_files(root, [p for p in allowed if (root / p).is_dir()])
               for i in imports_of(root, f, ours)]
    return (layering_violations(imports, root, allowed)
            + [_cycle_message(c, imports, root) for c in import_cycles(imports, root)])


def subpackage_violations(imports: list[Import], root: Path, package: str,
                          order: tuple[str, ...], top: tuple[str, ...] = ()) -> list[str]:
    """Imports that go up or sideways between the subpackages of ``package`` (``order``, bottom
    first); ``top`` names the modules allowed beside them (entry points: they may import any
    subpackage, and no module of the package may import them)."""
    out = []
    for imp in imports:
        a, b = imp.module.split("."), imp.target.split(".")
        if a[0] != package or b[0] != package or len(b) < 2:
            continue
        where = f"{imp.file.relative_to(root)}:{imp.line}: {imp.module} imports {imp.target}"
        mine = a[1] if len(a) > 1 else None
        theirs = b[1]
        if mine is None:            # the package's __init__: its public names, from any room
            continue
        if theirs in top:
            out.append(f"{where}: {package}.{theirs} is an entry point; nothing imports it")
            continue
        if mine in top:
            continue
        if mine not in order or theirs not in order:
            out.append(f"{where}: every module of {package}/ lives in one of {', '.join(order)}")
            continue
        if order.index(theirs) > order.index(mine):
            may = ", ".join(order[:order.index(mine) + 1])
            out.append(f"{where}: {package}.{mine} may import only {package}.{{{may}}}")
    return out


def analysis_violations(imports: list[Import], root: Path) -> list[str]:
    """Imports that go up or sideways between the subpackages of ``analysis/``."""
    return subpackage_violations(imports, root, "analysis", ANALYSIS_ORDER)


# -- the repository -------------------------------------------------------------------------------

def test_every_package_is_present():
    assert all((ROOT / p / "__init__.py").is_file() for p in ALLOWED), \
        "a package of the stack is missing; update ALLOWED with the layout"


def test_imports_go_down_the_stack_and_never_in_a_circle():
    problems = check(ROOT)
    assert not problems, f"{len(problems)} import(s) break the stack:\n" + "\n".join(problems)


def test_analysis_subpackages_form_a_stack():
    imports = [i for f in source_files(ROOT, ["analysis"])
               for i in imports_of(ROOT, f, {"analysis"})]
    top = [f for f in (ROOT / "analysis").glob("*.py") if f.name != "__init__.py"]
    assert not top, f"modules outside the subpackages: {[f.name for f in top]}"
    problems = analysis_violations(imports, ROOT)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("package,order", [("kernels", KERNELS_ORDER),
                                           ("cuda_baseline", CUDA_ORDER)])
def test_kernel_families_are_rooms_by_job_in_a_stack(package, order):
    """Each family shows its jobs: at most six rooms (subpackages or modules) beside its
    ``__init__``, each a floor of ``order``, imports only downward between them."""
    rooms = {p.stem if p.suffix == ".py" else p.name for p in (ROOT / package).iterdir()
             if (p.suffix == ".py" and p.name != "__init__.py")
             or (p.is_dir() and (p / "__init__.py").is_file())}
    assert len(rooms) <= 6 and rooms == set(order), (package, sorted(rooms))
    imports = [i for f in source_files(ROOT, [package])
               for i in imports_of(ROOT, f, set(ALLOWED))]
    problems = subpackage_violations(imports, ROOT, package, order)
    assert not problems, "\n".join(problems)


def test_the_kernels_rule_catches_an_upward_import(tmp_path):
    (tmp_path / "kernels" / "device").mkdir(parents=True)
    (tmp_path / "kernels" / "host").mkdir()
    for f in ("__init__.py", "device/__init__.py", "host/__init__.py", "host/op.py"):
        (tmp_path / "kernels" / f).write_text("")
    (tmp_path / "kernels" / "device" / "fmha.py").write_text("from kernels.host import op\n")
    imports = [i for f in source_files(tmp_path, ["kernels"])
               for i in imports_of(tmp_path, f, {"kernels"})]
    msgs = subpackage_violations(imports, tmp_path, "kernels", KERNELS_ORDER)
    assert len(msgs) == 1 and "kernels.device may import only kernels.{device}" in msgs[0]


def test_experiments_subpackages_form_a_stack():
    imports = [i for f in source_files(ROOT, ["experiments"])
               for i in imports_of(ROOT, f, {"experiments"})]
    top = sorted(f.stem for f in (ROOT / "experiments").glob("*.py")
                 if f.stem not in ("__init__", *EXPERIMENTS_TOP))
    assert not top, f"modules outside the subpackages of experiments/: {top}"
    subs = {d.name for d in (ROOT / "experiments").iterdir() if (d / "__init__.py").is_file()}
    assert subs == set(EXPERIMENTS_ORDER), "every subpackage of experiments/ has its floor"
    problems = subpackage_violations(imports, ROOT, "experiments", EXPERIMENTS_ORDER,
                                     EXPERIMENTS_TOP)
    assert not problems, "\n".join(problems)


def test_the_experiments_rule_catches_an_upward_import_and_an_import_of_the_entry(tmp_path):
    root = _tree(tmp_path, {"experiments/__init__.py": "", "experiments/run.py": "",
                            "experiments/registry/__init__.py": "",
                            "experiments/registry/studies.py":
                                "from ..measurement.measure import gate\n",
                            "experiments/measurement/__init__.py": "",
                            "experiments/measurement/measure.py": "from experiments import run\n"})
    imports = [i for f in source_files(root, ["experiments"])
               for i in imports_of(root, f, {"experiments"})]
    msgs = sorted(subpackage_violations(imports, root, "experiments", EXPERIMENTS_ORDER,
                                        EXPERIMENTS_TOP))
    assert len(msgs) == 2
    assert msgs[0].startswith("experiments/measurement/measure.py:1: ") and \
        "experiments.run is an entry point" in msgs[0]
    assert msgs[1].startswith("experiments/registry/studies.py:1: experiments.registry.studies "
                              "imports experiments.measurement.measure: experiments.registry "
                              "may import only experiments.{registry}")


def test_the_analysis_rule_catches_an_upward_import(tmp_path):
    root = _tree(tmp_path, {"analysis/data/__init__.py": "",
                            "analysis/data/x.py": "from analysis.cache.sim import run\n",
                            "analysis/cache/__init__.py": "", "analysis/cache/sim.py": ""})
    imports = [i for f in source_files(root, ["analysis"])
               for i in imports_of(root, f, {"analysis"})]
    (msg,) = analysis_violations(imports, root)
    assert msg.startswith("analysis/data/x.py:1: analysis.data.x imports analysis.cache.sim")


# -- the checker itself, on a synthetic tree ------------------------------------------------------

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for p in ALLOWED:
        (tmp_path / p).mkdir()
        (tmp_path / p / "__init__.py").write_text("")
    for name, text in files.items():
        f = tmp_path / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return tmp_path


def test_checker_passes_a_clean_tree(tmp_path):
    root = _tree(tmp_path, {
        "spec/problem.py": "import numpy\nfrom dataclasses import dataclass\n",
        "kernels/host/backend.py": "from spec.problem import X\nfrom . import fmha\nimport torch\n",
        "kernels/device/fmha.py": "import spec\n",
        "analysis/models.py": "from spec import problem\n",
        "paper_figures/f1.py": "from analysis.models.traffic import fit\n"
                               "from spec import Problem\n",
        "experiments/run.py": "def f():\n"
                              "    import kernels.host.backend, paper_figures.f1, profiles\n",
    })
    assert check(root) == []


def test_checker_catches_an_upward_import_with_file_line_and_rule(tmp_path):
    root = _tree(tmp_path, {"kernels/bench.py": "import os\n\n"
                                                "from experiments.measurement.timing import t\n"})
    (msg,) = check(root)
    assert msg.startswith("kernels/bench.py:3: kernels.bench imports "
                          "experiments.measurement.timing: ")
    assert "kernels/ may import only spec/ (and third-party libraries)" in msg


def test_checker_catches_a_lazy_a_sideways_and_a_dynamic_import(tmp_path):
    root = _tree(tmp_path, {
        "analysis/sim.py": "def f():\n    if True:\n        from cuda_baseline import backend\n",
        "paper_figures/f2.py": "import importlib\n"
                               "m = importlib.import_module('kernels.device.fmha')\n",
        "spec/arch.py": "class A:\n    def m(self):\n        from analysis import sim\n",
    })
    msgs = check(root)
    assert any(m.startswith("analysis/sim.py:3: analysis.sim imports cuda_baseline") for m in msgs)
    assert any(m.startswith("paper_figures/f2.py:2: paper_figures.f2 imports kernels.device.fmha")
               and "only analysis/, spec/" in m for m in msgs)
    assert any(m.startswith("spec/arch.py:3: spec.arch imports analysis.sim")
               and "nothing of ours" in m for m in msgs)
    assert len(msgs) == 3


def test_checker_resolves_relative_imports(tmp_path):
    root = _tree(tmp_path, {
        "profiles/sub/__init__.py": "",
        "profiles/sub/deep.py": "from ...experiments import measure\n",
    })
    # three dots from profiles.sub.deep climb above the top-level package: a syntax the checker
    # refuses rather than guesses about
    try:
        check(root)
    except ValueError as e:
        assert "beyond the top-level package" in str(e)
    else:
        raise AssertionError("a relative import above the top-level package was accepted")
    (root / "profiles/sub/deep.py").write_text("from .. import ncu\nfrom ..ncu import run\n")
    (root / "profiles/ncu.py").write_text("from .sub import deep\n")
    (msg,) = check(root)                     # no layering problem, but a cycle
    assert msg == ("import cycle: profiles.ncu (profiles/ncu.py:1) -> profiles.sub.deep "
                   "(profiles/sub/deep.py:1) -> profiles.ncu")


def test_checker_catches_a_cycle_through_a_lazy_import(tmp_path):
    root = _tree(tmp_path, {
        "experiments/a.py": "from experiments.b import x\n",
        "experiments/b.py": "def g():\n    from . import a\n",
    })
    (msg,) = check(root)
    assert msg == ("import cycle: experiments.a (experiments/a.py:1) -> experiments.b "
                   "(experiments/b.py:2) -> experiments.a")


def test_cpu_tests_live_under_the_package_they_test():
    """tests/cpu/ mirrors the packages: a test module sits in tests/cpu/<package>/ (or
    tests/cpu/repository/ for the repository as a whole), never at tests/cpu/'s top level."""
    tests = ROOT / "tests" / "cpu"
    loose = sorted(p.name for p in tests.glob("test_*.py"))
    assert not loose, f"move {loose} into tests/cpu/<package>/ (git mv)"
    dirs = {p.relative_to(tests).parts[0] for p in tests.rglob("test_*.py")}
    assert dirs <= set(ALLOWED) | {"repository"}, dirs - set(ALLOWED)

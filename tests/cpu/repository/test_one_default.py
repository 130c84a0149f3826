"""``default_variant`` is the one place a default is resolved: each family's
``<family>/host/backend.py`` asks the configuration rules (``kernels.rules``: the forward's
``problem_config`` and its shape-class tables, the backward's ``fitted_rule``) and returns a
complete variant (``training=True``: the backward's configuration too); the studies, the benches,
the warm-up and ``attention()`` ask it. Where another module resolved a default itself, the
studies timed another build than ``attention()`` ran (found once by accident). This test finds
every call of a rule's entry outside the rules' own room, the backend and the tools that fit
and judge the rules (``experiments/tuning``)."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

RULE_ENTRIES = {"problem_config", "fitted_rule", "load_rule", "class_config", "default_config",
                "registry_config", "persistent_ctas"}
ALLOWED = ("kernels/rules/", "kernels/host/backend.py", "experiments/tuning/", "tests/")
PACKAGES = ("spec", "kernels", "cuda_baseline", "analysis", "experiments", "paper_figures",
            "profiles", "explorations", "tests")


def rule_calls(root: Path) -> list[str]:
    """``path:line name`` of every import of a rule entry from ``kernels.rules`` and every call of
    one through a ``kernels.rules`` module, outside ``ALLOWED``."""
    found = []
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(ALLOWED):
                continue
            tree = ast.parse(path.read_text(), rel)
            aliases = set()         # names bound to a kernels.rules module
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    aliases |= {a.asname or a.name for a in node.names
                                if a.name.startswith("kernels.rules")}
                elif isinstance(node, ast.ImportFrom) and (node.module or "") == "kernels.rules":
                    aliases |= {a.asname or a.name for a in node.names}
            for node in ast.walk(tree):
                if (isinstance(node, ast.ImportFrom)
                        and (node.module or "").startswith("kernels.rules")):
                    found += [f"{rel}:{node.lineno} {a.name}" for a in node.names
                              if a.name in RULE_ENTRIES]
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                      and node.func.attr in RULE_ENTRIES
                      and ast.unparse(node.func.value) in aliases):
                    found.append(f"{rel}:{node.lineno} {node.func.attr}")
    return sorted(found)


def test_only_default_variant_asks_the_rules():
    assert rule_calls(ROOT) == [], "resolve defaults through the family's default_variant"


def test_the_check_finds_a_module_that_asks_a_rule(tmp_path):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "bench.py").write_text(
        "from kernels.rules.choice import problem_config\n"
        "import kernels.rules.choice as c\n"
        "x = c.problem_config('h100', p)\n")
    assert rule_calls(tmp_path) == ["experiments/bench.py:1 problem_config",
                                    "experiments/bench.py:3 problem_config"]

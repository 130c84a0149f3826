"""The model studies' plans (``experiments.registry.suites``)."""
from __future__ import annotations

from spec import get_arch


def test_the_model_studies_measure_the_rules_configuration_with_its_tactics():
    """What the models and shapes studies time as cuTile is what ``attention()`` launches: the
    rule's configuration including its kernel tactics (a study build without them would time
    another kernel than the eager call beside it)."""
    from experiments.registry.suites import default_cases, model_problems
    from kernels.rules.choice import problem_config
    arch = get_arch("h100")
    seen = set()
    for _, _, p in model_problems():
        cfg = problem_config("h100", p)
        cut = default_cases(arch, p, "x")[0].variant
        assert (cut.tiles, cut.occupancy, cut.tactic) == (cfg.tiles, cfg.occupancy, cfg.tactic)
        seen.add(cut.tactic)
    assert len(seen) > 1, "no model problem chooses a configuration with tactics"

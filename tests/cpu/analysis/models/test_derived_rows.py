"""Derived miss rows pair each case with its own measured misses (a sweep over S has many cases
of one variant id: matching on the id alone once paired every S with the first S's misses)."""
from __future__ import annotations

from analysis.models.traffic import cold_misses
from experiments.measurement.measure import derived_miss_rows
from experiments.registry.studies import get_study
from spec import get_arch
from spec.records import Metric, Row, case_fields


def test_each_case_gets_its_own_misses_minus_its_own_cold_misses():
    arch = get_arch("h200")
    cases = get_study("traffic").plan(arch)
    rows = []
    for i, c in enumerate(cases):
        f = case_fields(c.problem, c.variant)
        rows.append(Row(run="r", study="traffic", arch="h200", metric=Metric.L2_TEX_MISSES,
                        value=1e9 + i, unit="sector", source="measured", **f))
    derived = derived_miss_rows(rows, cases, arch, run="r", study="traffic")
    nc = [r for r in derived if r.metric == Metric.NONCOMPULSORY_MISSES]
    assert len(nc) == len(cases)
    for i, (c, r) in enumerate(zip(cases, nc)):
        assert (r.S_q, r.causal) == (c.problem.S_q, c.problem.causal)
        assert r.value == 1e9 + i - cold_misses(c.problem, c.variant.tiles, 32)

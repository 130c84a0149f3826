"""Section 0, counter consistency: ncu collects hits, misses and sectors in different replay
passes; per study, how far ``hits + misses`` is from the ``srcunit_tex`` sectors (a check on the
counters themselves, before any model is compared with them)."""
from __future__ import annotations

from analysis.data.rows import median, pivot
from spec.records import Metric


def consistency(by_study: dict[str, list[dict]]) -> list[dict]:
    """Per study: (hits + misses) / srcunit_tex sectors, min / median / max over its cases."""
    out = []
    for study, rows in by_study.items():
        ratios = []
        for c, m in pivot(rows).items():
            if {Metric.L2_TEX_HITS, Metric.L2_TEX_MISSES, Metric.L2_TEX_SECTORS} <= m.keys() \
                    and m[Metric.L2_TEX_SECTORS] > 0:
                ratios.append((m[Metric.L2_TEX_HITS] + m[Metric.L2_TEX_MISSES])
                              / m[Metric.L2_TEX_SECTORS])
        if ratios:
            out.append(dict(study=study, cases=len(ratios), ratio_min=min(ratios),
                            ratio_median=median(ratios), ratio_max=max(ratios),
                            off_by_more_than_5pct=sum(abs(x - 1) > 0.05 for x in ratios)))
    return out


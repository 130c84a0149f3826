"""Section 2, sector-access model error: the exact model
(``analysis.models.traffic.sector_accesses``: Q and O once per Q tile, K and V once per visited
(q, kv) pair) against the L1 sectors, the ``lts__t_sectors`` and the ``srcunit_tex`` sectors of
the traffic study, as MAPE, the largest error and the measured/model ratio (below 1 where the L2
merges the requests of CTAs in lock-step)."""
from __future__ import annotations

import numpy as np

from analysis.data.rows import as_case, pivot, problem_tiles
from analysis.models.traffic import model_error, sector_accesses
from spec.records import Metric


def traffic_model_error(traffic_rows: list[dict]) -> list[dict]:
    """MAPE (and the largest error) of the exact sector-access model per mode and counter."""
    out = []
    piv = pivot(traffic_rows)
    for causal in (False, True):
        cases = sorted(((as_case(k), m) for k, m in piv.items() if as_case(k)["causal"] == causal),
                       key=lambda cm: cm[0]["S_q"])
        if not cases:
            continue
        pred = np.array([sector_accesses(*problem_tiles(c)).total for c, _ in cases], dtype=float)
        for metric, what in ((Metric.L1_SECTORS, "L1 sectors (loads)"),
                             (Metric.L2_SECTORS, "L2 sectors (lts__t_sectors)"),
                             (Metric.L2_TEX_SECTORS, "L2 sectors from L1TEX (srcunit_tex)")):
            sel = [(p, m[metric]) for p, (c, m) in zip(pred, cases) if m.get(metric, 0) > 0]
            if not sel:
                continue
            p, y = np.array(sel).T
            e = model_error(p, y)
            out.append(dict(mode="causal" if causal else "non-causal", counter=what,
                            mape_pct=e.mape_pct, max_abs_err_pct=e.max_abs_pct,
                            measured_over_model_min=e.ratio_min,
                            measured_over_model_max=e.ratio_max, points=e.points,
                            S_range=f"{cases[0][0]['S_q']}..{cases[-1][0]['S_q']}"))
    return out


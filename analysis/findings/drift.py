"""Section 6, CTA drift: how far the persistent CTAs of a trace build drift apart from lock-step
(the ``drift`` run; ``analysis.launch.drift`` holds the arithmetic of one trace). Per case the
median step, the start-time spread over the CTAs in steps after one work item and at most, and that
maximum as K/V bytes (``spec.TileGrid.kv_step_bytes`` per step) beside the L2 size: a spread of
more steps than the L2 holds means the CTAs no longer share the tiles they read."""
from __future__ import annotations

import numpy as np

from analysis.data.rows import as_case, case_key, persistent_ctas, problem_tiles
from analysis.models.traffic import MiB
from spec import TileGrid
from spec.records import Metric


def _order(k: tuple) -> tuple:
    """Causal last, then by batch, linear before the other orders."""
    c = as_case(k)
    return (c["causal"], c["B"], c["order"] != "linear", c["order"])


def drift_table(rows: list[dict], l2_bytes: int) -> list[dict]:
    """Section 6, per drift case: the median step (µs), the start-time spread over the CTAs in
    steps at the sampled step nearest ``n_kv`` (the steps of one work item; ties to the earlier
    step) and its maximum over the sampled steps, that maximum as K/V bytes
    (spread × ``spec.TileGrid.kv_step_bytes``) and as a fraction of the L2. The dataset keeps
    at most a few hundred sampled steps per case, so the maximum is over those samples (a lower
    bound on the maximum over all steps) and the "after one item" step is the nearest sample."""
    step_ns: dict[tuple, float] = {}
    spread: dict[tuple, list[tuple[float, float]]] = {}
    for r in rows:
        if r["source"] != "measured":
            continue
        if r["metric"] == Metric.STEP_NS:
            step_ns[case_key(r)] = float(r["value"])
        elif r["metric"] == Metric.CTA_START_SPREAD_NS and r["x"] is not None:
            spread.setdefault(case_key(r), []).append((float(r["x"]), float(r["value"])))
    out = []
    for k in sorted(step_ns, key=_order):
        c, step = as_case(k), step_ns[k]
        pts = sorted(spread.get(k, []))
        if not pts or not step > 0:
            continue
        x = np.array([p[0] for p in pts])
        s = np.array([p[1] for p in pts]) / step
        grid = TileGrid(*problem_tiles(c))
        n_kv = grid.n_kv
        i1 = int(np.argmin(np.abs(x - n_kv)))
        im = int(np.argmax(s))
        kv_mib = s[im] * grid.kv_step_bytes / MiB
        out.append(dict(order=c["order"], B=c["B"], causal=c["causal"],
                        ctas=persistent_ctas(c["schedule"]), step_us=step / 1e3, n_kv=n_kv,
                        at_step=int(x[i1]), spread_after_one_item=float(s[i1]),
                        spread_max=float(s[im]), at_step_max=int(x[im]), steps_sampled=len(x),
                        max_spread_kv_mib=kv_mib, l2_mib=l2_bytes / MiB,
                        max_spread_over_l2=kv_mib * MiB / l2_bytes))
    return out


"""Section 4, hit rate vs active CTAs: N CTAs walking the same K/V tiles in lock-step miss once
per sector and wavefront and hit N - 1 times, so the L2 hit rate should follow ``1 - 1/N``
(active-sms study; the l1l2 study where there is none)."""
from __future__ import annotations

from analysis.data.rows import as_case, hit_rate, persistent_ctas, pivot
from spec.records import Metric


def hit_vs_active(rows: list[dict], study: str = "") -> list[dict]:
    """Measured L2 hit rate (hits / (hits + misses)) per order, S and persistent CTA count N,
    beside the wavefront prediction 1 - 1/N."""
    out = []
    for k, m in sorted(pivot(rows).items(),
                       key=lambda kv: (kv[0][2], kv[0][9], persistent_ctas(kv[0][3]) or 0)):
        c = as_case(k)
        n = persistent_ctas(c["schedule"])
        if not n or Metric.L2_TEX_HITS not in m:
            continue
        hr = hit_rate(m[Metric.L2_TEX_HITS], m[Metric.L2_TEX_MISSES])
        out.append(dict(study=study or (rows[0]["study"] if rows else ""), order=c["order"],
                        S=c["S_q"], ctas=n, hit_rate_pct=100 * hr,
                        one_minus_1_over_n_pct=100 * (1 - 1 / n),
                        diff_pp=100 * (hr - (1 - 1 / n))))
    return out


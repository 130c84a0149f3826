"""Section 1, L1 pass-through: the L1 hit fraction per S and persistent CTA count of the CUDA
kernel (l1l2 study), and the L1 sectors of the cuTile kernels (sawtooth study), whose TMA loads
bypass L1: the L2 sees every load, so the wavefront argument is about the L2 alone."""
from __future__ import annotations

from analysis.data.rows import as_case, persistent_ctas, pivot
from spec.records import Metric


def l1_passthrough(l1l2_rows: list[dict], sawtooth_rows: list[dict] = ()) -> list[dict]:
    """L1 hit fraction per (S, CTAs) of the CUDA kernel, then the cuTile cases' L1 sectors."""
    out = []
    for k, m in sorted(pivot(l1l2_rows).items(),
                       key=lambda kv: (kv[0][9], persistent_ctas(kv[0][3]) or 0)):
        c = as_case(k)
        if Metric.L1_SECTORS not in m:
            continue
        l1, hit = m[Metric.L1_SECTORS], m.get(Metric.L1_HITS, float("nan"))
        out.append(dict(kernel=c["backend"], S=c["S_q"], ctas=persistent_ctas(c["schedule"]),
                        order=c["order"], causal=c["causal"], l1_sectors=l1, l1_hits=hit,
                        l1_hit_pct=100.0 * hit / l1 if l1 else float("nan"),
                        l2_tex_over_l1=m.get(Metric.L2_TEX_SECTORS, float("nan")) / l1
                        if l1 else float("nan")))
    for k, m in sorted(pivot(sawtooth_rows).items()):
        c = as_case(k)
        if c["backend"] != "cutile" or Metric.L1_SECTORS not in m:
            continue
        out.append(dict(kernel=c["variant"], S=c["S_q"], ctas=persistent_ctas(c["schedule"]),
                        order=c["order"], causal=c["causal"], l1_sectors=m[Metric.L1_SECTORS],
                        l1_hits=m.get(Metric.L1_HITS, float("nan")),
                        l1_hit_pct=float("nan"), l2_tex_over_l1=float("nan")))
    return out


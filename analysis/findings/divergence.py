"""Section 3, divergence: L2 misses over the cold-miss line per S and order where K+V per head
crosses the L2, the wave model's effective capacity ``C_eff`` fitted per order
(``analysis.models.wave.fit_c_eff_rows``) with its interval and residuals against the nominal L2,
and the cross-partition (``lts__t_sectors_srcunit_ltcfabric*``) share of L2 sectors and misses.
``ceff_fits`` is also what figure F5 draws."""
from __future__ import annotations

import numpy as np

from analysis.data.rows import as_case, persistent_ctas, pivot, problem_tiles
from analysis.models.traffic import MiB, cold_misses
from analysis.models.wave import CEffFit, fit_c_eff_rows
from spec.records import Metric

L2_FABRIC = "lts__t_sectors_srcunit_ltcfabric.sum"
L2_FABRIC_MISSES = "lts__t_sectors_srcunit_ltcfabric_lookup_miss.sum"


def divergence_points(div_rows: list[dict], l2_bytes: int) -> list[dict]:
    """Per order and S: misses, cold, misses/cold, K+V per head / nominal L2, fabric shares."""
    out = []
    for k, m in sorted(pivot(div_rows).items(), key=lambda kv: (kv[0][2], kv[0][9])):
        c = as_case(k)
        if Metric.L2_TEX_MISSES not in m:
            continue
        cold = cold_misses(*problem_tiles(c))
        kv_bytes = 2 * c["S_kv"] * c["D"] * 2
        miss = m[Metric.L2_TEX_MISSES]
        out.append(dict(order=c["order"], S=c["S_q"], kv_over_l2=kv_bytes / l2_bytes,
                        misses=miss, cold=cold, misses_over_cold=miss / cold,
                        fabric_sector_pct=100.0 * m.get(L2_FABRIC, float("nan"))
                        / m.get(Metric.L2_SECTORS, float("nan")),
                        fabric_miss_pct=100.0 * m.get(L2_FABRIC_MISSES, float("nan")) / miss))
    return out


def ceff_fits(rows: list[dict]) -> dict[tuple[str, str], CEffFit | str]:
    """The wave model's least-squares ``C_eff`` per (order, source) of the non-causal L2-miss rows
    of a persistent schedule with at least two S values; a string says why a group has no fit."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if r["metric"] == Metric.L2_TEX_MISSES and not r["causal"]:
            groups.setdefault((r["order"], r["source"]), []).append(r)
    fits: dict[tuple[str, str], CEffFit | str] = {}
    for key, grp in sorted(groups.items()):
        P = persistent_ctas(grp[0]["schedule"])
        if not P or len({r["S_q"] for r in grp}) < 2:
            continue
        try:
            fits[key] = fit_c_eff_rows(grp, P=P)
        except ValueError as e:          # rows that mix cases: no fit
            fits[key] = str(e)
    return fits


def divergence_fits(div_rows: list[dict], l2_bytes: int) -> list[dict]:
    """The wave model's C_eff per order (``ceff_fits`` of the measured rows), with its interval,
    MAPE and the largest relative residual, against the nominal L2."""
    out = []
    for (order, source), fit in ceff_fits(div_rows).items():
        if source != "measured" or isinstance(fit, str):
            continue
        P = persistent_ctas(next(r["schedule"] for r in div_rows if r["order"] == order))
        lo, hi = fit.interval_bytes
        out.append(dict(order=order, ctas=P, c_eff_mib=fit.c_eff_mib, interval_lo_mib=lo / MiB,
                        interval_hi_mib=hi / MiB, nominal_l2_mib=l2_bytes / MiB,
                        c_eff_over_l2=fit.c_eff_bytes / l2_bytes, mape_pct=fit.mape,
                        max_abs_resid_pct=float(np.max(np.abs(fit.rel_residuals))) * 100,
                        resid_pct=" ".join(f"{100 * x:+.0f}" for x in fit.rel_residuals)))
    return out

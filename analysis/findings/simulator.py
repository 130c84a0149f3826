"""Section 7, simulator vs measured: the LRU stack-distance simulator (``spec.build_trace`` +
``analysis.cache.reuse``) on the cases a committed run measured, one effective capacity fitted by
least squares (relative errors) over the non-causal CUDA cases, and the per-case error.

Rows in, rows out. ``run_cases`` rebuilds the cases of a run from what the run carries (its
``profile_plan.json`` where present, else the variant columns of its rows, in the order of the
manifest's ``parameters.cases``); resident CTAs are P for a persistent schedule and
``arch.resident_ctas(occupancy)`` for grid and tile-X launches, as the study registry plans them.
``measured_cases`` pairs them with their measured misses; ``simulator_vs_measured`` returns one
row per case and the capacity fit.

One stack-distance pass per case gives the exact miss-ratio curve (misses at every capacity), so
the capacity fit costs nothing once the curves exist. Cases of more than ``max_accesses`` trace
accesses are simulated at B = 1 and B = 2 and extrapolated linearly in B
(``m(B) = m1 + (B - 1)·(m2 - m1)``: every extra head adds what the second one added, exact when
heads do not share waves, and an approximation for persistent q-major schedules whose waves
straddle two heads); the CUDA batch cases, simulated directly at every B, check that assumption
(the ``extrap_err_%`` column). Curves are cached (``cache_dir``, never inside the repository).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from analysis.cache import reuse
from analysis.calibration.measured import case_key, case_of_row, measured_ctas_per_sm
from analysis.data import DatasetError, read_manifest
from analysis.data.rows import as_case, pct_change, pivot
from analysis.models.traffic import MiB, cold_misses
from spec import Arch, Backend, Case, TileGrid, build_trace, case_from_dict
from spec.records import Metric, data_path, read_bytes


# --------------------------------------------------------------------------------------------
# the cases of a run
# --------------------------------------------------------------------------------------------
def run_cases(run_dir: Path, rows: Sequence[dict], arch: Arch, study: str) -> list[Case]:
    """The cases of a run in plan order: ``profile_plan.json`` where the run has one, else rebuilt
    from its rows (``case_of_row``), with the resident CTAs of the builds the run measured
    (``analysis.calibration.measured.measured_ctas_per_sm``) in place of the plan's request; ordered
    as the manifest's ``parameters.cases`` lists them (first appearance in the rows when the
    manifest has no list)."""
    plan = data_path(Path(run_dir), "profile_plan.json")
    by_id: dict[str, Case] = {}
    if plan is not None:
        try:
            for d in json.loads(read_bytes(plan))["cases"]:
                c = case_from_dict(d)
                by_id[c.id] = c
        except (OSError, EOFError, ValueError, KeyError, TypeError) as e:
            raise DatasetError(f"{plan}: not a readable profile plan ({type(e).__name__}); "
                               f"restore it from git or re-run the study") from None
    per_sm = measured_ctas_per_sm(run_dir)
    done: set[tuple] = set()
    for r in rows:
        key = case_key(r)
        if key in done:                  # one row per metric: the case is built once
            continue
        done.add(key)
        try:
            c = case_of_row(r, arch, study, per_sm.get(key))
        except ValueError as e:
            raise DatasetError(f"{run_dir}: {e}") from None
        if c.id not in by_id:
            by_id[c.id] = c
        elif key in per_sm:              # the plan's resident CTAs were the study's request
            by_id[c.id] = replace(by_id[c.id], resident=c.resident)
    params = read_manifest(run_dir).get("parameters") or {}
    order = params.get("cases") if isinstance(params, dict) else None
    if not isinstance(order, list):
        return list(by_id.values())
    return [by_id[c] for c in order if isinstance(c, str) and c in by_id]


@dataclass
class SimCase:
    """A measured case, its measured misses, and its simulated miss curve(s)."""

    case: Case
    measured: float
    study: str
    direct: reuse.MissRatioCurve | None = None
    b1: reuse.MissRatioCurve | None = None
    b2: reuse.MissRatioCurve | None = None

    @property
    def B(self) -> int:
        return self.case.problem.B

    def misses(self, cap) -> np.ndarray:
        if self.direct is not None:
            return self.direct.misses(cap)
        return extrapolate_b(self.b1.misses(cap), self.b2.misses(cap), self.B)

    def extrapolated(self, cap) -> np.ndarray | None:
        if self.b1 is None or self.b2 is None:
            return None
        return extrapolate_b(self.b1.misses(cap), self.b2.misses(cap), self.B)


def measured_cases(study: str, cases: Sequence[Case], counter_rows: Sequence[dict],
                   filt: Callable[[Case], bool] | None = None) -> list[SimCase]:
    """The cases with a measured ``srcunit_tex`` miss count, each with that count."""
    meas = {(c["variant"], c["B"], c["S_q"], c["causal"]): m.get(Metric.L2_TEX_MISSES)
            for k, m in pivot(counter_rows).items() for c in [as_case(k)]}
    out = []
    for case in cases:
        p = case.problem
        y = meas.get((case.variant.id(p), p.B, p.S_q, p.causal))
        if y and (filt is None or filt(case)):
            out.append(SimCase(case, y, study))
    return out


# --------------------------------------------------------------------------------------------
# simulation
# --------------------------------------------------------------------------------------------
def case_curve(case: Case, arch: Arch, cache_dir: Path | None,
               B: int | None = None) -> tuple[reuse.MissRatioCurve, int]:
    """The miss-ratio curve of a case (at batch ``B`` if given) and its trace length."""
    prob = case.problem if B is None else replace(case.problem, B=B)
    v = case.variant
    key = f"{arch.name}|{v.id(prob)}|{prob.label}|{case.resident}|{arch.sector_bytes}|v1"
    path = None
    if cache_dir is not None:
        path = cache_dir / (hashlib.sha1(key.encode()).hexdigest()[:20] + ".npz")
        if path.exists():
            z = np.load(path)
            return (reuse.MissRatioCurve(z["need"].astype(np.int64),
                                         z["hits_upto"].astype(np.int64), int(z["total"]),
                                         int(z["cold"])), int(z["n"]))
    trace = build_trace(TileGrid(prob, v.tiles), v.schedule, v.order, case.resident,
                        sector_bytes=arch.sector_bytes)
    n = int(trace.n_accesses)
    dist = reuse.stack_distances(trace.key, trace.key_sectors)
    curve = reuse.miss_ratio_curve(dist, trace.key, trace.key_sectors)
    del dist, trace
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.stem + f".{os.getpid()}.tmp.npz")
        np.savez(tmp, need=curve.need, hits_upto=curve.hits_upto, total=curve.total,
                 cold=curve.cold, n=n)
        os.replace(tmp, path)
    return curve, n


def trace_accesses(case: Case) -> int:
    """Accesses of a case's trace (Q, K, V, O tile accesses) without building it."""
    g = TileGrid(case.problem, case.variant.tiles)
    per_head = 2 * g.n_q + 2 * int(np.sum(g.kv_tiles_for(np.arange(g.n_q))))
    return g.n_bh * per_head


def extrapolate_b(m1, m2, B: int):
    """Misses at batch B from those at B = 1 and 2: ``m1 + (B - 1)·(m2 - m1)``."""
    return np.asarray(m1) + (B - 1) * (np.asarray(m2) - np.asarray(m1))


def fit_capacity(cases: Sequence[SimCase], lo_bytes: float, hi_bytes: float,
                 sector_bytes: int = 32, grid: int = 2049) -> dict:
    """One capacity for all ``cases``: least squares of the relative errors (sim − meas)/meas,
    a grid over [lo, hi] refined with ``scipy.optimize.minimize_scalar``. Returns the capacity,
    the relative RMS error there and the range of capacities whose RMS is within 1.1× the best."""
    from scipy import optimize
    y = np.array([c.measured for c in cases], dtype=float)

    def sse(cap_bytes) -> np.ndarray:
        caps = np.atleast_1d(np.asarray(cap_bytes, dtype=float)) // sector_bytes
        pred = np.stack([np.asarray(c.misses(caps), dtype=float) for c in cases], axis=1)
        return (((pred - y[None, :]) / y[None, :]) ** 2).sum(axis=1)

    cs = np.linspace(lo_bytes, hi_bytes, grid)
    e = sse(cs)
    i = int(np.argmin(e))
    a, b = cs[max(i - 1, 0)], cs[min(i + 1, grid - 1)]
    res = optimize.minimize_scalar(lambda c: float(sse(c)[0]), bounds=(a, b), method="bounded")
    if res.fun <= e[i]:
        best, best_e = float(res.x), float(res.fun)
    else:
        best, best_e = float(cs[i]), float(e[i])
    near = cs[np.sqrt(e / len(y)) <= 1.1 * math.sqrt(best_e / len(y))]
    return dict(capacity_bytes=best, rel_rms_pct=100 * math.sqrt(best_e / len(y)),
                within_10pct_lo=float(near.min()) if len(near) else best,
                within_10pct_hi=float(near.max()) if len(near) else best, n_cases=len(y))


def simulator_vs_measured(sims: Sequence[SimCase], arch: Arch, *, cache_dir: Path | None,
                          max_accesses: int = 180_000_000,
                          log=print) -> tuple[list[dict], dict]:
    """Per-case simulated misses at the fitted capacity and at the nominal L2, and the fit."""
    t0 = time.perf_counter()
    for sc in sims:
        n = trace_accesses(sc.case)
        if n <= max_accesses:
            sc.direct, _ = case_curve(sc.case, arch, cache_dir)
        if sc.B > 1 and (sc.direct is None or sc.case.variant.backend == Backend.CUDA):
            sc.b1, _ = case_curve(sc.case, arch, cache_dir, B=1)
            sc.b2, _ = case_curve(sc.case, arch, cache_dir, B=2)
        log(f"  simulated {sc.case.id} ({n / 1e6:.0f} M accesses"
            f"{'' if sc.direct is not None else ', from B=1,2'}) {time.perf_counter() - t0:.0f} s")
    fit_set = [s for s in sims if s.case.variant.backend == Backend.CUDA
               and not s.case.problem.causal]
    if not fit_set:
        return [], {}
    fit = fit_capacity(fit_set, 0.05 * arch.l2_bytes, 2.0 * arch.l2_bytes, arch.sector_bytes)
    cap = fit["capacity_bytes"] // arch.sector_bytes
    nom = arch.l2_bytes // arch.sector_bytes
    fit.update(nominal_l2_mib=arch.l2_bytes / MiB, capacity_mib=fit["capacity_bytes"] / MiB,
               capacity_over_l2=fit["capacity_bytes"] / arch.l2_bytes)
    out = []
    for s in sims:
        m_fit, m_nom = float(s.misses(cap)), float(s.misses(nom))
        cold = cold_misses(s.case.problem, s.case.variant.tiles, arch.sector_bytes)
        ex = s.extrapolated(cap) if s.direct is not None else None
        extrap_err = pct_change(float(ex), m_fit) if ex is not None else float("nan")
        out.append(dict(study=s.study, case=s.case.id, in_fit=s in fit_set,
                        how="direct" if s.direct is not None else "B=1,2 extrapolated",
                        measured=s.measured, sim_fit=m_fit,
                        err_fit_pct=pct_change(m_fit, s.measured),
                        sim_nominal=m_nom, err_nominal_pct=pct_change(m_nom, s.measured),
                        noncomp_measured=s.measured - cold, noncomp_sim_fit=m_fit - cold,
                        extrap_err_pct=extrap_err))
    return out, fit


def sim_order_changes(sim_rows: list[dict]) -> list[dict]:
    """Sawtooth vs linear change in misses, measured and simulated at the fitted capacity."""
    by: dict[str, dict[str, dict]] = {}
    for r in sim_rows:
        if r["study"] != "sawtooth":
            continue
        cfg = r["case"].replace(".sawtooth.", ".X.").replace(".linear.", ".X.")
        order = "sawtooth" if ".sawtooth." in r["case"] else "linear"
        by.setdefault(cfg, {})[order] = r
    out = []
    for cfg, d in by.items():
        if set(d) == {"linear", "sawtooth"}:
            saw, lin = d["sawtooth"], d["linear"]
            out.append(dict(case=cfg,
                            measured_change_pct=pct_change(saw["measured"], lin["measured"]),
                            sim_change_pct=pct_change(saw["sim_fit"], lin["sim_fit"])))
    return out

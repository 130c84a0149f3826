"""Every number the findings report (REPORT.md) cites, computed from the committed datasets only.

``python -m analysis.findings --arch h100 [--out DIR] [--no-sim] [--cache DIR]`` reads the tidy
rows under ``profiles/<arch>/<study>-*/`` (no GPU, no ncu), prints one markdown table per section
and, with ``--out``, writes each table as ``<section>.csv`` and all of them as ``findings-<arch>.md``.

Sections (the numbering follows the issue):

0. consistency: ncu collects hits, misses and sectors in different replay passes; per study, how
   far ``hits + misses`` is from ``srcunit_tex`` sectors (a check on the counters themselves).
1. L1 pass-through: L1 hit fraction per S and persistent CTA count (l1l2 study); the L1 sectors
   of the cuTile kernels (sawtooth study: TMA loads bypass L1).
2. Sector-access model error: MAPE of ``analysis.models.sector_accesses`` against L1 sectors,
   ``lts__t_sectors`` and ``srcunit_tex`` sectors (traffic study), and the L2/L1 sector ratio.
3. Divergence: misses over the cold-miss line per S and order, the fitted ``C_eff``
   (``analysis.models.fit_c_eff_rows``) with its interval and residuals vs the nominal L2, and the
   cross-partition (``lts__t_sectors_srcunit_ltcfabric*``) share of L2 sectors and misses.
4. Hit rate vs active CTAs against ``1 - 1/N`` (active-sms study; l1l2 where there is none).
5. Sawtooth vs linear per configuration (sawtooth study): misses, non-compulsory misses, median
   kernel time and TFLOPS with the min..max of the samples; a time difference of the medians
   smaller than the larger min..max range of the two is reported as "no difference".
7. Simulator vs measured: ``spec.build_trace`` + the LRU stack-distance simulator
   (``analysis.reuse``) for the measured sawtooth and divergence cases, one effective capacity
   fitted by least squares (relative errors) over the non-causal CUDA cases, per-case error.

Everything but section 7 is a pure function of tidy rows (dicts from ``spec.records.read_csv``).
Section 7 simulates: one stack-distance pass per case gives the exact miss-ratio curve (misses at
every capacity), so the capacity fit costs nothing once the curves exist. Cases of more than
``max_accesses`` trace accesses are simulated at B = 1 and B = 2 and extrapolated linearly in B
(``m(B) = m1 + (B - 1)·(m2 - m1)``: every extra head adds what the second one added, exact when
heads do not share waves, and an approximation for persistent q-major schedules whose waves
straddle two heads); the CUDA batch cases, simulated directly at every B, check that assumption
(the ``extrap_err_%`` column). Curves are cached (``--cache``, default
``$XDG_CACHE_HOME/sawtooth-findings``, never inside the repository).
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import math
import os
import sys
import time
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from spec.records import Metric, read_csv

from .models import (MiB, Shape, cold_misses, fit_c_eff_rows, mape, sector_accesses)

ROOT = Path(__file__).resolve().parents[1]

L2_FABRIC = "lts__t_sectors_srcunit_ltcfabric.sum"
L2_FABRIC_MISSES = "lts__t_sectors_srcunit_ltcfabric_lookup_miss.sum"
CASE_KEYS = ("variant", "backend", "order", "schedule", "tile_m", "tile_n", "B", "H", "H_kv",
             "S_q", "S_kv", "D", "causal")


# --------------------------------------------------------------------------------------------
# loading and small helpers
# --------------------------------------------------------------------------------------------
def find_study_dir(arch: str, study: str, root: Path = ROOT) -> Path | None:
    """The committed run of ``study`` for ``arch`` (the latest ``profiles/<arch>/<study>-*``)."""
    base = root / "profiles" / arch
    if not base.is_dir():
        return None
    cands = sorted(p for p in base.glob(f"{study}-*")
                   if p.is_dir() and (p / "manifest.json").exists()
                   and p.name[len(study) + 1:][:1].isdigit())
    return cands[-1] if cands else None


def load_study(arch: str, study: str, root: Path = ROOT) -> tuple[list[dict], list[dict], Path | None]:
    """(counter rows, timing rows, run dir) of a committed study; empty lists when absent."""
    d = find_study_dir(arch, study, root)
    if d is None:
        return [], [], None
    c = read_csv(d / "counters.csv") if (d / "counters.csv").exists() else []
    t = read_csv(d / "timing.csv") if (d / "timing.csv").exists() else []
    return c, t, d


def case_key(r: dict) -> tuple:
    return tuple(r[k] for k in CASE_KEYS)


def pivot(rows: Iterable[dict], source: str = "measured") -> dict[tuple, dict[str, float]]:
    """``{case key: {metric: mean value}}`` (repeated rows of a metric are averaged)."""
    acc: dict[tuple, dict[str, list[float]]] = {}
    for r in rows:
        if source and r.get("source") != source:
            continue
        acc.setdefault(case_key(r), {}).setdefault(r["metric"], []).append(float(r["value"]))
    return {k: {m: float(np.mean(v)) for m, v in d.items()} for k, d in acc.items()}


def as_case(k: tuple) -> dict:
    return dict(zip(CASE_KEYS, k))


def resident_of(schedule: str) -> int | None:
    """Persistent CTA count of a schedule label ('static132' -> 132); None otherwise."""
    if schedule.startswith("static") and schedule[6:].isdigit():
        return int(schedule[6:])
    return None


def shape_of(c: dict, S: int | None = None) -> Shape:
    return Shape(S_q=int(S or c["S_q"]), S_kv=int(S or c["S_kv"]), D=int(c["D"]),
                 T_m=int(c["tile_m"]), T_n=int(c["tile_n"]), causal=bool(c["causal"]),
                 B=int(c["B"]), H=int(c["H"]), H_kv=int(c["H_kv"]))


def pct_change(new: float, old: float) -> float:
    return 100.0 * (new - old) / old if old else float("nan")


def median(xs: Sequence[float]) -> float:
    return float(np.median(np.asarray(xs, dtype=np.float64)))


def time_verdict(lin: Sequence[float], saw: Sequence[float]) -> str:
    """"faster"/"slower" (sawtooth vs linear) when the medians differ by more than the larger
    min..max range of the two sample sets, else "no difference"."""
    if not len(lin) or not len(saw):
        return "not measured"
    d = median(saw) - median(lin)
    spread = max(max(lin) - min(lin), max(saw) - min(saw))
    if abs(d) <= spread:
        return "no difference"
    return "sawtooth faster" if d < 0 else "sawtooth slower"


def hit_rate(hits: float, misses: float) -> float:
    """Hit rate from the counts (``lts__t_sector_hit_rate.pct`` mixes in writes)."""
    t = hits + misses
    return hits / t if t else float("nan")


# --------------------------------------------------------------------------------------------
# sections (pure functions of rows)
# --------------------------------------------------------------------------------------------
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


def l1_passthrough(l1l2_rows: list[dict], sawtooth_rows: list[dict] = ()) -> list[dict]:
    """L1 hit fraction per (S, CTAs) of the CUDA kernel, then the cuTile cases' L1 sectors."""
    out = []
    for k, m in sorted(pivot(l1l2_rows).items(), key=lambda kv: (kv[0][9], resident_of(kv[0][3]) or 0)):
        c = as_case(k)
        if Metric.L1_SECTORS not in m:
            continue
        l1, hit = m[Metric.L1_SECTORS], m.get(Metric.L1_HITS, float("nan"))
        out.append(dict(kernel=c["backend"], S=c["S_q"], ctas=resident_of(c["schedule"]),
                        order=c["order"], causal=c["causal"], l1_sectors=l1, l1_hits=hit,
                        l1_hit_pct=100.0 * hit / l1 if l1 else float("nan"),
                        l2_tex_over_l1=m.get(Metric.L2_TEX_SECTORS, float("nan")) / l1
                        if l1 else float("nan")))
    for k, m in sorted(pivot(sawtooth_rows).items()):
        c = as_case(k)
        if c["backend"] != "cutile" or Metric.L1_SECTORS not in m:
            continue
        out.append(dict(kernel=c["variant"], S=c["S_q"], ctas=resident_of(c["schedule"]),
                        order=c["order"], causal=c["causal"], l1_sectors=m[Metric.L1_SECTORS],
                        l1_hits=m.get(Metric.L1_HITS, float("nan")),
                        l1_hit_pct=float("nan"), l2_tex_over_l1=float("nan")))
    return out


def model_error(traffic_rows: list[dict]) -> list[dict]:
    """MAPE (and the largest error) of the exact sector-access model per mode and counter."""
    out = []
    piv = pivot(traffic_rows)
    for causal in (False, True):
        cases = sorted(((as_case(k), m) for k, m in piv.items() if k[12] == causal),
                       key=lambda cm: cm[0]["S_q"])
        if not cases:
            continue
        pred = np.array([sector_accesses(shape_of(c)).total for c, _ in cases], dtype=float)
        for metric, what in ((Metric.L1_SECTORS, "L1 sectors (loads)"),
                             (Metric.L2_SECTORS, "L2 sectors (lts__t_sectors)"),
                             (Metric.L2_TEX_SECTORS, "L2 sectors from L1TEX (srcunit_tex)")):
            sel = [(p, m[metric]) for p, (c, m) in zip(pred, cases) if m.get(metric, 0) > 0]
            if not sel:
                continue
            p, y = np.array(sel).T
            rel = 100.0 * (p - y) / y
            out.append(dict(mode="causal" if causal else "non-causal", counter=what,
                            mape_pct=mape(p, y), max_abs_err_pct=float(np.max(np.abs(rel))),
                            measured_over_model_min=float(np.min(y / p)),
                            measured_over_model_max=float(np.max(y / p)), points=len(y),
                            S_range=f"{cases[0][0]['S_q']}..{cases[-1][0]['S_q']}"))
    return out


def divergence_points(div_rows: list[dict], l2_bytes: int) -> list[dict]:
    """Per order and S: misses, cold, misses/cold, K+V per head / nominal L2, fabric shares."""
    out = []
    for k, m in sorted(pivot(div_rows).items(), key=lambda kv: (kv[0][2], kv[0][9])):
        c = as_case(k)
        if Metric.L2_TEX_MISSES not in m:
            continue
        cold = cold_misses(shape_of(c))
        kv_bytes = 2 * c["S_kv"] * c["D"] * 2
        miss = m[Metric.L2_TEX_MISSES]
        out.append(dict(order=c["order"], S=c["S_q"], kv_over_l2=kv_bytes / l2_bytes,
                        misses=miss, cold=cold, misses_over_cold=miss / cold,
                        fabric_sector_pct=100.0 * m.get(L2_FABRIC, float("nan"))
                        / m.get(Metric.L2_SECTORS, float("nan")),
                        fabric_miss_pct=100.0 * m.get(L2_FABRIC_MISSES, float("nan")) / miss))
    return out


def divergence_fits(div_rows: list[dict], l2_bytes: int) -> list[dict]:
    """The wave model's C_eff per order (least squares over the S sweep), with its interval,
    MAPE and the largest relative residual, against the nominal L2."""
    out = []
    meas = [r for r in div_rows if r["source"] == "measured"]
    for order in sorted({r["order"] for r in meas}):
        grp = [r for r in meas if r["order"] == order and not r["causal"]]
        P = resident_of(grp[0]["schedule"]) if grp else None
        if not grp or not P:
            continue
        fit = fit_c_eff_rows(grp, P=P)
        lo, hi = fit.interval_bytes
        out.append(dict(order=order, ctas=P, c_eff_mib=fit.c_eff_mib, interval_lo_mib=lo / MiB,
                        interval_hi_mib=hi / MiB, nominal_l2_mib=l2_bytes / MiB,
                        c_eff_over_l2=fit.c_eff_bytes / l2_bytes, mape_pct=fit.mape,
                        max_abs_resid_pct=float(np.max(np.abs(fit.rel_residuals))) * 100,
                        resid_pct=" ".join(f"{100 * x:+.0f}" for x in fit.rel_residuals)))
    return out


def hit_vs_active(rows: list[dict], study: str = "") -> list[dict]:
    """Measured L2 hit rate (hits / (hits + misses)) per order, S and persistent CTA count N,
    beside the wavefront prediction 1 - 1/N."""
    out = []
    for k, m in sorted(pivot(rows).items(),
                       key=lambda kv: (kv[0][2], kv[0][9], resident_of(kv[0][3]) or 0)):
        c = as_case(k)
        n = resident_of(c["schedule"])
        if not n or Metric.L2_TEX_HITS not in m:
            continue
        hr = hit_rate(m[Metric.L2_TEX_HITS], m[Metric.L2_TEX_MISSES])
        out.append(dict(study=study or (rows[0]["study"] if rows else ""), order=c["order"],
                        S=c["S_q"], ctas=n, hit_rate_pct=100 * hr,
                        one_minus_1_over_n_pct=100 * (1 - 1 / n),
                        diff_pp=100 * (hr - (1 - 1 / n))))
    return out


def _config(c: dict) -> str:
    mode = "causal" if c["causal"] else "non-causal"
    return f"{c['backend']} {c['schedule']} {c['tile_m']}x{c['tile_n']} B={c['B']} {mode}"


def sawtooth_vs_linear(counter_rows: list[dict], timing_rows: list[dict]) -> list[dict]:
    """One row per configuration with a linear and a sawtooth variant: misses, non-compulsory
    misses, median kernel time and TFLOPS (min..max of the samples) and the verdict on time."""
    piv = pivot(counter_rows)
    times: dict[tuple, list[float]] = {}
    for r in timing_rows:
        if r["source"] == "measured" and r["metric"] == Metric.KERNEL_TIME_MS and r["value"] > 0:
            times.setdefault(case_key(r), []).append(float(r["value"]))
    configs: dict[tuple, dict[str, tuple]] = {}
    for k in set(piv) | set(times):
        c = as_case(k)
        if c["order"] not in ("linear", "sawtooth"):
            continue
        rest = tuple(v for n, v in zip(CASE_KEYS, k) if n not in ("variant", "order"))
        configs.setdefault(rest, {})[c["order"]] = k
    out = []
    for rest, ks in sorted(configs.items(), key=lambda kv: _config(as_case(next(iter(kv[1].values()))))):
        if set(ks) != {"linear", "sawtooth"}:
            continue
        kl, ksw = ks["linear"], ks["sawtooth"]
        c = as_case(kl)
        flops = _flops(c)
        row = dict(config=_config(c), S=c["S_q"])
        ml, ms = piv.get(kl, {}), piv.get(ksw, {})
        for name, metric in (("misses", Metric.L2_TEX_MISSES),
                             ("noncomp", Metric.NONCOMPULSORY_MISSES)):
            a, b = ml.get(metric, float("nan")), ms.get(metric, float("nan"))
            row.update({f"{name}_linear": a, f"{name}_sawtooth": b,
                        f"{name}_change_pct": pct_change(b, a)})
        tl, ts = times.get(kl, []), times.get(ksw, [])
        for name, t in (("linear", tl), ("sawtooth", ts)):
            row.update({f"ms_{name}": median(t) if t else float("nan"),
                        f"ms_{name}_min": min(t) if t else float("nan"),
                        f"ms_{name}_max": max(t) if t else float("nan"),
                        f"tflops_{name}": flops / (median(t) * 1e-3) / 1e12 if t else float("nan"),
                        f"n_{name}": len(t)})
        for name in ("linear", "sawtooth"):            # L2-miss traffic per second, GB/s
            row[f"miss_GBps_{name}"] = row[f"misses_{name}"] * 32 / row[f"ms_{name}"] / 1e6
        row["time_change_pct"] = pct_change(row["ms_sawtooth"], row["ms_linear"])
        row["time_verdict"] = time_verdict(tl, ts)
        out.append(row)
    return out


def _flops(c: dict) -> float:
    f = 4.0 * c["B"] * c["H"] * c["S_q"] * c["S_kv"] * c["D"]
    return f / 2 if c["causal"] else f


def peers(timing_rows: list[dict]) -> list[dict]:
    """Median TFLOPS (min..max) of the SDPA peers timed in the same run, per problem."""
    acc: dict[tuple, list[float]] = {}
    for r in timing_rows:
        if r["backend"].startswith("sdpa") and r["metric"] == Metric.KERNEL_TIME_MS and r["value"] > 0:
            acc.setdefault(case_key(r), []).append(float(r["value"]))
    out = []
    for k, t in sorted(acc.items(), key=lambda kv: (kv[0][1], kv[0][6], kv[0][12])):
        c = as_case(k)
        f = _flops(c)
        out.append(dict(peer=c["backend"], B=c["B"], S=c["S_q"], causal=c["causal"],
                        ms=median(t), tflops=f / (median(t) * 1e-3) / 1e12,
                        tflops_min=f / (max(t) * 1e-3) / 1e12,
                        tflops_max=f / (min(t) * 1e-3) / 1e12, n=len(t)))
    return out


# --------------------------------------------------------------------------------------------
# section 7: simulator vs measured
# --------------------------------------------------------------------------------------------
class Curve:
    """An LRU miss-ratio curve in sectors (``analysis.reuse.MissRatioCurve`` arrays)."""

    def __init__(self, need, hits_upto, total, cold):
        self.need = np.asarray(need, dtype=np.int64)
        self.hits_upto = np.asarray(hits_upto, dtype=np.int64)
        self.total, self.cold = int(total), int(cold)

    def misses(self, cap_sectors) -> np.ndarray:
        cap = np.asarray(cap_sectors)
        idx = np.searchsorted(self.need, cap, side="right") - 1
        hits = np.where(idx >= 0, self.hits_upto[np.maximum(idx, 0)] if len(self.need) else 0, 0)
        return self.total - hits


def case_curve(case, arch, cache_dir: Path | None, B: int | None = None) -> tuple[Curve, int]:
    """The miss-ratio curve of a study case (at batch ``B`` if given) and its trace length."""
    from dataclasses import replace

    from spec import TileGrid, build_trace

    from . import reuse
    prob = case.problem if B is None else replace(case.problem, B=B)
    v = case.variant
    key = f"{arch.name}|{v.id(prob)}|{prob.label}|{case.resident}|{arch.sector_bytes}|v1"
    path = None
    if cache_dir is not None:
        path = cache_dir / (hashlib.sha1(key.encode()).hexdigest()[:20] + ".npz")
        if path.exists():
            z = np.load(path)
            return Curve(z["need"], z["hits_upto"], z["total"], z["cold"]), int(z["n"])
    trace = build_trace(TileGrid(prob, v.tiles), v.schedule, v.order, case.resident,
                        sector_bytes=arch.sector_bytes)
    n = int(trace.n_accesses)
    dist = reuse.stack_distances(trace.key, trace.key_sectors)
    mrc = reuse.miss_ratio_curve(dist, trace.key, trace.key_sectors)
    del dist, trace
    curve = Curve(mrc.need, mrc.hits_upto, mrc.total, mrc.cold)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.stem + f".{os.getpid()}.tmp.npz")
        np.savez(tmp, need=curve.need, hits_upto=curve.hits_upto, total=curve.total,
                 cold=curve.cold, n=n)
        os.replace(tmp, path)
    return curve, n


def trace_accesses(case) -> int:
    """Accesses of a case's trace (Q, K, V, O tile accesses) without building it."""
    s = Shape.of(case.problem, case.variant.tiles)
    per_head = 2 * s.n_q + 2 * int(s.kv_tiles_for(np.arange(s.n_q)).sum())
    return s.B * s.H * per_head


class SimCase:
    """A measured case, its measured misses, and its simulated miss curve(s)."""

    def __init__(self, case, measured: float, panel: str, study: str):
        self.case, self.measured, self.panel, self.study = case, measured, panel, study
        self.direct: Curve | None = None
        self.b1: Curve | None = None
        self.b2: Curve | None = None

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
    best, best_e = (float(res.x), float(res.fun)) if res.fun <= e[i] else (float(cs[i]), float(e[i]))
    near = cs[np.sqrt(e / len(y)) <= 1.1 * math.sqrt(best_e / len(y))]
    return dict(capacity_bytes=best, rel_rms_pct=100 * math.sqrt(best_e / len(y)),
                within_10pct_lo=float(near.min()) if len(near) else best,
                within_10pct_hi=float(near.max()) if len(near) else best, n_cases=len(y))


def simulator_vs_measured(arch_name: str, *, cache_dir: Path | None, max_accesses: int = 180_000_000,
                          studies: Sequence[str] = ("sawtooth", "divergence"), filt=None,
                          log=print) -> tuple[list[dict], dict]:
    """Section 7: per-case simulated misses at the fitted capacity and at the nominal L2."""
    from experiments.studies import get_study
    from spec import get_arch
    arch = get_arch(arch_name)
    sims: list[SimCase] = []
    for study in studies:
        rows, _, _ = load_study(arch_name, study)
        piv = pivot(rows)
        meas = {(k[0], k[6], k[9], k[12]): m.get(Metric.L2_TEX_MISSES) for k, m in piv.items()}
        for case in get_study(study).plan(arch):
            p = case.problem
            y = meas.get((case.variant.id(p), p.B, p.S_q, p.causal))
            if y and (filt is None or filt(case)):
                sims.append(SimCase(case, y, case.panel, study))
    t0 = time.perf_counter()
    for sc in sims:
        n = trace_accesses(sc.case)
        if n <= max_accesses:
            sc.direct, _ = case_curve(sc.case, arch, cache_dir)
        if sc.B > 1 and (sc.direct is None or sc.case.variant.backend.value == "cuda"):
            sc.b1, _ = case_curve(sc.case, arch, cache_dir, B=1)
            sc.b2, _ = case_curve(sc.case, arch, cache_dir, B=2)
        log(f"  simulated {sc.case.id} ({n / 1e6:.0f} M accesses"
            f"{'' if sc.direct is not None else ', from B=1,2'}) {time.perf_counter() - t0:.0f} s")
    fit_set = [s for s in sims if s.case.variant.backend.value == "cuda" and not s.case.problem.causal]
    if not fit_set:
        return [], {}
    fit = fit_capacity(fit_set, 0.05 * arch.l2_bytes, 2.0 * arch.l2_bytes, arch.sector_bytes)
    cap = fit["capacity_bytes"] // arch.sector_bytes
    nom = arch.l2_bytes // arch.sector_bytes
    fit.update(nominal_l2_mib=arch.l2_bytes / MiB, capacity_mib=fit["capacity_bytes"] / MiB,
               capacity_over_l2=fit["capacity_bytes"] / arch.l2_bytes)
    out = []
    for s in sims:
        p = s.case.problem
        m_fit, m_nom = float(s.misses(cap)), float(s.misses(nom))
        cold = cold_misses(Shape.of(p, s.case.variant.tiles))
        ex = s.extrapolated(cap) if s.direct is not None else None
        out.append(dict(study=s.study, case=s.case.id, in_fit=s in fit_set,
                        how="direct" if s.direct is not None else "B=1,2 extrapolated",
                        measured=s.measured, sim_fit=m_fit, err_fit_pct=pct_change(m_fit, s.measured),
                        sim_nominal=m_nom, err_nominal_pct=pct_change(m_nom, s.measured),
                        noncomp_measured=s.measured - cold, noncomp_sim_fit=m_fit - cold,
                        extrap_err_pct=pct_change(float(ex), m_fit) if ex is not None else float("nan")))
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
            out.append(dict(case=cfg,
                            measured_change_pct=pct_change(d["sawtooth"]["measured"], d["linear"]["measured"]),
                            sim_change_pct=pct_change(d["sawtooth"]["sim_fit"], d["linear"]["sim_fit"])))
    return out


# --------------------------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------------------------
def _fmt(v) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if math.isnan(v):
            return "n/a"
        if abs(v) >= 1e6:
            return f"{v / 1e6:.2f}M"
        if abs(v) >= 100:
            return f"{v:.1f}"
        if abs(v) >= 1:
            return f"{v:.2f}"
        return f"{v:.4g}"
    return str(v)


def markdown(rows: list[dict]) -> str:
    if not rows:
        return "(no data)\n"
    cols = list(rows[0])
    for r in rows[1:]:
        cols += [k for k in r if k not in cols]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(_fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_csv(path: Path, rows: list[dict]) -> None:
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)


def compute(arch: str, *, sim: bool = True, cache_dir: Path | None = None,
            max_accesses: int = 180_000_000, log=print) -> dict[str, tuple[str, list[dict]]]:
    """All sections for ``arch``: ``{name: (title, rows)}``."""
    from spec import get_arch
    a = get_arch(arch)
    data = {s: load_study(arch, s) for s in ("sawtooth", "traffic", "divergence", "l1l2",
                                            "active-sms")}
    cnt = {s: d[0] for s, d in data.items()}
    out: dict[str, tuple[str, list[dict]]] = {}
    out["s0_consistency"] = ("0. Counter consistency: (hits + misses) / srcunit_tex sectors",
                             consistency({s: r for s, r in cnt.items() if r}))
    out["s1_l1_passthrough"] = ("1. L1 pass-through (l1l2 study: CUDA; sawtooth study: cuTile)",
                                l1_passthrough(cnt["l1l2"], cnt["sawtooth"]))
    out["s2_model_error"] = ("2. Sector-access model error (traffic study, exact model)",
                             model_error(cnt["traffic"]))
    out["s3_divergence"] = ("3a. Misses vs the cold-miss line, cross-partition share (divergence)",
                            divergence_points(cnt["divergence"], a.l2_bytes))
    out["s3_ceff_fit"] = ("3b. Wave-model C_eff fit per order (divergence)",
                          divergence_fits(cnt["divergence"], a.l2_bytes) if cnt["divergence"] else [])
    hv_src = "active-sms" if cnt["active-sms"] else "l1l2"
    out["s4_hit_vs_active"] = (f"4. L2 hit rate vs active CTAs against 1 - 1/N ({hv_src} study)",
                               hit_vs_active(cnt[hv_src], hv_src))
    out["s5_sawtooth_vs_linear"] = ("5. Sawtooth vs linear per configuration (sawtooth study)",
                                    sawtooth_vs_linear(cnt["sawtooth"], data["sawtooth"][1]))
    out["s5_peers"] = ("5b. SDPA peers timed in the same run (sawtooth study)",
                       peers(data["sawtooth"][1]))
    if sim:
        log("section 7: simulating the measured sawtooth and divergence cases ...")
        rows, fit = simulator_vs_measured(arch, cache_dir=cache_dir, max_accesses=max_accesses,
                                          log=log)
        out["s7_capacity_fit"] = ("7a. One effective LRU capacity fitted to the non-causal CUDA "
                                  "cases (relative least squares)", [fit] if fit else [])
        out["s7_sim_vs_measured"] = ("7b. Simulator vs measured L2 misses per case", rows)
        out["s7_order_change"] = ("7c. Sawtooth vs linear change in misses, measured vs simulated",
                                  sim_order_changes(rows))
    return out


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sawtooth-findings"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.findings",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, help="h100 or h200 (committed profiles/<arch>/)")
    ap.add_argument("--out", type=Path, help="write <section>.csv and findings-<arch>.md here")
    ap.add_argument("--no-sim", action="store_true", help="skip section 7 (the simulator)")
    ap.add_argument("--cache", type=Path, default=None,
                    help="miss-curve cache (default $XDG_CACHE_HOME/sawtooth-findings)")
    ap.add_argument("--no-cache", action="store_true", help="do not read or write the cache")
    ap.add_argument("--max-accesses", type=int, default=180_000_000,
                    help="simulate larger cases from B=1,2 (default 180M trace accesses)")
    a = ap.parse_args(argv)
    if not (ROOT / "profiles" / a.arch).is_dir():
        print(f"error: no committed data under profiles/{a.arch}/", file=sys.stderr)
        return 2
    cache = None if a.no_cache else (a.cache or default_cache())
    if cache is not None and ROOT in cache.resolve().parents:
        print("error: --cache must be outside the repository", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    sections = compute(a.arch, sim=not a.no_sim, cache_dir=cache, max_accesses=a.max_accesses,
                       log=log)
    md = [f"# Findings for {a.arch} (python -m analysis.findings --arch {a.arch})\n"]
    for name, (title, rows) in sections.items():
        md.append(f"## {title}\n\n{markdown(rows)}")
    text = "\n".join(md)
    print(text)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        for name, (_, rows) in sections.items():
            write_csv(a.out / f"{name}.csv", rows)
        (a.out / f"findings-{a.arch}.md").write_text(text)
    log(f"done in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

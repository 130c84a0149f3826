"""Every number the findings report (REPORT.md) cites, computed from the committed datasets only.

``python -m analysis.findings --arch h100 [--out DIR] [--no-sim] [--cache DIR]`` reads the tidy
rows under ``profiles/<arch>/`` (no GPU, no ncu), prints one markdown table per section and, with
``--out``, writes each table as ``<section>.csv`` and all of them as ``findings-<arch>.md``.

Which directories are read. A committed run is ``profiles/<arch>/<study>-<stamp>[-r<N>]`` with a
``manifest.json``; the stamp starts with a digit, so ``longseq-profile-20261121`` is the study
``longseq-profile`` and never a run of ``longseq``. ``-r<N>`` is the N-th independent repeat of the
run ``<study>-<stamp>`` (repeat 1, label r1). Single-run sections read **repeat 1 of the latest
stamp** (``find_study_dir``), and say so in their titles; only section 5c (and the extra rows of
section 0) read the repeats, each run on its own, never pooled. ``ARTIFACT_DIRS``
(``longseq-forloop-spill-20261121``: a build that spilled, see its README.md) are never loaded as
datasets; section 9b reads that one by its explicit path.

Sections (the numbering follows the issue; printed in this order, 7 only without ``--no-sim``):

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
5. Sawtooth vs linear per configuration (sawtooth study, run r1): misses, non-compulsory
   misses, median kernel time and TFLOPS with the min..max of the samples; a time difference of the
   medians smaller than the larger min..max range of the two is reported as "no difference".
   5b: the SDPA peers timed in the same run (r1).
   5c, repeats: per configuration (panel × problem) and quantity (misses, non-compulsory misses,
   median time), the sawtooth-vs-linear % change in every run r1, r2, ..., with mean, min, max.
   Verdict rule (``repeat_verdict``): noise = the larger run-to-run range (max − min over the runs)
   of the linear and the sawtooth values, in % of the linear mean (the scale of the change); the
   change is reported ("sawtooth fewer/more", "sawtooth faster/slower") only if (a) there are at
   least two runs, (b) every run's change has the same sign, (c) the smallest |change| exceeds the
   noise, and, for time, (d) every run's own samples show it (``time_verdict``: the medians differ
   by more than the larger min..max range of the two sample sets, in that direction). Anything
   else is "no difference". (c) makes a change count only if it survives the worst run-to-run
   drift of either twin; (d) adds the within-run sample spread for time.
6. CTA drift (``drift`` run, ``python -m cuda_baseline.drift``): per case the median step, the
   start-time spread over the CTAs in steps after one work item (the sampled step nearest
   ``n_kv``) and at most (over the sampled steps), that maximum as K/V bytes
   (``cuda_baseline.drift.kv_tile_bytes`` per step) beside the L2 size.
7. Simulator vs measured: ``spec.build_trace`` + the LRU stack-distance simulator
   (``analysis.reuse``) for the measured sawtooth (run r1) and divergence cases, one effective
   capacity fitted by least squares (relative errors) over the non-causal CUDA cases, per-case
   error.
8. Best configuration at long S (``longseq`` run): per (D, causal) the best study kernel by
   median TFLOPS, the best sawtooth-order and the best linear one, beside cuDNN and flash from the
   same run, and whether the two bests differ by more than the sample spread.
9. DRAM: 9a per profiled case of ``longseq-profile`` the DRAM bytes read, achieved bandwidth, share
   of the datasheet peak (``DRAM_PEAK_BYTES_PER_S``) and the bandwidth bound on what reading fewer
   bytes could save; 9b the for-loop spill artifact against the fixed build; 9c the bound of 9a
   for the sawtooth-study kernels (run r1).

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
import re
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
RUN_DIR = r"(?P<stamp>\d[0-9A-Za-z]*)(?:-r(?P<rep>\d+))?"
"""A committed run directory is ``<study>-<stamp>[-r<N>]``: the stamp starts with a digit (so
``longseq-profile-20261121`` is a run of the study ``longseq-profile``, not of ``longseq``), and
``-r<N>`` marks the N-th independent repeat of the run ``<study>-<stamp>`` (which is repeat 1)."""

ARTIFACT_DIRS = {
    "longseq-forloop-spill-20261121":
        "code-generation artifact (the linear for-loop builds spilled; its README.md): read only by "
        "section 9b through its explicit path, never as a dataset",
}
"""Directories under ``profiles/<arch>/`` that the loaders never return, whatever study is asked
for. (The stamp rule alone already keeps ``longseq-forloop-spill-*`` out of ``longseq``; this list
also keeps it out if it is ever asked for by its own name, e.g. as study ``longseq-forloop-spill``.)"""

SPILL_ARTIFACT = "longseq-forloop-spill-20261121"


def find_study_runs(arch: str, study: str, root: Path = ROOT) -> list[Path]:
    """All repeats of the latest committed run of ``study`` for ``arch``, in repeat order:
    ``profiles/<arch>/<study>-<stamp>`` (r1), ``-r2``, ``-r3``, ... of the latest stamp (each with a
    ``manifest.json``). Empty when there is none."""
    base = root / "profiles" / arch
    if not base.is_dir():
        return []
    pat = re.compile(re.escape(study) + "-" + RUN_DIR)
    by_stamp: dict[str, list[tuple[int, Path]]] = {}
    for p in base.iterdir():
        m = pat.fullmatch(p.name)
        if m is None or p.name in ARTIFACT_DIRS or not p.is_dir() \
                or not (p / "manifest.json").exists():
            continue
        by_stamp.setdefault(m["stamp"], []).append((int(m["rep"] or 1), p))
    if not by_stamp:
        return []
    return [p for _, p in sorted(by_stamp[max(by_stamp)])]


def find_study_dir(arch: str, study: str, root: Path = ROOT) -> Path | None:
    """The committed run of ``study`` that single-run sections read: repeat 1 (the directory without
    ``-r<N>``) of the latest stamp. Repeats are read only where a section says so (5c, 0)."""
    runs = find_study_runs(arch, study, root)
    return runs[0] if runs else None


def read_run(d: Path) -> tuple[list[dict], list[dict]]:
    """(counter rows, timing rows) of one run directory; empty lists for absent files."""
    c = read_csv(d / "counters.csv") if (d / "counters.csv").exists() else []
    t = read_csv(d / "timing.csv") if (d / "timing.csv").exists() else []
    return c, t


def load_study(arch: str, study: str, root: Path = ROOT) -> tuple[list[dict], list[dict], Path | None]:
    """(counter rows, timing rows, run dir) of repeat 1 of a committed study; empty when absent."""
    d = find_study_dir(arch, study, root)
    if d is None:
        return [], [], None
    return (*read_run(d), d)


def load_study_runs(arch: str, study: str,
                    root: Path = ROOT) -> list[tuple[str, list[dict], list[dict]]]:
    """``[(label, counter rows, timing rows)]`` for every repeat, labelled r1, r2, ..."""
    return [(f"r{i}", *read_run(d)) for i, d in enumerate(find_study_runs(arch, study, root), 1)]


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
# section 5c: sawtooth vs linear across repeated runs
# --------------------------------------------------------------------------------------------
_WITHIN = {"no difference": "=", "sawtooth faster": "-", "sawtooth slower": "+", "not measured": "?"}


def repeat_verdict(changes_pct: Sequence[float], lin: Sequence[float], saw: Sequence[float],
                   within: Sequence[str] | None = None,
                   words: tuple[str, str] = ("sawtooth fewer", "sawtooth more")) -> tuple[float, str]:
    """``(noise_pct, verdict)`` of one sawtooth-vs-linear comparison repeated over runs.

    ``changes_pct[i]`` is run i's change (sawtooth vs the linear twin of the same run, % of linear),
    ``lin[i]``/``saw[i]`` the two values it came from (counts, or median times). The run-to-run
    noise is ``100·max(max(lin) − min(lin), max(saw) − min(saw)) / mean(lin)``: the larger of
    the two twins' ranges over the runs, on the scale of the change (% of the linear value). The verdict is
    ``words[0]`` (change < 0) or ``words[1]`` (> 0) only if there are at least two runs, every run's
    change has that sign, the smallest |change| exceeds the noise, and (``within``, for time) every
    run's own verdict (``time_verdict``: medians apart by more than the larger min..max of the
    samples) is in that direction; otherwise "no difference"."""
    c = np.asarray(changes_pct, dtype=float)
    lo, sa = np.asarray(lin, dtype=float), np.asarray(saw, dtype=float)
    if len(c) < 2 or np.isnan(c).any() or np.isnan(lo).any() or np.isnan(sa).any():
        return float("nan"), "no difference"
    noise = 100.0 * max(np.ptp(lo), np.ptp(sa)) / float(np.mean(lo))
    sign = np.sign(c)
    if not (np.all(sign == sign[0]) and sign[0] != 0 and float(np.min(np.abs(c))) > noise):
        return noise, "no difference"
    want = "sawtooth faster" if sign[0] < 0 else "sawtooth slower"
    if within is not None and any(w != want for w in within):
        return noise, "no difference"
    return noise, words[0] if sign[0] < 0 else words[1]


def sawtooth_repeats(runs: Sequence[tuple[str, list[dict], list[dict]]]) -> list[dict]:
    """Section 5c: per configuration (sawtooth study panel × problem) and quantity (misses,
    non-compulsory misses, median kernel time), the sawtooth-vs-linear change of every run
    (``sawtooth_vs_linear`` on that run's rows alone, so runs are never mixed), their mean, min and
    max, the run-to-run noise and the verdict of ``repeat_verdict``. ``within`` lists each run's own
    time verdict: ``+`` slower / ``-`` faster beyond its sample spread, ``=`` within it.
    ``runs``: ``[(label, counter rows, timing rows)]``; needs at least two runs."""
    if len(runs) < 2:
        return []
    tabs = [(lab, {r["config"]: r for r in sawtooth_vs_linear(c, t)}) for lab, c, t in runs]
    configs = [cfg for cfg in tabs[0][1] if all(cfg in t for _, t in tabs)]
    out = []
    for cfg in configs:
        per = [t[cfg] for _, t in tabs]
        for q, ch, lk, sk, words in (
                ("misses", "misses_change_pct", "misses_linear", "misses_sawtooth",
                 ("sawtooth fewer", "sawtooth more")),
                ("noncomp misses", "noncomp_change_pct", "noncomp_linear", "noncomp_sawtooth",
                 ("sawtooth fewer", "sawtooth more")),
                ("median time", "time_change_pct", "ms_linear", "ms_sawtooth",
                 ("sawtooth faster", "sawtooth slower"))):
            changes = [r[ch] for r in per]
            within = [r["time_verdict"] for r in per] if q == "median time" else None
            noise, verdict = repeat_verdict(changes, [r[lk] for r in per], [r[sk] for r in per],
                                            within, words)
            row = dict(config=cfg, quantity=q)
            row.update({f"{lab}_pct": x for (lab, _), x in zip(tabs, changes)})
            row.update(mean_pct=float(np.mean(changes)), min_pct=float(np.min(changes)),
                       max_pct=float(np.max(changes)), noise_pct=noise,
                       within=" ".join(_WITHIN[w] for w in within) if within else "",
                       verdict=verdict)
            out.append(row)
    return out


# --------------------------------------------------------------------------------------------
# section 6: CTA drift (cuda_baseline.drift trace-build timestamps)
# --------------------------------------------------------------------------------------------
def _problem_tiles(c: dict):
    from spec import Problem, Tiles
    return (Problem(B=int(c["B"]), H=int(c["H"]), S_q=int(c["S_q"]), S_kv=int(c["S_kv"]),
                    H_kv=int(c["H_kv"]), D=int(c["D"]), dtype=c.get("dtype", "fp16"),
                    causal=bool(c["causal"])),
            Tiles(int(c["tile_m"]), int(c["tile_n"])))


def drift_table(rows: list[dict], l2_bytes: int) -> list[dict]:
    """Section 6, per drift case: the median step (µs), the start-time spread over the CTAs in
    steps at the sampled step nearest ``n_kv`` (the steps of one work item; ties to the earlier
    step) and its maximum over the sampled steps, that maximum as K/V bytes
    (spread × ``cuda_baseline.drift.kv_tile_bytes``) and as a fraction of the L2. The dataset keeps
    at most a few hundred sampled steps per case, so the maximum is over those samples (a lower
    bound on the maximum over all steps) and the "after one item" step is the nearest sample."""
    from cuda_baseline.drift import kv_tile_bytes
    from spec import TileGrid
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
    for k in sorted(step_ns, key=lambda k: (k[12], k[6], k[2] != "linear", k[2])):
        c, step = as_case(k), step_ns[k]
        pts = sorted(spread.get(k, []))
        if not pts or not step > 0:
            continue
        x = np.array([p[0] for p in pts])
        s = np.array([p[1] for p in pts]) / step
        prob, tiles = _problem_tiles(c)
        n_kv = TileGrid(prob, tiles).n_kv
        i1 = int(np.argmin(np.abs(x - n_kv)))
        im = int(np.argmax(s))
        kv_mib = s[im] * kv_tile_bytes(prob, tiles) / MiB
        out.append(dict(order=c["order"], B=c["B"], causal=c["causal"],
                        ctas=resident_of(c["schedule"]), step_us=step / 1e3, n_kv=n_kv,
                        at_step=int(x[i1]), spread_after_one_item=float(s[i1]),
                        spread_max=float(s[im]), at_step_max=int(x[im]), steps_sampled=len(x),
                        max_spread_kv_mib=kv_mib, l2_mib=l2_bytes / MiB,
                        max_spread_over_l2=kv_mib * MiB / l2_bytes))
    return out


# --------------------------------------------------------------------------------------------
# section 8: best configuration at long S (longseq study)
# --------------------------------------------------------------------------------------------
def _times_by_case(timing_rows: list[dict]) -> dict[tuple, list[float]]:
    acc: dict[tuple, list[float]] = {}
    for r in timing_rows:
        if r["source"] == "measured" and r["metric"] == Metric.KERNEL_TIME_MS and r["value"] > 0:
            acc.setdefault(case_key(r), []).append(float(r["value"]))
    return acc


def _ratio(kt, tf, denom: float) -> float:
    return tf(*kt) / denom if kt else float("nan")


def longseq_best(timing_rows: list[dict]) -> list[dict]:
    """Section 8, per (D, causal): the study kernel (cuTile or CUDA, any schedule and order) with
    the highest median TFLOPS, the best sawtooth-order one and the best linear one, the SDPA peers
    (cuDNN, flash) timed in the same run, the ratios to them, the sawtooth-vs-linear change of the
    two bests' median times and ``time_verdict`` on their samples. A best of several noisy
    candidates is biased upwards (each pick is the luckiest of its set), which is one more reason
    to read a difference within the spread as none."""
    times = _times_by_case(timing_rows)
    groups: dict[tuple, dict[str, list]] = {}
    for k, t in times.items():
        c = as_case(k)
        g = groups.setdefault((c["D"], c["causal"], c["B"], c["H"], c["S_q"]), {})
        g.setdefault("peer" if c["backend"].startswith("sdpa") else c["order"], []).append((k, t))
    out = []
    for (D, causal, B, H, S), g in sorted(groups.items()):
        def tf(k, t):
            return _flops(as_case(k)) / (median(t) * 1e-3) / 1e12

        def best(cands):
            return max(cands, key=lambda kt: tf(*kt)) if cands else None

        def label(k):
            c = as_case(k)
            return f"{c['backend']} {c['order']} {c['schedule']} {c['tile_m']}x{c['tile_n']}"
        ours = g.get("linear", []) + g.get("sawtooth", [])
        b, bs, bl = best(ours), best(g.get("sawtooth", [])), best(g.get("linear", []))
        if b is None:
            continue
        peer = {as_case(k)["backend"]: tf(k, t) for k, t in g.get("peer", [])}
        cudnn, flash = peer.get("sdpa-cudnn", float("nan")), peer.get("sdpa-flash", float("nan"))
        row = dict(D=D, causal=causal, B=B, H=H, S=S, best=label(b[0]), best_tflops=tf(*b))
        row.update(best_saw=label(bs[0]) if bs else "", saw_tflops=tf(*bs) if bs else float("nan"),
                   best_lin=label(bl[0]) if bl else "", lin_tflops=tf(*bl) if bl else float("nan"),
                   cudnn_tflops=cudnn, flash_tflops=flash,
                   best_over_cudnn=tf(*b) / cudnn, best_over_flash=tf(*b) / flash,
                   saw_over_cudnn=_ratio(bs, tf, cudnn), lin_over_cudnn=_ratio(bl, tf, cudnn))
        if bs and bl:
            row.update(saw_vs_lin_time_pct=pct_change(median(bs[1]), median(bl[1])),
                       saw_vs_lin=time_verdict(bl[1], bs[1]))
        out.append(row)
    return out


# --------------------------------------------------------------------------------------------
# section 9: how far from the DRAM limit, and the spill artifact
# --------------------------------------------------------------------------------------------
DRAM_PEAK_BYTES_PER_S = {
    # H100 SXM5 80 GB HBM3: 3.35 TB/s peak memory bandwidth (NVIDIA H100 Tensor Core GPU
    # datasheet). The committed H100 runs are on "NVIDIA H100 80GB HBM3", the SXM5 part.
    "h100": 3.35e12,
    # H200 SXM 141 GB HBM3e: 4.8 TB/s peak memory bandwidth (NVIDIA H200 Tensor Core GPU datasheet).
    "h200": 4.8e12,
}


def _twin_key(k: tuple) -> tuple:
    """A case key without variant and order: the configuration a linear/sawtooth pair shares."""
    return tuple(v for n, v in zip(CASE_KEYS, k) if n not in ("variant", "order"))


def dram_bound(counter_rows: list[dict], timing_rows: list[dict],
               peak_bytes_per_s: float) -> list[dict]:
    """Section 9a/9c, per profiled case: misses, ``dram__bytes_read.sum``, the median kernel time of
    the timing samples of the same run, the achieved DRAM read bandwidth and its share of the peak.
    On each sawtooth row: the measured time change vs its linear twin, and an upper bound on what the
    sawtooth order could save by reading less from DRAM, ``(linear bytes − sawtooth bytes) / peak``
    as % of the linear time. The bound assumes the bytes saved would otherwise stream at the peak
    bandwidth on the critical path; it is a bandwidth bound, not a latency bound (a kernel stalled on
    DRAM latency at a small share of the peak could save more per byte; the measured change beside
    it says whether it did)."""
    piv = pivot(counter_rows)
    times = _times_by_case(timing_rows)
    pairs: dict[tuple, dict[str, tuple]] = {}
    for k in piv:
        pairs.setdefault(_twin_key(k), {})[as_case(k)["order"]] = k
    out = []
    for k, m in sorted(piv.items(), key=lambda kv: (_config(as_case(kv[0])), kv[0][2])):
        c = as_case(k)
        if Metric.DRAM_READ_BYTES not in m:
            continue
        t = times.get(k, [])
        ms = median(t) if t else float("nan")
        dram = m[Metric.DRAM_READ_BYTES]
        row = dict(config=_config(c), D=c["D"], order=c["order"],
                   misses=m.get(Metric.L2_TEX_MISSES, float("nan")), dram_GB=dram / 1e9, ms=ms,
                   dram_GBps=dram / (ms * 1e-3) / 1e9,
                   dram_peak_pct=100.0 * dram / (ms * 1e-3) / peak_bytes_per_s,
                   time_change_pct=float("nan"), saving_bound_pct=float("nan"))
        lin = pairs.get(_twin_key(k), {}).get("linear")
        if c["order"] != "linear" and lin is not None and Metric.DRAM_READ_BYTES in piv[lin] \
                and times.get(lin):
            ms_lin = median(times[lin])
            row["time_change_pct"] = pct_change(ms, ms_lin)
            row["saving_bound_pct"] = 100.0 * (piv[lin][Metric.DRAM_READ_BYTES] - dram) \
                / peak_bytes_per_s / (ms_lin * 1e-3)
        out.append(row)
    return out


def spill_artifact(forloop: tuple[list[dict], list[dict]],
                   fixed: tuple[list[dict], list[dict]]) -> list[dict]:
    """Section 9b: the same profiled cases built with the ``for`` loop over work items (the linear
    persistent and tile-X builds spilled) and with the ``while`` loop (no spill): misses, DRAM bytes
    read, ``l1tex__t_sectors.sum`` and median TFLOPS, per schedule and order. A cuTile build loads
    K/V through TMA, which bypasses L1, so any L1 sectors there are local-memory (spill) traffic.
    ``forloop``/``fixed``: (counter rows, timing rows) of each run."""
    sides = {}
    for name, (cnt, tim) in (("forloop", forloop), ("fixed", fixed)):
        times = _times_by_case(tim)
        sides[name] = {(as_case(k)["schedule"], as_case(k)["order"], as_case(k)["D"],
                        as_case(k)["causal"]): (k, m, times.get(k, []))
                       for k, m in pivot(cnt).items()}
    out = []
    for key in sorted(set(sides["forloop"]) & set(sides["fixed"]),
                      key=lambda x: (x[2], x[3], x[0] != "grid", x[0], x[1] != "linear")):
        sched, o, D, causal = key
        row = dict(schedule=sched, order=o, D=D, causal=causal)
        for col, get in (("misses", lambda k, m, t: m.get(Metric.L2_TEX_MISSES, float("nan"))),
                         ("dram_GB", lambda k, m, t: m.get(Metric.DRAM_READ_BYTES, float("nan")) / 1e9),
                         ("l1_sectors", lambda k, m, t: m.get(Metric.L1_SECTORS, float("nan"))),
                         ("tflops", lambda k, m, t: _flops(as_case(k)) / (median(t) * 1e-3) / 1e12
                          if t else float("nan"))):
            for name in ("forloop", "fixed"):
                row[f"{col}_{name}"] = get(*sides[name][key])
        out.append(row)
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
    by_study = {s: r for s, r in cnt.items() if r}
    by_study.update({f"sawtooth {lab}": c for lab, c, _ in load_study_runs(arch, "sawtooth")[1:]})
    by_study["longseq-profile"] = load_study(arch, "longseq-profile")[0]
    out["s0_consistency"] = ("0. Counter consistency: (hits + misses) / srcunit_tex sectors "
                             "(sawtooth = its run r1; repeats listed apart)",
                             consistency({s: r for s, r in by_study.items() if r}))
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
    r1 = data["sawtooth"][2]
    r1_name = f"run r1 = {r1.name}" if r1 else "no run"
    out["s5_sawtooth_vs_linear"] = (f"5. Sawtooth vs linear per configuration (sawtooth study, "
                                    f"{r1_name})",
                                    sawtooth_vs_linear(cnt["sawtooth"], data["sawtooth"][1]))
    out["s5_peers"] = (f"5b. SDPA peers timed in the same run (sawtooth study, {r1_name})",
                       peers(data["sawtooth"][1]))
    runs = load_study_runs(arch, "sawtooth")
    names = ", ".join(f"{lab} = {d.name}" for (lab, _, _), d in
                      zip(runs, find_study_runs(arch, "sawtooth")))
    out["s5_repeats"] = (f"5c. Sawtooth vs linear across repeated runs ({names or 'none'}"
                         f"{'' if len(runs) >= 2 else '; needs >= 2 runs'}): % change per run; "
                         f"noise_pct = the larger run-to-run range of the two twins, % of the linear "
                         f"mean; a difference needs one sign in every run, min |change| > noise_pct "
                         f"and, for time, every run's own verdict (within: + slower, - faster, "
                         f"= inside the sample spread)", sawtooth_repeats(runs))
    drift_dir = find_study_dir(arch, "drift")
    drift_csv = drift_dir / "drift.csv" if drift_dir else None
    drift_rows = read_csv(drift_csv) if drift_csv and drift_csv.exists() else []
    out["s6_drift"] = (f"6. CTA drift: start-time spread over the CTAs, in steps "
                       f"({drift_dir.name if drift_dir else 'no drift run'}; sampled steps)",
                       drift_table(drift_rows, a.l2_bytes))
    if sim:
        log("section 7: simulating the measured sawtooth and divergence cases ...")
        rows, fit = simulator_vs_measured(arch, cache_dir=cache_dir, max_accesses=max_accesses,
                                          log=log)
        out["s7_capacity_fit"] = ("7a. One effective LRU capacity fitted to the non-causal CUDA "
                                  "cases (relative least squares)", [fit] if fit else [])
        out["s7_sim_vs_measured"] = (f"7b. Simulator vs measured L2 misses per case (sawtooth "
                                     f"study {r1_name}; divergence study)", rows)
        out["s7_order_change"] = ("7c. Sawtooth vs linear change in misses, measured vs simulated",
                                  sim_order_changes(rows))
    _, ls_t, ls_dir = load_study(arch, "longseq")
    out["s8_longseq_best"] = (f"8. Best configuration at long S (longseq study"
                              f"{', ' + ls_dir.name if ls_dir else ': no run'})", longseq_best(ls_t))
    peak = DRAM_PEAK_BYTES_PER_S.get(arch, float("nan"))
    lp_c, lp_t, lp_dir = load_study(arch, "longseq-profile")
    out["s9_dram_bound"] = (f"9a. DRAM bound (longseq-profile"
                            f"{', ' + lp_dir.name if lp_dir else ': no run'}; peak "
                            f"{peak / 1e12:.2f} TB/s)", dram_bound(lp_c, lp_t, peak))
    spill = ROOT / "profiles" / arch / SPILL_ARTIFACT / "profile"
    out["s9_spill_artifact"] = (f"9b. Spill artifact: for-loop build ({SPILL_ARTIFACT}/profile) "
                                f"vs the fixed while-loop build ({lp_dir.name if lp_dir else 'no run'})",
                                spill_artifact(read_run(spill), (lp_c, lp_t))
                                if spill.is_dir() and lp_dir else [])
    out["s9_dram_bound_sawtooth"] = (f"9c. DRAM bound of the sawtooth-study kernels ({r1_name}; "
                                     f"peak {peak / 1e12:.2f} TB/s)",
                                     dram_bound(cnt["sawtooth"], data["sawtooth"][1], peak))
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

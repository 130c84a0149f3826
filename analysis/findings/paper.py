"""Section P, the paper and this framework: per case of the paper's main study, the published GB10
value (``analysis.data.published``) beside the simulated GB10 value and the value measured on the
report's GPU at the scaled length, each with its error or spread, and per linear/sawtooth pair
which of the paper's statements the measurement confirms and which the simulation reproduces.

The verdicts. The paper's statement for a pair is the sign of its sawtooth change (misses and
TFLOPS). A measurement *confirms* it when its own change has that sign and the twins' min..max
ranges over the repeated launches do not overlap (section 5's rule), *contradicts* it when the
ranges separate the other way, and shows *no difference* otherwise. The simulation *reproduces*
a published count within 10% (the issue's bar), and a published change within 15 points.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from analysis.data.published import PaperCase, key_of_row
from analysis.data.rows import pct_change
from analysis.findings.sawtooth import range_verdict
from analysis.models.traffic import MiB, Shape
from analysis.models.wave import fit_c_eff
from spec.records import Metric

WITHIN_PCT = 10.0
"""A simulated count within this % of the published one reproduces it."""
CHANGE_POINTS = 15.0
"""A simulated sawtooth change within this many points of the published one reproduces it."""


def _by_key(rows: Sequence[dict], metric: str, source: str) -> dict[tuple, list[float]]:
    out: dict[tuple, list[float]] = {}
    for r in rows:
        if r["metric"] == metric and r.get("source") == source and r.get("stat") != "median":
            out.setdefault(key_of_row(r), []).append(float(r["value"]))
    return out


def _ranges(rows: Sequence[dict]) -> dict[tuple, tuple[float, float, float]]:
    """(median, lo, hi) of the misses per key: a repeated run's median rows, else the samples."""
    med = {key_of_row(r): (float(r["value"]), float(r["lo"]), float(r["hi"])) for r in rows
           if r.get("stat") == "median" and r["metric"] == Metric.L2_TEX_MISSES
           and r.get("lo") is not None and r.get("hi") is not None}
    for k, v in _by_key(rows, Metric.L2_TEX_MISSES, "measured").items():
        med.setdefault(k, (float(np.median(v)), min(v), max(v)))
    return med


def _times(rows: Sequence[dict]) -> dict[tuple, list[float]]:
    return {k: v for k, v in _by_key(rows, Metric.KERNEL_TIME_MS, "measured").items() if v}


def _verdict(paper_pct: float, lin, saw) -> str:
    """Whether a measured pair confirms the sign of the paper's change (module docstring)."""
    if lin is None or saw is None:
        return "not measured"
    v = range_verdict(lin[1:], saw[1:])
    if v == "no difference":
        return "no difference"
    return "confirms" if (v == "fewer") == (paper_pct < 0) else "contradicts"


def case_table(cases: Sequence[PaperCase], sim_rows: Sequence[dict],
               measured_rows: Sequence[dict], gpu: str) -> list[dict]:
    """One row per published case: published, simulated GB10 (error %), measured on ``gpu``."""
    sim = {k: float(np.median(v)) for k, v in
           _by_key(sim_rows, Metric.L2_TEX_MISSES, "simulated").items()}
    meas = _ranges(measured_rows)
    out = []
    for c in cases:
        s = sim.get(c.key)
        m = meas.get(c.key)
        out.append({"case": c.label, "order": c.order, "published_misses": c.misses,
                    "gb10_simulated": s if s is not None else float("nan"),
                    "sim_error_pct": pct_change(s, c.misses) if s else float("nan"),
                    "within_10pct": bool(s and abs(pct_change(s, c.misses)) <= WITHIN_PCT),
                    f"{gpu}_measured": m[0] if m else float("nan"),
                    f"{gpu}_lo": m[1] if m else float("nan"),
                    f"{gpu}_hi": m[2] if m else float("nan"),
                    "published_tflops": c.tflops,
                    "provenance": "exact" if c.provenance.startswith("exact")
                    else "bar chart, about 1%"})
    return out


def pair_table(cases: Sequence[PaperCase], sim_rows: Sequence[dict],
               measured_rows: Sequence[dict], gpu: str) -> list[dict]:
    """One row per linear/sawtooth pair: the paper's changes in misses and TFLOPS, the simulated
    GB10 change, the measured change with its verdict, and the measured time change."""
    by = {c.key: c for c in cases}
    sim = {k: float(np.median(v)) for k, v in
           _by_key(sim_rows, Metric.L2_TEX_MISSES, "simulated").items()}
    meas, times = _ranges(measured_rows), _times(measured_rows)
    out = []
    for cfg in dict.fromkeys(c.config for c in cases):
        lin, saw = by.get((*cfg, "linear")), by.get((*cfg, "sawtooth"))
        if lin is None or saw is None:
            continue
        paper_pct = pct_change(saw.misses, lin.misses)
        s_lin, s_saw = sim.get(lin.key), sim.get(saw.key)
        sim_pct = pct_change(s_saw, s_lin) if s_lin and s_saw else float("nan")
        m_lin, m_saw = meas.get(lin.key), meas.get(saw.key)
        t_lin, t_saw = times.get(lin.key), times.get(saw.key)
        out.append({
            "case": lin.label,
            "paper_misses_change_pct": paper_pct,
            "paper_tflops_change_pct": pct_change(saw.tflops, lin.tflops),
            "gb10_sim_change_pct": sim_pct,
            "sim_reproduces_change": bool(np.isfinite(sim_pct)
                                          and abs(sim_pct - paper_pct) <= CHANGE_POINTS),
            f"{gpu}_misses_change_pct": pct_change(m_saw[0], m_lin[0]) if m_lin and m_saw
            else float("nan"),
            f"{gpu}_verdict_on_misses": _verdict(paper_pct, m_lin, m_saw),
            f"{gpu}_time_change_pct": pct_change(float(np.median(t_saw)), float(np.median(t_lin)))
            if t_lin and t_saw else float("nan"),
            f"{gpu}_time_ranges_overlap": bool(t_lin and t_saw and min(t_saw) <= max(t_lin)
                                               and min(t_lin) <= max(t_saw)),
        })
    return out


def summary(case_rows: Sequence[dict]) -> dict:
    """How many published counts the simulation reproduces within 10%, and the median |error|."""
    err = [abs(r["sim_error_pct"]) for r in case_rows if np.isfinite(r["sim_error_pct"])]
    return {"cases": len(case_rows), "simulated": len(err),
            "within_10pct": sum(r["within_10pct"] for r in case_rows),
            "median_abs_error_pct": float(np.median(err)) if err else float("nan"),
            "causal_worst_ratio": max((r["gb10_simulated"] / r["published_misses"]
                                       for r in case_rows if "non-causal" not in r["case"]
                                       and np.isfinite(r["gb10_simulated"])), default=float("nan"))}


def implied_capacity(cases: Sequence[PaperCase], ctas: int = 48, nominal_bytes: int = 24 * MiB,
                     simulated_bytes: float | None = None) -> list[dict]:
    """The effective capacity each published non-causal persistent sawtooth count implies under
    the wave model (``analysis.models.wave``; one count, one C_eff: a reading of the published
    number, not a parameter of any model), beside the nominal L2 and the capacity the GB10
    simulation runs with (``simulated_bytes``: its parameters' fraction of the nominal L2). The
    paper reads its own data as C_eff of about 20-22 MiB of GB10's 24."""
    out = []
    for c in cases:
        if c.causal or c.kind != "static" or c.order != "sawtooth":
            continue
        shape = Shape(S_q=c.S, D=c.D, T_m=c.tile, T_n=c.tile, B=c.B)
        fit = fit_c_eff([c.S], [c.misses], shape=shape, P=ctas, order="sawtooth")
        out.append({"case": c.label, "published_misses": c.misses,
                    "implied_c_eff_mib": fit.c_eff_mib, "nominal_l2_mib": nominal_bytes / MiB,
                    "simulated_capacity_mib": (simulated_bytes or nominal_bytes) / MiB,
                    "model": "wave model, sawtooth, 48 persistent CTAs"})
    return out


def hints_builds(runs: Sequence[tuple[str, list[dict], list[dict]]],
                 predicted: Sequence[dict]) -> list[dict]:
    """Section P5, the paper's occupancy hint on the report's GPU (the ``hints`` study):
    per build, the misses of the runs (median of the runs' medians, min..max over every launch,
    as each run's median row states them), the prediction
    committed before the runs (``source = simulated``: error = predicted vs measured median) and
    the median kernel time of each run. Stable builds (launches within 15%) test the simulator;
    at occupancy 1 a Tile-based launch keeps one CTA per SM, the GB10 fact the main command's
    Tile-based counts rest on."""
    miss: dict[str, list[tuple[float, float, float]]] = {}
    ms: dict[str, list[float]] = {}
    for _, counters, timing in runs:
        for r in counters:
            if r["metric"] == Metric.L2_TEX_MISSES and r.get("stat") == "median":
                miss.setdefault(r["variant"], []).append(
                    (float(r["value"]), float(r["lo"]), float(r["hi"])))
        per: dict[str, list[float]] = {}
        for r in timing:
            if r["metric"] == Metric.KERNEL_TIME_MS and r.get("source") == "measured":
                per.setdefault(r["variant"], []).append(float(r["value"]))
        for v, xs in per.items():
            ms.setdefault(v, []).append(float(np.median(xs)))
    pred = {r["variant"]: float(r["value"]) for r in predicted
            if r["metric"] == Metric.L2_TEX_MISSES}
    out = []
    for v in sorted(miss):
        m = float(np.median([x[0] for x in miss[v]]))
        lo, hi = min(x[1] for x in miss[v]), max(x[2] for x in miss[v])
        row = dict(variant=v, runs=len(miss[v]), misses=m, misses_lo=lo, misses_hi=hi,
                   stable=(hi - lo) / m <= 0.15, predicted=pred.get(v),
                   predicted_err_pct=100 * (pred[v] / m - 1) if v in pred else None)
        row.update({f"r{i}_ms": x for i, x in enumerate(ms.get(v, []), 1)})
        out.append(row)
    return out


def by_occupancy(runs: Sequence[tuple[str, list[dict], list[dict]]], repeats) -> list[dict]:
    """``repeats`` (section 5c's ``sawtooth_repeats``) once per occupancy hint of the runs'
    builds, each row tagged with it: configurations are labelled without the hint."""
    occs = sorted({str(r.get("occupancy")) for _, c, t in runs for r in c + t
                   if r.get("occupancy") not in (None, "")})
    out = []
    for occ in occs:
        keep = lambda rows, occ=occ: [r for r in rows if str(r.get("occupancy")) == occ]  # noqa: E731
        out += [dict(occupancy=occ, **r) for r in repeats([(lab, keep(c), keep(t))
                                                          for lab, c, t in runs])]
    return out


def speedup_needs(cases: Sequence[PaperCase]) -> list[dict]:
    """Section P6, what the paper's published speedups ask of ``analysis.models.timemodel`` (a
    reading of its numbers; nothing here sets a parameter). Per linear/sawtooth pair: each
    build's time (the paper's FLOPs over its TFLOPS), the K/V steps of the busiest CTA (Static:
    the q-major deal over 48 CTAs; Tile-based: all steps over 48 resident CTAs), the time per
    step, the DRAM read rate the published misses imply (one L2 partition: a tex miss is a DRAM
    fill), the wave model's DRAM fraction ``f`` of each order (Static only: misses over the
    K/V the waves stream; above 1 the CTAs fetch a tile more than once per wave, no convoy), and
    the exposed stall per step, per unit of ``f``, that would turn the published miss change
    into the published time change. The model's GB10 inputs (the H100's 349 ns DRAM latency, a
    double buffer) expose nothing; GB10's 273 GB/s would cost the linear builds 0.1-1%."""
    from analysis.models.timemodel import GB10, critical_steps, wave_kv_bytes
    from spec import CtaSchedule, Problem, TileGrid, Tiles
    by = {c.key: c for c in cases}
    out = []
    for lin in cases:
        saw = by.get(lin.config + ("sawtooth",))
        if lin.order != "linear" or saw is None:
            continue
        p = Problem(B=lin.B, H=1, S_q=lin.S, D=lin.D, causal=lin.causal)
        tiles = Tiles(lin.tile, lin.tile)
        flops = 4.0 * lin.B * lin.S * lin.S * lin.D * (0.5 if lin.causal else 1.0)
        t_lin, t_saw = flops / (lin.tflops * 1e12), flops / (saw.tflops * 1e12)
        if lin.kind == "tile":
            steps = lin.B * int(TileGrid(p, tiles).item_steps().sum()) / GB10.num_sms
            f_lin = f_saw = None
        else:
            sched = CtaSchedule.persistent(GB10.num_sms)
            steps = critical_steps(p, tiles, sched)
            wave = wave_kv_bytes(p, tiles, sched)
            f_lin, f_saw = lin.misses * 32 / wave, saw.misses * 32 / wave
        stall = (t_lin - t_saw) / steps
        out.append(dict(
            case=lin.label,
            ms_linear=1e3 * t_lin, ms_sawtooth=1e3 * t_saw, steps=int(round(steps)),
            us_per_step_linear=1e6 * t_lin / steps, us_per_step_sawtooth=1e6 * t_saw / steps,
            dram_GBps_linear=lin.misses * 32 / t_lin / 1e9,
            dram_GBps_sawtooth=saw.misses * 32 / t_saw / 1e9,
            dram_pct_of_peak_linear=100 * lin.misses * 32 / t_lin / GB10.dram_bytes_per_s,
            f_linear=f_lin, f_sawtooth=f_saw, stall_us_per_step=1e6 * stall,
            stall_us_per_unit_f=(1e6 * stall / (f_lin - f_saw)) if f_lin is not None else None))
    return out

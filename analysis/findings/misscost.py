"""Section 10, where a miss costs time (misscost study): sawtooth vs linear kernel time per K/V
pipeline depth x DRAM streamer level x S x causal, over independent runs, beside the prediction
of ``analysis.models.timemodel``.

The study (``experiments.registry.plans.misscost_plan``) runs the CUDA twin persistent on 96 of the
H100's 132 SMs and a DRAM streamer on the other 36 (``experiments.instruments.streamer``). Each
timed launch of a case at a streamer level carries ``x`` = the streamer's threads per CTA (0 = off)
and the streamer's own achieved bandwidth (``streamer_dram_gbps``, one row per launch). The counters
(local tex misses, DRAM read bytes) are taken without the streamer (ncu serialises kernels), so they
are the same for every level of a case.

Per configuration (causal, S, stages, level) and run: the change of the median time (sawtooth vs
linear, % of linear) and the run's own verdict on its samples (``time_verdict``); over the runs,
the verdict rule of section 5c (``sawtooth.repeat_verdict``: one sign in every run, the smallest
change above the run-to-run noise, every run's own verdict agreeing).

The model's prediction uses only: the step count of the busiest CTA and the K/V bytes its
wavefronts stream (from the spec), ``t_c`` = time per step of the linear build where nothing
misses (non-causal, S below the L2, the deepest pipeline, no streamer; the median over the runs),
each order's measured DRAM bytes, the bandwidth left to the kernel (peak minus the streamer's
median achieved bandwidth, at least ``MIN_AVAILABLE`` of the peak: the streamer's window-based rate
can read at or above the datasheet peak) and the latencies of ``MemoryFacts``. Nothing is fitted
to the sawtooth-vs-linear answer.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from analysis.data.rows import median, pct_change, problem_tiles, time_verdict
from analysis.findings.sawtooth import WITHIN, repeat_verdict
from analysis.models.timemodel import (
    MemoryFacts,
    bandwidth_edge,
    critical_steps,
    dram_fraction,
    predict,
    predicted_change,
    wave_kv_bytes,
)
from spec.records import Metric
from spec.schedules import CtaSchedule
from spec.variant import Variant

MIN_AVAILABLE = 0.01
"""Floor of the bandwidth left to the attention kernel, as a fraction of the DRAM peak."""

_LEVEL = re.compile(r"stream=(\w+)")


def stages_of(variant: str) -> int:
    """The K/V pipeline depth of a CUDA variant id (``....st1`` -> 1; no field: the default)."""
    return Variant.parse(variant)[0].pipeline_stages


def _config(r: dict) -> tuple:
    return (r["causal"], r["S_q"], stages_of(r["variant"]), int(r["x"] or 0))


def per_run(counter_rows: Sequence[dict], timing_rows: Sequence[dict]) -> dict[tuple, dict]:
    """One run: per config ``(causal, S, stages, streamer threads)`` the timed samples of each
    order, the streamer's achieved GB/s (both orders' launches), its level label, a row of the
    case (for the problem) and each order's DRAM read bytes and local tex misses."""
    out: dict[tuple, dict] = {}
    for r in timing_rows:
        if r["source"] != "measured" or r["x"] is None:
            continue
        if r["metric"] not in (Metric.KERNEL_TIME_MS, Metric.STREAMER_GBPS):
            continue
        c = out.setdefault(_config(r), {"ms": {}, "gbps": [], "row": r, "level": ""})
        if r["metric"] == Metric.KERNEL_TIME_MS and r["value"] > 0:
            c["ms"].setdefault(r["order"], []).append(float(r["value"]))
            m = _LEVEL.search(r.get("note") or "")
            c["level"] = m.group(1) if m else c["level"]
        elif r["metric"] == Metric.STREAMER_GBPS:
            c["gbps"].append(float(r["value"]))
    counts: dict[tuple, dict] = {}
    for r in counter_rows:
        if r["source"] == "measured" and r["metric"] in (Metric.DRAM_READ_BYTES,
                                                         Metric.L2_TEX_MISSES) \
                and r.get("stat", "median") in ("median", ""):
            key = (r["causal"], r["S_q"], stages_of(r["variant"]), r["order"])
            counts.setdefault(key, {})[r["metric"]] = float(r["value"])
    for (causal, S, st, _), c in out.items():
        for order in ("linear", "sawtooth"):
            got = counts.get((causal, S, st, order), {})
            c[f"dram_{order}"] = got.get(Metric.DRAM_READ_BYTES, float("nan"))
            c[f"misses_{order}"] = got.get(Metric.L2_TEX_MISSES, float("nan"))
    return out


def step_time(runs: Sequence[dict[tuple, dict]]) -> float:
    """``t_c``: seconds per step of the linear build where nothing misses: non-causal, the
    smallest S, the deepest pipeline, streamer off; median over the runs of the median time over
    the busiest CTA's steps. NaN when the runs lack that case."""
    keys = [k for run in runs for k in run if not k[0] and k[3] == 0]
    if not keys:
        return float("nan")
    S, st = min(k[1] for k in keys), max(k[2] for k in keys)
    ts = []
    for run in runs:
        c = run.get((False, S, st, 0))
        if c and c["ms"].get("linear"):
            problem, tiles = problem_tiles(c["row"])
            steps = critical_steps(problem, tiles, CtaSchedule.parse(c["row"]["schedule"]))
            ts.append(median(c["ms"]["linear"]) * 1e-3 / steps)
    return median(ts) if ts else float("nan")


def prediction(c: dict, stages: int, t_c: float, facts: MemoryFacts) -> dict:
    """The model's sawtooth-vs-linear change (%), the linear build's regime, the bandwidth below
    which the linear build would turn bandwidth-bound (``edge_GBps``: the regime boundary of the
    map) and the DRAM fraction ``f`` of each order, for one config."""
    problem, tiles = problem_tiles(c["row"])
    schedule = CtaSchedule.parse(c["row"]["schedule"])
    steps, wave = critical_steps(problem, tiles, schedule), wave_kv_bytes(problem, tiles, schedule)
    streamer = median(c["gbps"]) * 1e9 if c["gbps"] else 0.0
    bw = max(facts.dram_bytes_per_s - streamer, MIN_AVAILABLE * facts.dram_bytes_per_s)
    preds = {}
    for order in ("linear", "sawtooth"):
        dram = c[f"dram_{order}"]
        if np.isnan(dram) or np.isnan(t_c):
            return dict(available_GBps=bw / 1e9, predicted_pct=float("nan"), regime="n/a",
                        edge_GBps=float("nan"), attention_sms=schedule.num_ctas)
        preds[order] = predict(steps=steps, t_c=t_c, stages=stages,
                               f=dram_fraction(dram, wave), dram_bytes=dram, bw_available=bw,
                               facts=facts)
    edge = bandwidth_edge(steps=steps, t_c=t_c, stages=stages,
                          f=dram_fraction(c["dram_linear"], wave), dram_bytes=c["dram_linear"],
                          facts=facts)
    return dict(available_GBps=bw / 1e9,
                predicted_pct=100.0 * predicted_change(preds["linear"], preds["sawtooth"]),
                regime=preds["linear"].regime, edge_GBps=edge / 1e9,
                attention_sms=schedule.num_ctas,
                f_linear=dram_fraction(c["dram_linear"], wave),
                f_sawtooth=dram_fraction(c["dram_sawtooth"], wave))


def misscost_table(runs: Sequence[tuple[str, list[dict], list[dict]]],
                   facts: MemoryFacts) -> list[dict]:
    """Section 10: one row per config over the runs ``[(label, counter rows, timing rows)]``:
    the mean streamer bandwidth and the bandwidth left, misses and DRAM bytes (run 1), each
    run's time change and own verdict, the verdict over the runs and the model's prediction."""
    tabs = [(lab, per_run(c, t)) for lab, c, t in runs]
    if not tabs:
        return []
    t_c = step_time([t for _, t in tabs])
    configs = sorted(set.intersection(*(set(t) for _, t in tabs)))
    out = []
    for cfg in configs:
        causal, S, stages, threads = cfg
        per = [t[cfg] for _, t in tabs]
        if not all(p["ms"].get("linear") and p["ms"].get("sawtooth") for p in per):
            continue
        lin = [median(p["ms"]["linear"]) for p in per]
        saw = [median(p["ms"]["sawtooth"]) for p in per]
        changes = [pct_change(s, lo) for s, lo in zip(saw, lin)]
        within = [time_verdict(p["ms"]["linear"], p["ms"]["sawtooth"]) for p in per]
        noise, verdict = repeat_verdict(changes, lin, saw, within,
                                        ("sawtooth faster", "sawtooth slower"))
        first = per[0]
        gbps = [g for p in per for g in p["gbps"]]
        row = dict(causal=causal, S=S, stages=stages, level=first["level"],
                   streamer_threads=threads, streamer_GBps=median(gbps) if gbps else 0.0,
                   misses_linear=first["misses_linear"], misses_sawtooth=first["misses_sawtooth"],
                   misses_change_pct=pct_change(first["misses_sawtooth"], first["misses_linear"]),
                   dram_GB_linear=first["dram_linear"] / 1e9,
                   dram_GB_sawtooth=first["dram_sawtooth"] / 1e9,
                   ms_linear=float(np.mean(lin)), ms_sawtooth=float(np.mean(saw)))
        row.update({f"{lab}_pct": x for (lab, _), x in zip(tabs, changes)})
        row.update(mean_pct=float(np.mean(changes)), min_pct=float(np.min(changes)),
                   max_pct=float(np.max(changes)), noise_pct=noise,
                   within=" ".join(WITHIN[w] for w in within), verdict=verdict)
        merged = dict(first, gbps=gbps)
        row.update(prediction(merged, stages, t_c, facts))
        row["t_c_us"] = t_c * 1e6
        out.append(row)
    return out

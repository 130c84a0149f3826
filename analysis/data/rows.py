"""Small pure helpers on tidy rows (dicts from ``spec.records.read_csv``), shared by the findings
sections and the figures so that each exists once: the case key of a row, the per-case pivot of
counters, the persistent CTA count of a schedule label, medians and the time verdict.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from spec import CtaSchedule, Problem
from spec.records import CASE_COLUMNS as CASE_KEYS
from spec.records import Metric, case_key


def as_case(k: tuple) -> dict:
    return dict(zip(CASE_KEYS, k))


def twin_key(k: tuple) -> tuple:
    """A case key without variant and order: the configuration a linear/sawtooth pair shares."""
    return tuple(v for n, v in zip(CASE_KEYS, k) if n not in ("variant", "order"))


def pivot(rows: Iterable[dict], source: str = "measured") -> dict[tuple, dict[str, float]]:
    """``{case key: {metric: mean value}}`` (repeated rows of a metric are averaged)."""
    acc: dict[tuple, dict[str, list[float]]] = {}
    for r in rows:
        if source and r.get("source") != source:
            continue
        acc.setdefault(case_key(r), {}).setdefault(r["metric"], []).append(float(r["value"]))
    return {k: {m: float(np.mean(v)) for m, v in d.items()} for k, d in acc.items()}


def persistent_ctas(schedule: str) -> int | None:
    """The persistent CTA count P of a schedule label ('static132' -> 132, 'lpt48' -> 48); None
    for grid and tile-X launches (their resident CTAs depend on the occupancy)."""
    try:
        s = CtaSchedule.parse(schedule)
    except ValueError:
        return None
    return s.num_ctas if s.is_persistent else None


def median(xs: Sequence[float]) -> float:
    return float(np.median(np.asarray(xs, dtype=np.float64)))


def pct_change(new: float, old: float) -> float:
    return 100.0 * (new - old) / old if old else float("nan")


def flops(c: dict) -> float:
    """Forward FLOPs of the case of a row (``spec.Problem.flops``)."""
    return Problem(c["B"], c["H"], c["S_q"], c["D"], S_kv=c["S_kv"], H_kv=c.get("H_kv"),
                   causal=c["causal"]).flops


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


def times_by_case(timing_rows: Iterable[dict]) -> dict[tuple, list[float]]:
    """Measured kernel-time samples (ms) per case key."""
    acc: dict[tuple, list[float]] = {}
    for r in timing_rows:
        if r["source"] == "measured" and r["metric"] == Metric.KERNEL_TIME_MS and r["value"] > 0:
            acc.setdefault(case_key(r), []).append(float(r["value"]))
    return acc


def hit_rate(hits: float, misses: float) -> float:
    """Hit rate from the counts (``lts__t_sector_hit_rate.pct`` mixes in writes)."""
    t = hits + misses
    return hits / t if t else float("nan")


def config_label(c: dict) -> str:
    mode = "causal" if c["causal"] else "non-causal"
    return f"{c['backend']} {c['schedule']} {c['tile_m']}x{c['tile_n']} B={c['B']} {mode}"


def problem_tiles(c: dict):
    """(``spec.Problem``, ``spec.Tiles``) of the case of a row."""
    from spec import Tiles
    return (Problem(B=int(c["B"]), H=int(c["H"]), S_q=int(c["S_q"]), S_kv=int(c["S_kv"]),
                    H_kv=int(c["H_kv"]), D=int(c["D"]), dtype=c.get("dtype", "fp16"),
                    causal=bool(c["causal"])),
            Tiles(int(c["tile_m"]), int(c["tile_n"])))

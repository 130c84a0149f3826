"""Section 5, sawtooth vs linear (sawtooth study): per configuration the misses, non-compulsory
misses, median kernel time and TFLOPS with the min..max of the samples of one run (5); the SDPA
peers timed in the same run (5b); and across repeated runs (5c) the change of every run with the
verdict rule of ``repeat_verdict``: a change counts only if it has one sign in every run, its
smallest size exceeds the worst run-to-run drift of either twin and, for time, every run's own
samples show it."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from analysis.data.rows import (
    CASE_KEYS,
    as_case,
    case_key,
    config_label,
    flops,
    median,
    pct_change,
    pivot,
    time_verdict,
)
from spec.records import Metric


def miss_ranges(counter_rows: list[dict]) -> dict[tuple, tuple[float, float]]:
    """min..max of the repeated launches per case (the ``lo``/``hi`` of a median row of the local
    tex misses, schema 3); cases measured with one launch have none."""
    out = {}
    for r in counter_rows:
        if r.get("stat") == "median" and r["metric"] == Metric.L2_TEX_MISSES \
                and r.get("lo") is not None and r.get("hi") is not None:
            out[case_key(r)] = (float(r["lo"]), float(r["hi"]))
    return out


def range_verdict(lin: tuple[float, float] | None, saw: tuple[float, float] | None) -> str:
    """Misses of one run with repeated launches: "fewer"/"more" (sawtooth vs linear) when the
    min..max ranges of the two twins do not overlap, else "no difference"; "single launch" when
    a range is missing (the rule of section 5c, with launches in place of runs)."""
    if lin is None or saw is None:
        return "single launch"
    if saw[1] < lin[0]:
        return "fewer"
    if saw[0] > lin[1]:
        return "more"
    return "no difference"


def _spread_pct(lin: tuple[float, float] | None, saw: tuple[float, float] | None,
                lin_median: float, saw_median: float) -> float:
    """The larger (max - min) / median of the twins' repeated launches, % (NaN without ranges):
    the number the counters issue holds to 5%."""
    if lin is None or saw is None:
        return float("nan")
    return 100.0 * max((lin[1] - lin[0]) / lin_median, (saw[1] - saw[0]) / saw_median)


def sawtooth_vs_linear(counter_rows: list[dict], timing_rows: list[dict]) -> list[dict]:
    """One row per configuration with a linear and a sawtooth variant: local tex misses (with the
    min..max over repeated launches, the larger spread of the two twins and the verdict of
    ``range_verdict`` where the run has them), non-compulsory misses, DRAM fills (DRAM read bytes
    / 32 B: on Hopper a local miss can hit in the other L2 partition, so the two differ), median
    kernel time and TFLOPS (min..max of the samples) and the verdict on time."""
    piv = pivot(counter_rows)
    ranges = miss_ranges(counter_rows)
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
    def order(kv):                       # deterministic: label, then D and S among equal labels
        c = as_case(next(iter(kv[1].values())))
        return (config_label(c), c["D"], c["S_q"], c["dtype"])
    for rest, ks in sorted(configs.items(), key=order):
        if set(ks) != {"linear", "sawtooth"}:
            continue
        kl, ksw = ks["linear"], ks["sawtooth"]
        c = as_case(kl)
        f_case = flops(c)
        row = dict(config=config_label(c), D=c["D"], S=c["S_q"])
        ml, ms = piv.get(kl, {}), piv.get(ksw, {})
        for name, metric in (("misses", Metric.L2_TEX_MISSES),
                             ("noncomp", Metric.NONCOMPULSORY_MISSES),
                             ("fills", Metric.DRAM_FILL_SECTORS)):
            a, b = ml.get(metric, float("nan")), ms.get(metric, float("nan"))
            row.update({f"{name}_linear": a, f"{name}_sawtooth": b,
                        f"{name}_change_pct": pct_change(b, a)})
        lin_r, saw_r = ranges.get(kl), ranges.get(ksw)
        row.update(misses_linear_lo=lin_r[0] if lin_r else float("nan"),
                   misses_linear_hi=lin_r[1] if lin_r else float("nan"),
                   misses_sawtooth_lo=saw_r[0] if saw_r else float("nan"),
                   misses_sawtooth_hi=saw_r[1] if saw_r else float("nan"),
                   misses_spread_pct=_spread_pct(lin_r, saw_r, row["misses_linear"],
                                                 row["misses_sawtooth"]),
                   misses_verdict=range_verdict(lin_r, saw_r))
        tl, ts = times.get(kl, []), times.get(ksw, [])
        for name, t in (("linear", tl), ("sawtooth", ts)):
            row.update({f"ms_{name}": median(t) if t else float("nan"),
                        f"ms_{name}_min": min(t) if t else float("nan"),
                        f"ms_{name}_max": max(t) if t else float("nan"),
                        f"tflops_{name}": f_case / (median(t) * 1e-3) / 1e12 if t else float("nan"),
                        f"n_{name}": len(t)})
        for name in ("linear", "sawtooth"):            # L2-miss traffic per second, GB/s
            row[f"miss_GBps_{name}"] = row[f"misses_{name}"] * 32 / row[f"ms_{name}"] / 1e6
        row["time_change_pct"] = pct_change(row["ms_sawtooth"], row["ms_linear"])
        row["time_verdict"] = time_verdict(tl, ts)
        out.append(row)
    return out


def peers(timing_rows: list[dict]) -> list[dict]:
    """Median TFLOPS (min..max) of the SDPA peers timed in the same run, per problem."""
    acc: dict[tuple, list[float]] = {}
    for r in timing_rows:
        if (r["backend"].startswith("sdpa") and r["metric"] == Metric.KERNEL_TIME_MS
                and r["value"] > 0):
            acc.setdefault(case_key(r), []).append(float(r["value"]))
    out = []
    for k, t in sorted(acc.items(), key=lambda kv: (kv[0][1], kv[0][6], kv[0][12])):
        c = as_case(k)
        f = flops(c)
        out.append(dict(peer=c["backend"], B=c["B"], S=c["S_q"], causal=c["causal"],
                        ms=median(t), tflops=f / (median(t) * 1e-3) / 1e12,
                        tflops_min=f / (max(t) * 1e-3) / 1e12,
                        tflops_max=f / (min(t) * 1e-3) / 1e12, n=len(t)))
    return out


WITHIN = {"no difference": "=", "sawtooth faster": "-", "sawtooth slower": "+", "not measured": "?"}
"""A run's own time verdict (``time_verdict``) as one character of the ``within`` column."""


def repeat_verdict(changes_pct: Sequence[float], lin: Sequence[float], saw: Sequence[float],
                   within: Sequence[str] | None = None,
                   words: tuple[str, str] = ("sawtooth fewer", "sawtooth more"),
                   ) -> tuple[float, str]:
    """``(noise_pct, verdict)`` of one sawtooth-vs-linear comparison repeated over runs.

    ``changes_pct[i]`` is run i's change (sawtooth vs the linear twin of the same run, % of linear),
    ``lin[i]``/``saw[i]`` the two values it came from (counts, or median times). The run-to-run
    noise is ``100·max(max(lin) − min(lin), max(saw) − min(saw)) / mean(lin)``: the larger of
    the two twins' ranges over the runs, on the scale of the change (% of the linear value). The
    verdict is ``words[0]`` (change < 0) or ``words[1]`` (> 0) only if there are at least two runs,
    every run's change has that sign, the smallest |change| exceeds the noise, and (``within``, for
    time) every run's own verdict (``time_verdict``: medians apart by more than the larger min..max
    of the samples) is in that direction; otherwise "no difference"."""
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
    tabs = [(lab, {(r["config"], r["D"], r["S"]): r for r in sawtooth_vs_linear(c, t)})
            for lab, c, t in runs]
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
            row = dict(config=cfg[0], D=cfg[1], S=cfg[2], quantity=q)
            row.update({f"{lab}_pct": x for (lab, _), x in zip(tabs, changes)})
            row.update(mean_pct=float(np.mean(changes)), min_pct=float(np.min(changes)),
                       max_pct=float(np.max(changes)), noise_pct=noise,
                       within=" ".join(WITHIN[w] for w in within) if within else "",
                       verdict=verdict)
            out.append(row)
    return out


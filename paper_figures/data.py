"""Loading stored results for figures: tidy rows from run directories, never from stdout."""
from __future__ import annotations

from pathlib import Path

from spec.records import read_csv

ROOT = Path(__file__).resolve().parents[1]


class Skip(Exception):
    """A figure cannot be drawn from the data at hand; the message says what is missing."""


def load_rows(run_dirs: list[Path]) -> list[dict]:
    rows = []
    for d in run_dirs:
        for name in ("counters.csv", "timing.csv"):
            if (d / name).exists():
                rows.extend(read_csv(d / name))
    return rows


def select(rows: list[dict], **where) -> list[dict]:
    return [r for r in rows if all(r.get(k) == v for k, v in where.items())]


def find_runs(arch: str) -> list[Path]:
    """Run directories for an arch: committed datasets (profiles/<arch>/) and the latest local run
    of each study (runs/<arch>/<study>/)."""
    found = []
    prof = ROOT / "profiles" / arch
    if prof.is_dir():
        found += sorted(p for p in prof.iterdir() if (p / "manifest.json").exists())
    runs = ROOT / "runs" / arch
    if runs.is_dir():
        for study in sorted(runs.iterdir()):
            done = sorted(p for p in study.iterdir()
                          if not p.name.startswith(".") and (p / "manifest.json").exists())
            if done:
                found.append(done[-1])
    return found


def require(rows: list[dict], what: str, **where) -> list[dict]:
    """``select`` that raises ``Skip`` naming what is missing when nothing matches."""
    got = select(rows, **where)
    if not got:
        cond = ", ".join(f"{k}={v}" for k, v in where.items())
        raise Skip(f"no {what} rows ({cond})")
    return got


def sources(rows: list[dict]) -> set[str]:
    return {r["source"] for r in rows}


def resident(schedule: str) -> int | None:
    """The persistent CTA count of a schedule label ('static132' -> 132); None for other kinds."""
    if schedule.startswith("static") and schedule[6:].isdigit():
        return int(schedule[6:])
    return None


def mean_by(rows: list[dict], *keys: str) -> dict[tuple, float]:
    """Mean ``value`` per combination of ``keys`` (repeated runs or samples averaged)."""
    acc: dict[tuple, list[float]] = {}
    for r in rows:
        acc.setdefault(tuple(r[k] for k in keys), []).append(r["value"])
    return {k: sum(v) / len(v) for k, v in acc.items()}


def tflops_stats(rows: list[dict], study: str, **where) -> dict[tuple, dict]:
    """TFLOPS and kernel time per (variant, B, S_q, D, causal, source): median and the spread of
    the samples (min..max), from 'kernel_time_ms' samples (FLOPs from the problem shape, halved for
    causal); a 'tflops' row without samples is taken as it is (no spread)."""
    from spec import Problem
    out: dict[tuple, dict] = {}
    times: dict[tuple, list[float]] = {}
    base = select(rows, study=study, **where)
    keys = ("variant", "backend", "order", "schedule", "B", "H", "S_q", "S_kv", "D", "causal",
            "source")
    for r in base:
        if r["metric"] == "kernel_time_ms" and r["value"] > 0:
            times.setdefault(tuple(r[k] for k in keys), []).append(r["value"])
    for k, ms in times.items():
        d = dict(zip(keys, k))
        flops = Problem(d["B"], d["H"], d["S_q"], d["D"], S_kv=d["S_kv"], causal=d["causal"]).flops
        tf = sorted(flops / (t * 1e-3) / 1e12 for t in ms)
        ms = sorted(ms)
        out[k] = dict(d, n=len(ms), ms=_median(ms), ms_lo=ms[0], ms_hi=ms[-1],
                      tflops=_median(tf), tflops_lo=tf[0], tflops_hi=tf[-1])
    for r in base:
        k = tuple(r[kk] for kk in keys)
        if r["metric"] == "tflops" and k not in out:
            out[k] = dict(zip(keys, k), n=1, ms=float("nan"), ms_lo=float("nan"),
                          ms_hi=float("nan"), tflops=r["value"], tflops_lo=r["value"],
                          tflops_hi=r["value"])
    return out


def _median(xs: list[float]) -> float:
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])

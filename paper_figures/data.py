"""Selecting rows for figures: the runs come from ``analysis.data`` (which run, and the reader);
the helpers here cut the loaded rows down to what one figure draws.

Every row read by ``analysis.data.load_rows`` carries the run directory it came from
(``run_dir``). Several runs of one study may be loaded at once (a committed run
and its repeats ``<run>-r2``, ``<run>-r3``, or runs named with ``--run``): a figure of one study
draws exactly one of them (``one_run``) unless it is about the repeats themselves (``runs_of``).
"""
from __future__ import annotations

import re
from pathlib import Path

from analysis.data import RUN_DIR, DatasetError, read_manifest, run_of
from analysis.data.rows import median


class Skip(Exception):
    """A figure cannot be drawn from the data at hand; the message says what is missing."""




def run_name(run: str) -> str:
    """A run's name: its directory's name (``profiles/<arch>/<name>`` -> ``<name>``)."""
    return Path(run).name


def runs_of(rows: list[dict], study: str) -> dict[str, list[dict]]:
    """The rows of ``study`` per run, runs in the order they were loaded."""
    out: dict[str, list[dict]] = {}
    for r in rows:
        if r["study"] == study:
            out.setdefault(run_of(r), []).append(r)
    return out


_REPEAT = re.compile(r"^(?P<base>.+)-r(?P<k>\d+)$")


def primary_run(rows: list[dict], study: str) -> str | None:
    """The one run of ``study`` that single-run figures draw. A run whose directory is named
    ``<base>-r<k>`` is a repeat of ``<base>`` and is passed over when ``<base>`` is loaded too;
    of the rest, the first loaded: runs are loaded in the order ``analysis.data`` selected
    them or the user named them, so the run drawn is the selected one (or the first named). None
    when no run has rows of the study."""
    runs = runs_of(rows, study)
    names = {run_name(k) for k in runs}
    first = [k for k in runs
             if not (m := _REPEAT.match(run_name(k))) or m.group("base") not in names]
    return first[0] if first else None


def one_run(rows: list[dict], study: str) -> tuple[list[dict], dict]:
    """``rows`` with the rows of ``study`` cut down to its ``primary_run`` (other studies' rows
    untouched), and what was chosen: {'run': name, 'n_runs': runs of the study loaded,
    'note': a line for a title when another run was left out, else ''}."""
    runs = runs_of(rows, study)
    keep = primary_run(rows, study)
    if len(runs) <= 1:
        return rows, {"run": run_name(keep) if keep else None, "n_runs": len(runs), "note": ""}
    note = f"run {run_name(keep)} only; {len(runs) - 1} other run(s) loaded, not mixed in"
    return ([r for r in rows if r["study"] != study or run_of(r) == keep],
            {"run": run_name(keep), "n_runs": len(runs), "note": note})


def manifest(rows: list[dict]) -> dict:
    """The manifest.json of the run the rows came from ({} when there is none or several runs)."""
    dirs = {r.get(RUN_DIR) for r in rows}
    if len(dirs) != 1 or None in dirs:
        return {}
    try:
        return read_manifest(Path(dirs.pop()))
    except DatasetError:
        return {}


def manifest_device(m: dict) -> str | None:
    """The GPU a manifest says the run was measured on (its layout differs between tools)."""
    for d in (m.get("device"), (m.get("parameters") or {}).get("device")):
        if isinstance(d, str) and d:
            return d
        if isinstance(d, dict) and d.get("gpu"):
            return d["gpu"]
    return None


def manifest_command(m: dict) -> str | None:
    """The manifest's command with the checkout's absolute path dropped
    ('python /work/main/experiments/run.py ...' -> 'python experiments/run.py ...')."""
    cmd = m.get("command")
    if not cmd:
        return None
    return re.sub(r"\S*/(?=(experiments|cuda_baseline|kernels|profiles)/)", "", cmd)


def select(rows: list[dict], **where) -> list[dict]:
    return [r for r in rows if all(r.get(k) == v for k, v in where.items())]



def require(rows: list[dict], what: str, **where) -> list[dict]:
    """``select`` that raises ``Skip`` naming what is missing when nothing matches."""
    got = select(rows, **where)
    if not got:
        cond = ", ".join(f"{k}={v}" for k, v in where.items())
        raise Skip(f"no {what} rows ({cond})")
    return got


def sources(rows: list[dict]) -> set[str]:
    return {r["source"] for r in rows}



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
        out[k] = dict(d, n=len(ms), ms=median(ms), ms_lo=ms[0], ms_hi=ms[-1],
                      tflops=median(tf), tflops_lo=tf[0], tflops_hi=tf[-1])
    for r in base:
        k = tuple(r[kk] for kk in keys)
        if r["metric"] == "tflops" and k not in out:
            out[k] = dict(zip(keys, k), n=1, ms=float("nan"), ms_lo=float("nan"),
                          ms_hi=float("nan"), tflops=r["value"], tflops_lo=r["value"],
                          tflops_hi=r["value"])
    return out


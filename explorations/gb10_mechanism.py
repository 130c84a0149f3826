"""Candidate mechanisms for the paper's GB10 counts, each run on GB10 and on H100 holdouts.

It reports and never chooses. Each candidate changes one thing in the timed simulator
(``analysis.cache.timesim``); the candidates and their values are fixed in the code below,
before any run. On the paper's 16 GB10 cases (``experiments.registry.plans.sawtooth_plan``) it
prints each candidate's simulated counts beside the published ones and nothing else: no count
of cases within a bound, no median error, no ranking, no best candidate. A model change is
justified by H100/H200 measurements only; the published counts judge a frozen model version
once, and a scan that scores points against them selects the model against its own judge
(docs/model-card.md). On the cuTile cases of the H100 holdouts i and j (S = 294912, 311296; all
32 cases against their committed measured medians) it prints each candidate's relative RMS over
the causal cuTile cases, the question of the issue, and over the stable ones, whose launches
agree within 15%. The candidates:

- ``committed``: the model before the GB10 mechanism study (GB10 Tile-based builds at occupancy 2,
  96 resident CTAs).
- ``occupancy``: the paper's builds as the authors compiled them (``AUTHORS_OCCUPANCY``: one
  CTA per SM on sm_121, 48 resident Tile-based CTAs); every later candidate includes it.
- ``miss_ratio=r``: a missing step lasts ``r`` hit steps (a convoy force: the leader that misses
  falls back, followers that hit catch up). A sensitivity scan, not a fit: no value of ``r`` is
  derived for GB10 (the H100 derivation gives 1).
- ``dram t_c=x``: DRAM as one FIFO server at the published bandwidth (GB10 273 GB/s, H100 3.35
  TB/s): a fill completes no earlier than the queue has streamed every fill before it
  (``TimeParams.dram_step_sectors`` = bandwidth x hit step / 32 B). The hit step ``t_c`` on the
  H100 is measured (0.53 us, cuTile 64x64 Static, ``profiles/h100/sawtooth-20261123``); on GB10
  it is that value scaled by a stated rule, bracketed by 0.53 us (same per-SM speed) and 1.53 us
  (the ratio of dense fp16 tensor rate per SM, 7.5 against 2.6 TFLOPS), and 0.8 us between.
- ``drift``: each CTA's constant speed drawn with the spread measured on the H100 (sd 0.07% for
  the cuTile builds, 0.2% for CUDA; ``profiles/h100/drift-spy-20261125c``), three seeds;
  ``dram ... + drift``: both, the queue's pull against the spread's push.

These candidates are step-model variants (every step one unit, a miss at most ``r`` units), run
before the pipeline model; the simulator's default since is the pipeline model
(``analysis.models.steptime``), which this script does not apply.

    python -m explorations.gb10_mechanism --out DIR      # ~20 min on 2 cores
    python -m explorations.gb10_mechanism --arch gb10 --candidates occupancy --out DIR   # ~20 s

writes ``gb10.csv.gz`` and ``h100.csv.gz`` (one row per candidate and case) and ``summary.txt``
(what it prints).
"""
from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from spec.records import write_dicts

GB10_TC_US = (0.53, 0.8, 1.53)
H100_TC_US = 0.53
DRIFT = {"cutile": 0.0007, "cuda": 0.002}
HOLDOUTS = {294912: "profiles/cpu/simcheck-h100-holdout-20261125i/errors.csv.xz",
            311296: "profiles/cpu/simcheck-h100-holdout-20261125j/errors.csv.xz"}


def candidates(arch_name: str) -> list[tuple[str, dict, bool]]:
    """(name, TimeParams overrides, drift) of every candidate; GB10 also has ``committed``."""
    bw = {"gb10": 273e9, "h100": 3.35e12}[arch_name]
    tcs = GB10_TC_US if arch_name == "gb10" else (H100_TC_US,)
    out = [("occupancy", {}, False)]
    out += [(f"miss_ratio={r:g}", {"miss_ratio": r}, False) for r in (1.003, 1.01, 1.03, 1.1, 1.5)]
    out += [(f"dram t_c={t:g}us", {"dram_step_sectors": bw * t * 1e-6 / 32}, False) for t in tcs]
    out += [("drift", {}, True)]
    out += [(f"dram t_c={t:g}us + drift", {"dram_step_sectors": bw * t * 1e-6 / 32}, True)
            for t in tcs]
    return out


def _sim(case, tp, arch):
    from analysis.cache import timesim
    return timesim.simulate_case(case, tp, arch.sector_bytes, auto_sample=True).tex_misses


def run_arch(arch_name: str, jobs: int = 2, only: set[str] | None = None) -> list[dict]:
    """The rows of every candidate (or those named in ``only``) on ``arch_name``'s cases."""
    from analysis.data import csv_rows
    from analysis.data.published import key_of_row, read_published
    from experiments.registry.plans import sawtooth_plan
    from experiments.simulation.simulate import model_params, resident_of_build
    from spec import get_arch
    from spec.records import case_fields

    arch = get_arch(arch_name)
    tp0 = model_params(arch).time_params(arch)
    if arch_name == "gb10":
        truth = {c.key: c.misses for c in read_published()}
        plan = [(c, truth[key_of_row(case_fields(c.problem, c.variant))])
                for c in sawtooth_plan(arch)]
    else:
        plan = []
        for s, path in HOLDOUTS.items():
            meas = {r["case"]: (float(r["measured_median"]), float(r["spread"]))
                    for r in csv_rows(path, typed=False)}
            for c in sawtooth_plan(arch):
                c = replace(c, problem=replace(c.problem, S_q=s, S_kv=s))
                plan.append((c, meas[c.id]))
    jobs_list = []
    for name, over, drift in candidates(arch_name):
        if only is not None and name not in only:
            continue
        for case, truth in plan:
            case = resident_of_build(case, arch)[0]
            seeds = (0, 1, 2) if drift else (0,)
            for seed in seeds:
                tp = replace(tp0, seed=seed, **over)
                if drift:
                    tp = replace(tp, rate_jitter=DRIFT[case.variant.backend.value])
                jobs_list.append((name, case, truth, tp, seed))
    if arch_name == "gb10" and (only is None or "committed" in only):   # Tile-based at occ. 2
        for case, truth in plan:
            c2 = replace(case, variant=replace(case.variant, occupancy=2))
            jobs_list.append(("committed", resident_of_build(c2, arch)[0], truth, tp0, 0))
    with ThreadPoolExecutor(jobs) as ex:
        sims = list(ex.map(lambda j: _sim(j[1], j[3], arch), jobs_list))
    rows = []
    for (name, case, truth, tp, seed), sim in zip(jobs_list, sims):
        measured, spread = truth if isinstance(truth, tuple) else (truth, 0.0)
        rows.append({"arch": arch_name, "candidate": name, "case": case.id,
                     "causal": case.problem.causal, "order": case.variant.order.kind.name.lower(),
                     "resident": case.resident, "seed": seed, "simulated": sim,
                     "truth": measured, "truth_spread": spread,
                     "rel_err": sim / measured - 1.0, "note": tp.note()})
    return rows


def _label(case_id: str) -> str:
    """A short name of a case id ('cutile static48 linear b8 causal')."""
    variant, problem = case_id.split(" ")
    family, order, sched = variant.split(".")[:3]
    return f"{family} {sched} {order} {problem.split('h')[0]} {problem.rsplit('.', 1)[1]}"


def summarise(rows: list[dict]) -> list[str]:
    """Per candidate: on GB10 its simulated count of each of the 16 cases (millions of sectors,
    the median over its seeds) beside the published ones and its causal Static sawtooth change
    beside the published change, a report that scores, ranks and picks nothing; on the H100 its
    relative RMS against the measured medians over the causal cuTile and the stable cases (H100
    measurements may justify a model change; the published GB10 counts may not)."""
    out = []
    by: dict[tuple, list[dict]] = {}
    for r in rows:
        by.setdefault((r["arch"], r["candidate"]), []).append(r)
    header = False
    for (arch, name), rs in by.items():
        per: dict[str, list[float]] = {}
        for r in rs:
            per.setdefault(r["case"], []).append(r["simulated"])
        sim = {c: float(np.median(v)) for c, v in per.items()}
        truth = {r["case"]: r["truth"] for r in rs}
        err = {c: sim[c] / truth[c] - 1 for c in sim}
        causal = [c for c in sim if c.endswith("causal")]
        if arch == "gb10":
            lin = next(c for c in causal if c.startswith("cutile.linear.static"))
            saw = lin.replace("linear", "sawtooth", 1)
            ch = 100 * (sim[saw] / sim[lin] - 1)
            if not header:
                out.append("gb10 cases, in this order: " + "; ".join(_label(c) for c in sim))
                out.append(f"gb10 {'published':26s} "
                           + " ".join(f"{truth[c] / 1e6:7.1f}" for c in sim)
                           + f" | causal Static sawtooth change "
                             f"{100 * (truth[saw] / truth[lin] - 1):+6.1f}%")
                header = True
            out.append(f"gb10 {name:26s} " + " ".join(f"{sim[c] / 1e6:7.1f}" for c in sim)
                       + f" | causal Static sawtooth change {ch:+6.1f}%")
        else:
            factor = max(max(sim[c] / truth[c], truth[c] / sim[c]) for c in causal)
            stable = [c for c in sim if next(r for r in rs if r["case"] == c)["truth_spread"]
                      <= 0.15]
            rms = lambda cs: 100 * float(np.sqrt(np.mean([err[c] ** 2 for c in cs])))
            ccut = [c for c in causal if c.startswith("cutile")]
            out.append(f"h100 {name:26s} causal cuTile rel. RMS {rms(ccut):5.1f}% "
                       f"({len(ccut)} cases), stable {rms(stable):5.1f}% ({len(stable)} of "
                       f"{len(sim)}), causal worst x{factor:4.2f}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="directory to create")
    ap.add_argument("--arch", default="gb10,h100")
    ap.add_argument("--candidates", help="comma-separated candidate names (default: all)")
    a = ap.parse_args(argv)
    only = set(a.candidates.split(",")) if a.candidates else None
    known = {n for arch in a.arch.split(",") for n, *_ in candidates(arch)} | {"committed"}
    if only and not only <= known:
        print(f"unknown candidate(s) {sorted(only - known)}; known: {sorted(known)}",
              file=sys.stderr)
        return 2
    if a.out.exists():
        print(f"{a.out} exists; name a new directory", file=sys.stderr)
        return 2
    rows = [r for arch in a.arch.split(",") for r in run_arch(arch, only=only)]
    a.out.mkdir(parents=True)
    for arch in a.arch.split(","):
        write_dicts(a.out / f"{arch}.csv.gz", (r for r in rows if r["arch"] == arch),
                    list(rows[0]))
    lines = summarise(rows)       # a report: nothing is scored or picked against the paper
    (a.out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

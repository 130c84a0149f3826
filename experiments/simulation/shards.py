"""SHARDS sampling against the exact timed simulator, under the model that runs now.

    python -m experiments.simulation.shards --arch gb10 --out profiles/cpu/shards-gb10-20261128b

Every case of a study (default: the main command's, ``sawtooth``) at seeds 0..N-1 (``--seeds``,
default ``SPREAD_SEEDS``), each simulated exactly and SHARDS-sampled at the size rule, both
through ``experiments.simulation.simulate.timed_counts`` (the build's resident CTAs and pipeline
timing, as ``experiments.run`` simulates them). The seed moves only the per-step jitter's
draws; the sample itself is systematic. Writes ``shards.csv`` (a row per case and seed: exact and
sampled tex misses, the sampled one's error), a manifest whose ``err_pct_min`` /
``err_pct_max`` (over every case and seed) and ``model_version`` a sampled row of
``experiments.run --sample`` quotes (``simulate.SHARDS_RUN``), and the per-case spreads of both.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from analysis.cache.sampling import SPREAD_SEEDS
from spec import get_arch
from spec.records import write_dicts

from ..rundirs.rundir import RunDirExists, check_new, command_line, reserved_run_dir, write_manifest

MODULE = "experiments.simulation.shards"


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="gb10", help="registry name (default gb10)")
    ap.add_argument("--study", default="sawtooth", help="study whose plan runs (default sawtooth)")
    ap.add_argument("--seeds", type=int, default=SPREAD_SEEDS, help="seeds 0..N-1 (default "
                    f"{SPREAD_SEEDS})")
    ap.add_argument("--jobs", type=int, default=None, help="simulations at once, one thread "
                    "each (default: the CPUs this process may use)")
    ap.add_argument("--out", type=Path, required=True, help="new run directory")
    return ap.parse_args(argv)


def run(arch_name: str, study: str, seeds: int, jobs: int) -> tuple[list[dict], dict]:
    """(one row per case and seed, the manifest's summary fields)."""
    from analysis.cache import timesim
    from experiments.registry.studies import get_study
    from experiments.simulation.simulate import model_params, resident_of_build, timed_counts
    arch = get_arch(arch_name)
    params = model_params(arch)
    cases = [resident_of_build(c, arch)[0] for c in get_study(study).plan(arch)]
    work = [(i, s, sample) for i in range(len(cases)) for s in range(seeds)
            for sample in (False, True)]
    work.sort(key=lambda w: (w[2], -cases[w[0]].problem.B))         # exact, larger first

    def one(w):
        i, s, sample = w
        return w, timed_counts(cases[i], arch, params, seed=s, sample=sample)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        got = dict(pool.map(one, work))
    rows, per_case = [], {}
    for i, c in enumerate(cases):
        ex = [got[i, s, False] for s in range(seeds)]
        sa = [got[i, s, True] for s in range(seeds)]
        errs = [100.0 * (b.tex_misses / max(a.tex_misses, 1) - 1) for a, b in zip(ex, sa)]
        for s in range(seeds):
            rows.append({"case": c.id, "B": c.problem.B, "causal": c.problem.causal, "seed": s,
                         "exact_misses": ex[s].tex_misses, "sampled_misses": sa[s].tex_misses,
                         "sample_rate": sa[s].params.sample_rate,
                         "sampled_err_pct": round(errs[s], 4)})
        per_case[c.id] = {
            "exact_misses": [min(a.tex_misses for a in ex), max(a.tex_misses for a in ex)],
            "sampled_misses": [min(b.tex_misses for b in sa), max(b.tex_misses for b in sa)],
            "sampled_err_pct": [round(min(errs), 4), round(max(errs), 4)]}
    every = [r["sampled_err_pct"] for r in rows]
    summary = {"model_version": timesim.MODEL_VERSION, "arch": arch.name, "plan_study": study,
               "seeds": list(range(seeds)), "params_note": params.note(),
               "err_pct_min": min(every), "err_pct_max": max(every),
               "max_abs_err_pct": max(abs(e) for e in every), "per_case": per_case}
    return rows, summary


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = parse(argv)
    try:
        get_arch(a.arch)
        if a.seeds < 1:
            raise ValueError("--seeds must be >= 1")
        check_new(a.out)
    except (ValueError, RunDirExists) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    with reserved_run_dir(a.out) as (final, work):
        rows, summary = run(a.arch, a.study, a.seeds, a.jobs or len(os.sched_getaffinity(0)))
        write_dicts(work / "shards.csv", rows)
        write_manifest(work, command=command_line(MODULE, argv), study="shards", mode="simulate",
                       wall_seconds=round(time.perf_counter() - t0, 1), **summary)
    print(f"{'case':<70} {'exact M':>17} {'sampled M':>17} {'sampled err %':>15}")
    for case, d in summary["per_case"].items():
        ex, sa, er = d["exact_misses"], d["sampled_misses"], d["sampled_err_pct"]
        print(f"{case:<70} {ex[0] / 1e6:8.2f}..{ex[1] / 1e6:<8.2f} {sa[0] / 1e6:8.2f}.."
              f"{sa[1] / 1e6:<8.2f} {er[0]:+7.1f}..{er[1]:+.1f}")
    print(f"sampled against exact, seeds {summary['seeds'][0]}-{summary['seeds'][-1]}: "
          f"{summary['err_pct_min']:+.1f}..{summary['err_pct_max']:+.1f}% "
          f"({summary['model_version']}); wrote {final}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

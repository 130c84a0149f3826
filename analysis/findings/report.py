"""The findings report: every section for one arch, from the runs ``analysis.data`` selects,
and its output (markdown tables on stdout; with an output directory, one CSV per section and the
markdown file, written as a new directory atomically)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np

from analysis.calibration import default_params
from analysis.data import (
    ANY,
    Dataset,
    DatasetError,
    dataset,
    new_directory,
    read_manifest,
    read_run,
    registry,
    repeated_runs,
    repeats_of,
    select,
)
from analysis.data.published import PAPER, check_against, read_published
from analysis.findings.active import hit_vs_active
from analysis.findings.backward import sections as backward_sections
from analysis.findings.consistency import consistency
from analysis.findings.convoy import sections as convoy_sections
from analysis.findings.divergence import divergence_fits, divergence_points
from analysis.findings.dram import dram_bound, spill_artifact
from analysis.findings.drift import drift_table
from analysis.findings.l1 import l1_passthrough
from analysis.findings.longseq import longseq_best
from analysis.findings.misscost import misscost_table
from analysis.findings.paper import (
    by_occupancy,
    case_table,
    hints_builds,
    implied_capacity,
    pair_table,
    speedup_needs,
    summary,
)
from analysis.findings.pipeline import (
    PIPELINE_PREDICTION,
    PIPELINE_RUN,
    SPILLS_PREDICTION,
    SPILLS_RUN,
    pipeline_check,
    spill_cost,
)
from analysis.findings.pipeline import summary as pipeline_summary
from analysis.findings.sawtooth import peers, sawtooth_repeats, sawtooth_vs_linear
from analysis.findings.traffic import traffic_model_error
from analysis.findings.validation import simcheck_summaries
from analysis.models.timemodel import FACTS
from spec import get_arch
from spec.records import Metric, write_dicts

HINTS_PREDICTION = "profiles/cpu/prediction-h100-hints-20261126"
"""The simulated counts of the hints study, committed before its H100 runs (section P5)."""
SPILL_ARTIFACT = "longseq-forloop-spill-20261121"
"""The registered evidence whose ``profile`` run is the for-loop build that spilled (9b only)."""

STUDIES = ("sawtooth", "traffic", "divergence", "l1l2", "active-sms", "drift", "longseq",
           "misscost")
NAMEABLE = STUDIES + ("hints",)
"""The studies whose selected run ``--run`` may replace (the sections read them through ``Runs``);
a named run of another study is refused rather than ignored."""


class Runs:
    """The runs the sections read: per study the named run (``named``, by the manifest's study)
    or the one ``analysis.data.select`` picks (measured, default parameters)."""

    def __init__(self, arch: str, named: Sequence[Path] = ()):
        self.arch = arch
        self.named: dict[str, Dataset] = {}
        for p in named:
            ds = dataset(p, arch)
            if ds.study in self.named:
                raise DatasetError(f"two runs of the study {ds.study!r} named "
                                   f"({self.named[ds.study].path} and {p}); name one run per study")
            self.named[ds.study] = ds
        self._tables: dict[Path, dict[str, list[dict]]] = {}

    def get(self, study: str, **kw) -> Dataset | None:
        if study in self.named and not kw:
            return self.named[study]
        return select(self.arch, study, source="measured", **kw)

    def tables(self, ds: Dataset | None) -> dict[str, list[dict]]:
        """``{file name: rows}`` of a run (``read_run``, read once); empty for none."""
        if ds is None:
            return {}
        if ds.path not in self._tables:
            self._tables[ds.path] = read_run(ds.path)
        return self._tables[ds.path]

    def rows(self, ds: Dataset | None) -> tuple[list[dict], list[dict]]:
        """(counter rows, timing rows) of a run; empty for none."""
        t = self.tables(ds)
        return t.get("counters.csv", []), t.get("timing.csv", [])

    def repeats(self, study: str) -> list[Dataset]:
        """The best run of ``study`` that has repeats (``-r2``, ...) and them
        (``data.repeated_runs``); the selected run alone when none has; a named run alone."""
        if study in self.named:
            return [self.named[study]]
        runs = repeated_runs(self.arch, study)
        if runs:
            return runs
        ds = self.get(study)
        return repeats_of(ds) if ds else []


def _predicted_vs_measured(arch: str, prediction: str, run: str) -> list[dict]:
    """The pipeline model's committed prediction against the H100 run it predicted (no rows on
    another arch): misses and time per case (``pipeline_check``)."""
    if arch != "h100":
        return []
    measured = read_run(run)
    return pipeline_check(read_run(prediction).get("counters.csv", []),
                          measured.get("counters.csv", []), measured.get("timing.csv", []))


def compute(arch: str, *, sim: bool = True, cache_dir: Path | None = None,
            max_accesses: int = 180_000_000, runs: Sequence[Path] = (),
            log=print) -> dict[str, tuple[str, list[dict]]]:
    """All sections for ``arch``: ``{name: (title, rows)}``. ``runs``: run directories that replace
    the selected run of their study."""
    a = get_arch(arch)
    R = Runs(arch, runs)
    chosen = {s: R.get(s) for s in STUDIES}
    cnt = {s: R.rows(chosen[s])[0] for s in STUDIES}
    tim = {s: R.rows(chosen[s])[1] for s in STUDIES}
    saw_runs = R.repeats("sawtooth")
    lp = R.get("longseq", name="longseq-profile", params={"filter": ANY})
    lp_c, lp_t = R.rows(lp)
    name = {s: chosen[s].label if chosen[s] else "no run" for s in STUDIES}

    out: dict[str, tuple[str, list[dict]]] = {}
    out.update(paper_sections(arch, chosen["sawtooth"], cnt["sawtooth"] + tim["sawtooth"]))
    by_study = {s: cnt[s] for s in ("sawtooth", "traffic", "divergence", "l1l2", "active-sms")
                if cnt[s]}
    by_study.update({f"sawtooth r{i}": R.rows(d)[0] for i, d in enumerate(saw_runs, 1) if i > 1})
    by_study["longseq-profile"] = lp_c
    hints = [(f"r{i}", *R.rows(d)) for i, d in enumerate(R.repeats("hints"), 1)]
    pred = read_run(Path(HINTS_PREDICTION)).get("counters.csv", []) if arch == "h100" else []
    out["sP5_hints"] = ("P5. The paper's occupancy hint (1) beside the study's (2) on the "
                        f"{arch} (hints study, runs {', '.join(l for l, *_ in hints) or 'none'}): "
                        "misses over every launch, the prediction committed before the runs, "
                        "median time per run", hints_builds(hints, pred))
    out["sP5_hints_repeats"] = ("P5b. The hints study's sawtooth-vs-linear changes per run and "
                                "occupancy (section 5c's rule)",
                                by_occupancy(hints, sawtooth_repeats))
    rows = _predicted_vs_measured(arch, PIPELINE_PREDICTION, PIPELINE_RUN)
    out["sP7_pipeline"] = ("P7. The pipeline model against the H100 run it predicted (CUDA "
                           f"80x80, 96 CTAs, S=327680, K/V pipeline depth 1-3; "
                           f"{PIPELINE_PREDICTION} committed before {PIPELINE_RUN}): misses "
                           "(median, min..max of 3 launches) and time, predicted vs measured",
                           rows)
    out["sP7_pipeline_summary"] = ("P7b. Its scores: relative RMS error of misses and times, "
                                   "cases within 25%", pipeline_summary(rows) if rows else [])
    rows = _predicted_vs_measured(arch, SPILLS_PREDICTION, SPILLS_RUN)
    out["sP8_spills"] = ("P8. A build that spills in its step loop beside its spill-free twin "
                         f"(causal cuTile Static 64x64, 132 CTAs, S=262144, occupancy 1 and 2; "
                         f"{SPILLS_PREDICTION} committed before {SPILLS_RUN}): misses and time, "
                         "predicted vs measured", rows)
    out["sP8_spill_cost"] = ("P8b. The time a spill adds: each occupancy-1 build against its "
                             "spill-free occupancy-2 twin (measured)", spill_cost(rows))
    out.update(backward_sections(arch))
    out.update(convoy_sections(arch))
    out["s0_consistency"] = ("0. Counter consistency: (hits + misses) / srcunit_tex sectors "
                             f"(sawtooth = its run r1 = {name['sawtooth']}; repeats listed apart)",
                             consistency({s: r for s, r in by_study.items() if r}))
    # the sawtooth run that collected L1 counters (the newest may not have: --groups)
    l1_run = next((d for d in [chosen["sawtooth"], *saw_runs] if d is not None and any(
        r["metric"] == Metric.L1_SECTORS for r in R.rows(d)[0])), None)
    l1_label = l1_run.label if l1_run else "no run with L1 counters"
    out["s1_l1_passthrough"] = (f"1. L1 pass-through (l1l2 study: CUDA, {name['l1l2']}; sawtooth "
                                f"study: cuTile, {l1_label})",
                                l1_passthrough(cnt["l1l2"], R.rows(l1_run)[0]))
    out["s2_model_error"] = (f"2. Sector-access model error (traffic study, {name['traffic']}, "
                             f"exact model)", traffic_model_error(cnt["traffic"]))
    out["s3_divergence"] = (f"3a. Misses vs the cold-miss line, cross-partition share "
                            f"(divergence, {name['divergence']})",
                            divergence_points(cnt["divergence"], a.l2_bytes))
    out["s3_ceff_fit"] = (f"3b. Wave-model C_eff fit per order (divergence, {name['divergence']})",
                          divergence_fits(cnt["divergence"], a.l2_bytes)
                          if cnt["divergence"] else [])
    hv_src = "active-sms" if cnt["active-sms"] else "l1l2"
    out["s4_hit_vs_active"] = (f"4. L2 hit rate vs active CTAs against 1 - 1/N ({hv_src} study, "
                               f"{name[hv_src]})", hit_vs_active(cnt[hv_src], hv_src))
    r1_name = f"run r1 = {name['sawtooth']}" if chosen["sawtooth"] else "no run"
    out["s5_sawtooth_vs_linear"] = (f"5. Sawtooth vs linear per configuration (sawtooth study, "
                                    f"{r1_name})",
                                    sawtooth_vs_linear(cnt["sawtooth"], tim["sawtooth"]))
    out["s5_peers"] = (f"5b. SDPA peers timed in the same run (sawtooth study, {r1_name})",
                       peers(tim["sawtooth"]))
    labelled = [(f"r{i}", *R.rows(d)) for i, d in enumerate(saw_runs, 1)]
    names = ", ".join(f"r{i} = {d.label}" for i, d in enumerate(saw_runs, 1))
    out["s5_repeats"] = (f"5c. Sawtooth vs linear across repeated runs ({names or 'none'}"
                         f"{'' if len(saw_runs) >= 2 else '; needs >= 2 runs'}): % change per run; "
                         f"noise_pct = the larger run-to-run range of the two twins, % of the "
                         f"linear mean; a difference needs one sign in every run, min |change| > "
                         f"noise_pct and, for time, every run's own verdict (within: + slower, "
                         f"- faster, = inside the sample spread)", sawtooth_repeats(labelled))
    out["s6_drift"] = (f"6. CTA drift: start-time spread over the CTAs, in steps "
                       f"({name['drift'] if chosen['drift'] else 'no drift run'}; sampled steps)",
                       drift_table(R.tables(chosen["drift"]).get("drift.csv", []), a.l2_bytes))
    if sim:
        from analysis.findings.simulator import (
            measured_cases,
            run_cases,
            sim_order_changes,
            simulator_vs_measured,
        )
        log("section 7: simulating the measured sawtooth and divergence cases ...")
        sims = []
        for study in ("sawtooth", "divergence"):
            ds = chosen[study]
            if ds is not None:
                sims += measured_cases(study, run_cases(ds.path, cnt[study], a, study), cnt[study])
        rows, fit = simulator_vs_measured(sims, a, cache_dir=cache_dir,
                                          max_accesses=max_accesses, log=log)
        out["s7_capacity_fit"] = ("7a. One effective LRU capacity fitted to the non-causal CUDA "
                                  "cases (relative least squares)", [fit] if fit else [])
        out["s7_sim_vs_measured"] = (f"7b. Simulator vs measured L2 misses per case (sawtooth "
                                     f"study {r1_name}; divergence study, {name['divergence']})",
                                     rows)
        out["s7_order_change"] = ("7c. Sawtooth vs linear change in misses, measured vs simulated",
                                  sim_order_changes(rows))
    out["s7_timed_validation"] = (
        "7d. Timed two-partition simulator vs measured misses, in sample (the fit study) and out "
        "of sample, per committed validation (python -m analysis.calibration validate; "
        "relative RMS over the cases whose launches agree within 15%; simulated vs measured)",
        simcheck_summaries(arch))
    out["s8_longseq_best"] = (f"8. Best configuration at long S (longseq study"
                              f"{', ' + name['longseq'] if chosen['longseq'] else ': no run'})",
                              longseq_best(tim["longseq"]))
    out["s8_longseq_counters"] = (f"8b. Sawtooth vs linear at long S with repeated one-pass "
                                  f"counters (longseq study"
                                  f"{', ' + name['longseq'] if chosen['longseq'] else ': no run'}"
                                  f"; misses_spread_pct = the larger (max - min) / median of "
                                  f"the twins' launches)",
                                  sawtooth_vs_linear(cnt["longseq"], tim["longseq"])
                                  if cnt["longseq"] else [])
    peak = a.dram_bytes_per_s or float("nan")      # the arch registry's published peak
    out["s9_dram_bound"] = (f"9a. DRAM bound (longseq-profile"
                            f"{', ' + lp.label if lp else ': no run'}; peak "
                            f"{peak / 1e12:.2f} TB/s)", dram_bound(lp_c, lp_t, peak))
    spill = registry.find(arch=arch, prefix=f"{arch}/{SPILL_ARTIFACT}")
    spill_rows = read_run(f"{spill[0].path}/profile") if spill and lp else {}
    out["s9_spill_artifact"] = (f"9b. Spill artifact: for-loop build ({SPILL_ARTIFACT}/profile) "
                                f"vs the fixed while-loop build ({lp.label if lp else 'no run'})",
                                spill_artifact((spill_rows.get("counters.csv", []),
                                                spill_rows.get("timing.csv", [])), (lp_c, lp_t))
                                if spill_rows else [])
    out["s9_dram_bound_sawtooth"] = (f"9c. DRAM bound of the sawtooth-study kernels ({r1_name}; "
                                     f"peak {peak / 1e12:.2f} TB/s)",
                                     dram_bound(cnt["sawtooth"], tim["sawtooth"], peak))
    mc_runs = R.repeats("misscost")
    facts = FACTS.get(arch)
    out["s10_misscost"] = (
        f"10. Where a miss costs time: sawtooth vs linear time per K/V pipeline depth and DRAM "
        f"streamer level (misscost study, "
        f"{', '.join(f'r{i} = {d.label}' for i, d in enumerate(mc_runs, 1)) or 'no run'}); "
        f"verdict: the rule of 5c over the runs; predicted_pct: analysis.models.timemodel "
        f"({facts.source if facts else 'no memory facts for ' + arch})",
        misscost_table([(f"r{i}", *R.rows(d)) for i, d in enumerate(mc_runs, 1)], facts)
        if mc_runs and facts else [])
    return out


def _simulated_how(ds: Dataset) -> str:
    """How a simulated run counted, from its manifest: exact, or SHARDS-sampled (every timed
    run before the main command turned exact on 2026-11-28 was), and the model version."""
    p = read_manifest(ds.path).get("parameters") or {}
    how = "sampled (SHARDS, one seed)" if p.get("sampled", not p.get("exact", False)) \
        else "exact simulator"
    return f"{how}, model {p.get('model_version', 'unversioned')}"


def paper_sections(arch: str, measured: Dataset | None,
                   measured_rows: list[dict]) -> dict[str, tuple[str, list[dict]]]:
    """Section P: the paper's published GB10 values beside the committed simulated GB10 run and
    the ``arch``'s measured sawtooth study (``analysis.findings.paper``)."""
    cases = read_published()
    gb10 = get_arch("gb10")
    sim = select("gb10", "sawtooth", source="simulated")
    sim_rows = read_run(sim.path).get("counters.csv", []) if sim else []
    if sim_rows:
        check_against(cases, sim_rows, f"the simulated GB10 run {sim.label}")
    if arch == "gb10":
        measured, measured_rows = None, []
    gpu = arch
    run = measured.label if measured else "no measured run"
    sim_name = (f"{sim.label}, {_simulated_how(sim)}" if sim and sim_rows
                else "no simulated GB10 run")
    rows = case_table(cases, sim_rows, measured_rows, gpu)
    return {
        "sP_paper_cases": (
            f"P. The paper and this framework, per case: published GB10 (arXiv 2601.16032, "
            f"{PAPER}) beside the simulated GB10 run ({sim_name}; error = simulated vs published) "
            f"and the {gpu} measurement at the scaled length ({run}; median and min..max of its "
            f"launches)", rows),
        "sP_paper_summary": (
            "P2. How many published counts the GB10 simulation reproduces within 10% (no "
            "parameter fitted to them), and its largest causal ratio", [summary(rows)]),
        "sP_paper_pairs": (
            f"P3. The paper's sawtooth changes against the simulated GB10 change and the {gpu} "
            f"measurement ({run}): confirms / contradicts / no difference by the min..max rule "
            f"of section 5", pair_table(cases, sim_rows, measured_rows, gpu)),
        "sP_paper_capacity": (
            "P4. The effective capacity each published non-causal sawtooth count implies (wave "
            "model; a reading of the paper's number, fitted to nothing else) beside the capacity "
            "the GB10 simulation is given (its parameters: analysis.calibration.default_params)",
            implied_capacity(cases, gb10.num_sms, gb10.l2_bytes,
                             default_params(gb10)[0].capacity_fraction * gb10.l2_bytes)),
        "sP6_speedup_needs": (
            "P6. What the paper's published speedups ask of the time model (a reading of its "
            "times and counts): time per K/V step, the DRAM rate the misses imply, the wave "
            "model's DRAM fraction f, and the exposed stall per step that the time change needs",
            speedup_needs(cases)),
    }


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
    write_dicts(path, rows, cols)


def write_report(out_dir: Path, arch: str, sections: dict[str, tuple[str, list[dict]]],
                 text: str) -> Path:
    """Write ``<section>.csv`` and ``findings-<arch>.md`` into the new directory ``out_dir``
    (``analysis.data.new_directory``: refused if it exists, renamed into place when complete)."""
    with new_directory(out_dir) as tmp:
        for name, (_, rows) in sections.items():
            write_csv(tmp / f"{name}.csv", rows)
        (tmp / f"findings-{arch}.md").write_text(text)
    return out_dir

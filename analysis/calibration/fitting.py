"""The fit of an arch's simulator parameters (``python -m analysis.calibration fit``): the measured
cases of the fit study, the terms fixed by other measurements (``analysis.calibration.fixed``), a
grid search of the one free parameter, and the params file that names every input it read, pinned
by content hash (``analysis.data``), with the command that regenerates it byte for byte."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from analysis.cache.smmap import measured_map
from analysis.calibration import fixed as cf
from analysis.calibration import measured as cm
from analysis.calibration import params as cp
from analysis.calibration.simcheck import FIT_GRID, predict
from analysis.data import open_path, registry, stored
from analysis.models.timemodel import FACTS, H100
from spec.arch import Arch

# --------------------------------------------------------------------------------------------
DRIFT_RUN = "profiles/h100/drift-20261125e"
"""The drift the simulator's jitter comes from: the drift study stamped every 64th step
(``experiments.measurement.measure.DRIFT_EVERY``). The every-step stamps of the older runs
(drift-20261121b, -20261125c) perturbed the drift they measured: that build's few-CTA linear
launches miss 1.4-5.7x the plain build's sectors, the sparse one's within 0-8%
(``profiles/h100/tracecost-20261125``)."""


PAIR_LAGS = "profiles/h100/drift-sm-20261125b/lags.csv.xz"
"""Per-CTA lags of the sparse-stamp trace builds (2, 4, 8 and 132 CTAs, linear and sawtooth, two
launches each; ``profiles/h100/tracecost-20261125/every64``): where the SM-pair slowdown comes
from."""


def device_map(root: Path, device: str) -> Path | None:
    """The newest ``experiments.instruments.smmap`` run directory under ``root`` measured on the GPU
    whose UUID starts with ``device``, else None. Why: where a launch's first CTAs sit relative to
    the two L2 partitions differs between chips (one H100 of the seventh holdout splits them, and
    its 2-8 CTA launches miss 1.5x), so one chip's runs are predicted with that chip's map when it
    was measured; otherwise with the arch's committed map (``params.placement``)."""
    maps = [d for d in registry.children(root) if d.name.startswith("smmap-")
            and stored(d, "smmap.csv") is not None
            and (cm.run_device(d) or "").startswith(device)]
    if not maps:
        return None
    rel = registry.relative(maps[-1])            # named from the repository root in notes
    return Path("profiles", rel) if rel is not None else maps[-1]


def _fixed(arch: Arch, root: Path) -> tuple[dict, str]:
    drift = stored(DRIFT_RUN, "drift.csv")
    jitter, _, why = cf.jitter_from_drift(drift)
    pair, why_pair = cf.pair_slowdown_from_lags(open_path(PAIR_LAGS))
    facts = FACTS.get(arch.name, H100)
    miss_ratio, why_r = cf.miss_ratio_from_timing(drift, facts)
    placement = arch.name if measured_map(arch.name) else "alternate"
    return {"miss_ratio": miss_ratio, "jitter": jitter, "rate_jitter": 0.0,
            "pair_slowdown": pair,
            "partitions": arch.l2_partitions, "placement": placement, "stores_miss": False}, (
        f"{why_r}" + ("" if facts.name == arch.name else f" (no {arch.name} latencies measured; "
                      f"r = 1 holds for any DRAM latency below t_c)") + f"; {why} (its per-step "
        f"jitter only; the per-CTA speed spread is the SM-pair term: CTAs alone on their pair "
        f"do not drift apart, rate_jitter 0); {why_pair}; "
        f"placement {placement} (analysis.cache.smmap: "
        f"{_smmap_pin(arch.name)['path'] if placement != 'alternate' else 'none measured'}); "
        f"stores_miss=False (profiles/h100/placement-20261123: tex lookup misses equal the "
        f"read-only lookup misses in all 18 launches: a store never misses)")


def _smmap_pin(arch: str) -> dict:
    return registry.instrument("smmap", arch).pin()


def _inputs(arch: Arch, root: Path, study: str, placement: str) -> tuple[dict, ...]:
    """What the fit read, each pinned by path and content hash (``analysis.data``)."""
    runs = cm.study_dirs(root, study)
    pins = {registry.entry(d).path: registry.entry(d).pin() | {"use": f"{study} runs"}
            for d in runs if registry.relative(d) is not None}
    local = [{"use": f"{study} run (local, uncommitted)", "path": str(d),
              "sha256": registry.content_hash(d)} for d in runs if registry.relative(d) is None]
    fixed = [registry.entry(DRIFT_RUN).pin() | {"use": "jitter and miss_ratio (drift)"},
             registry.entry(PAIR_LAGS).pin() | {"use": "pair_slowdown (SM-pair lags)"}]
    if placement != "alternate":
        fixed.append(_smmap_pin(arch.name) | {"use": "placement (SM -> L2 partition map)"})
    return tuple([*pins.values(), *local, *fixed])


def cmd_fit(arch: Arch, root: Path, study: str, every: int, rate: float,
            command: str = "") -> cp.ArchParams:
    measured = cm.load_measured(root, arch, study)
    if not measured:
        raise SystemExit(f"no measured {study} cases under {root}; give --root with the data")
    # every ``every``-th sequence length of each panel (sorted by S), to bound the fit's cost
    by_panel: dict[str, list] = {}
    for m in measured:
        by_panel.setdefault(m.case.variant.id(m.case.problem), []).append(m)
    measured = [m for ms in by_panel.values()
                for m in sorted(ms, key=lambda m: m.case.problem.S_q)[::every]]
    fixed, why = _fixed(arch, root)
    fixed["sample_rate"] = rate
    t0 = time.perf_counter()
    n = [0]
    n_points = int(np.prod([len(v) for v in FIT_GRID.values()]))

    def pred(case, p):
        n[0] += 1
        print(f"\r  fit {n[0]}/{len(measured) * n_points} {time.perf_counter() - t0:.0f}s",
              end="", file=sys.stderr, flush=True)
        return predict(case, arch, p).tex_misses

    best, err, points = cp.fit(measured, pred, FIT_GRID, fixed)
    print(file=sys.stderr)
    ap = cp.ArchParams(
        arch=arch.name, capacity_fraction=best["capacity_fraction"],
        miss_ratio=best["miss_ratio"], jitter=fixed["jitter"], partitions=fixed["partitions"],
        rate_jitter=fixed["rate_jitter"], pair_slowdown=fixed["pair_slowdown"],
        placement=fixed["placement"],
        stores_miss=fixed["stores_miss"],
        fitted=tuple(FIT_GRID), fit_study=study,
        fit_runs=tuple(sorted({r for m in measured for r in m.runs})),
        fit_cases=tuple(m.key for m in measured), fit_rel_rms=err,
        grid={k: list(v) for k, v in FIT_GRID.items()},
        grid_rel_rms=tuple((p["capacity_fraction"], p["miss_ratio"], e) for p, e in points),
        derivation=f"grid search of rel. RMS of tex misses vs the median of the one-pass "
                   f"launches of the runs under {root.as_posix()}, every "
                   f"{every}-th S of each panel, " + (f"SHARDS R={rate:g} (error vs exact: "
                   f"explorations/simbench.py)" if rate < 1 else "exact (no sampling)") +
                   f"; {why} (fixed, not fitted; the H100 drift is used for every sm_90 arch); "
                   f"partitions from the arch registry",
        inputs=_inputs(arch, root, study, fixed["placement"]), command=command)
    return ap

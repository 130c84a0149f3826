"""The study registry: each study is a named plan of cases (``experiments.registry.plans``) and how
it is run, as plain data.

A study names the code that runs it in a layer above the registry (a measure-mode hook, a
simulate-mode row function) by its dotted name, ``"module:function"``, resolved when a run calls
it (``hook``): the registry imports no measurement, simulator or instrument, and listing or
planning a study loads none of them. Its figures are what the figure modules declare
(``paper_figures.catalogue``).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from paper_figures.catalogue import figures_of
from spec import Arch
from spec.case import Case

from .plans import (
    active_sms_plan,
    backward_plan,
    convoy_plan,
    cuda_tiles_plan,
    divergence_plan,
    dqpair_plan,
    drift_plan,
    hints_plan,
    l1l2_plan,
    ladder_plan,
    longseq_plan,
    misscost_plan,
    reuse_plan,
    sawtooth_plan,
    scaling_plan,
    spills_plan,
    traffic_plan,
)
from .suites import bench_plan, hostpath_plan, models_plan, shapes_plan


@dataclass(frozen=True)
class Study:
    """A named plan plus how it is run. Measure mode runs the hook ``measure`` names (default
    ``experiments.measurement.measure.check_and_time``: correctness gate, timing beside the SDPA
    peers and resource rows) and writes its rows to ``rows_file``; ncu counters follow when
    ``profiled``. Simulate mode runs the function ``simulate`` names per case (default: the L2
    counters of the simulator). Hooks are dotted names (``hook``)."""

    name: str
    description: str
    plan: Callable[[Arch], list[Case]]
    measurable: bool = True           # False: simulate only (e.g. an analytic study)
    timed: bool = True                # measure mode: CUDA-event timing beside the SDPA peers
    profiled: bool = True             # measure mode: ncu counters
    eager: bool = False               # measure mode: each family's eager attention() call timed too
    reps: int = 10                    # timed repetitions per variant
    simulate: str | None = None       # simulate-mode rows of one case; None: the L2 counters
    measure: str | None = None        # measure-mode hook, check_and_time's signature; None: it
    rows_file: str = "timing.csv"     # where the measure-mode rows of the run directory go
    entry: str | None = None
    """A study whose cases are not split-Q launches runs through its own entry instead,
    ``"module:function"`` called as ``function(args, argv, console) -> exit code`` with the
    parsed options of ``experiments.run`` (the decode study: pairs of split-K/V launches)."""
    groups: tuple[str, ...] | None = None
    """The ncu metric groups a measured run collects by default: those its figures and findings
    read. None: every group of the protocol (``profiles.metrics.DEFAULT_GROUPS``, also what
    ``--full-protocol`` asks of any study)."""

    @property
    def figures(self) -> tuple[str, ...]:
        """The figures that read this study's rows, as the figure modules declare them
        (``paper_figures.catalogue``)."""
        return figures_of(self.name)


MISSES_AND_L1 = ("dram", "l1")
"""The main study's ncu groups: its figures and the findings read the L2 misses (and the DRAM
fills measured in the same pass, group ``dram``) and the L1 sectors of the cuTile builds (group
``l1``), each one replay pass; the protocol's other groups (the tex, fabric and LRC sectors, the
hits + misses = sectors check across four passes) triple the ncu time and are
``--full-protocol``."""
def hook(name: str) -> Callable:
    """The function a study names, ``"package.module:function"``."""
    module, _, attr = name.partition(":")
    return getattr(importlib.import_module(module), attr)


_SUITE_RUN = dict(profiled=False, reps=15, eager=True, measure="experiments.speed.shapes:measure")
"""How the shape suites run: timed (kernel and eager call) by the shapes engine, not profiled."""

_BACKWARD_RUN = dict(reps=5, groups=("dram",),
                     simulate="experiments.simulation.backward:backward_rows",
                     measure="experiments.measurement.backward:measure_backward")
"""How the backward studies run: the backward engines, measured and simulated alike."""

STUDIES: dict[str, Study] = {
    s.name: s
    for s in (
        Study("sawtooth", "linear vs sawtooth K/V order: misses, non-compulsory misses, time "
              "(cuTile Static / Tile-based, causal and not; CUDA batch sweep)",
              sawtooth_plan, groups=MISSES_AND_L1),
        Study("l1l2", "L1/L2 counters vs persistent CTA count at two sequence lengths (CUDA)",
              l1l2_plan, timed=False),
        Study("traffic", "L2 sector accesses vs S, causal and not, against the traffic model",
              traffic_plan, timed=False),
        Study("divergence", "L2 misses vs S around the capacity knee, cold-miss line, C_eff fit",
              divergence_plan, timed=False),
        Study("active-sms", "L2 misses, hits and hit rate vs persistent CTA count",
              active_sms_plan, timed=False),
        Study("ladder", "the NVIDIA cuTile tuning ladder: TFLOPS per step beside SDPA",
              ladder_plan, profiled=False),
        Study("scaling", "TFLOPS vs S for the best cuTile and CUDA builds beside SDPA",
              scaling_plan, profiled=False, reps=5),
        Study("longseq", "best sawtooth-aware configuration per (D, causal) at S=128K: "
              "order x schedule for both families, timed beside SDPA",
              longseq_plan, profiled=False, reps=5),
        Study("bench", "each family's default attention() configuration beside SDPA flash and "
              "cuDNN: S in {4K, 16K, 32K}, D in {64, 128}, causal and not",
              bench_plan, profiled=False, reps=15),
        Study("cuda-tiles", "the CUDA tile sweep (grid launch at every tested tile) with the "
              "persistent linear / sawtooth and LPT builds of the default tile, beside SDPA",
              cuda_tiles_plan, profiled=False, reps=20),
        Study("shapes", "the shape suite (benchmark, batched short, GQA, uneven, S_q != "
              "S_kv): each family's default attention() beside SDPA flash and cuDNN; geometric "
              "mean and minimum of the ratio to cuDNN per family",
              shapes_plan, **_SUITE_RUN),
        Study("models", "the model families (encoders, ViTs, diffusion U-Nets, LLM "
              "prefill with grouped and multi-query heads, chunks against a longer K/V, long "
              "causal) in a tuning and a validation half: each family's default attention() "
              "beside SDPA flash and cuDNN, kernel time and eager call time",
              models_plan, **_SUITE_RUN),
        Study("hostpath", "host time per call of each family's attention() (eager path, "
              "operator, prepared launch) beside SDPA flash and cuDNN over 10,000 calls, and "
              "the eager call time of each (the host-path study)",
              hostpath_plan, profiled=False, reps=30,
              measure="experiments.speed.eager:measure_hostpath"),
        Study("drift", "how far persistent CTAs drift from lock-step: %globaltimer stamps of the "
              "CUDA trace build, spread of step start times over the CTAs",
              drift_plan, timed=False, profiled=False,
              measure="experiments.measurement.measure:measure_drift", rows_file="drift.csv"),
        Study("misscost", "where a miss costs time: linear vs sawtooth over K/V pipeline depth "
              "{1,2,3} x available DRAM bandwidth (a co-running streamer on the SMs the "
              "persistent kernel leaves free) x S below/above the L2 x causal",
              misscost_plan, reps=5, measure="experiments.instruments.streamer:measure_misscost"),
        Study("convoy", "the simulator's validation grid: CUDA twin, linear vs sawtooth, "
              "K/V pipeline depth {1,2,3,4} x K+V per head {0.5,1,1.5}x the L2 x causal, 96 "
              "persistent CTAs, and 48 at the L2: ncu misses, time with the DRAM streamer off "
              "and at its highest intensity",
              convoy_plan, reps=3, groups=("dram",),
              measure="experiments.instruments.streamer:measure_convoy"),
        Study("reuse", "reuse-distance histograms and LRU miss-ratio curves (simulator only), "
              "linear vs sawtooth vs block-parity, every arch's L2 marked",
              reuse_plan, measurable=False, simulate="experiments.simulation.simulate:reuse_rows"),
        Study("spills", "a spilling build beside its spill-free twin (causal cuTile Static at "
              "occupancy 1 and 2): misses, time and the sawtooth-vs-linear comparison",
              spills_plan),
        Study("backward", "the backward's scan order: dK/dV (Q scan) and dQ (K/V scan) kernels "
              "alone, linear vs sawtooth, persistent CTAs, causal and not: L2 misses and time "
              "beside SDPA flash and cuDNN's backward",
              backward_plan, **_BACKWARD_RUN),
        Study("dqpair", "the backward's fair dQ pair repeated: 64x128 persistent, linear, "
              "sawtooth and a reverse-order control, causal and not, K/V per head above the L2 "
              "and at half of it: L2 misses and time beside SDPA flash and cuDNN's backward",
              dqpair_plan, **_BACKWARD_RUN),
        Study("hints", "the paper's cuTile occupancy hint (1) beside the study's (2): misses "
              "and time of the non-causal Static and Tile-based pairs",
              hints_plan, groups=("dram",)),
        Study("decode", "two split-K/V decode steps in a row: linear vs alternating chunk "
              "direction x GQA group packed or not x K+V of 0.5-2x the L2, four shapes: DRAM "
              "reads of the second step (ncu, repeats; simulated by the timed two-partition "
              "model) and its time beside SDPA flash and cuDNN",
              lambda arch: [], entry="experiments.runner.decode:run"),
    )
}


class UnknownStudy(ValueError):
    pass


def get_study(name: str) -> Study:
    try:
        return STUDIES[name]
    except KeyError:
        raise UnknownStudy(f"unknown study {name!r}; known: {', '.join(STUDIES)}") from None

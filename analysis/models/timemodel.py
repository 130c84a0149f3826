"""Where does a miss cost time? A three-bound time model of a K/V-streaming attention kernel.

The sawtooth order removes L2 misses. A miss costs time only through one of two channels, and
the model says which one binds for a given pipeline depth and DRAM bandwidth:

1. **Latency not hidden by the pipeline.** A CTA streams one K/V tile pair per step. With
   ``stages`` shared-memory buffers the tile of step ``s`` is issued ``stages - 1`` steps ahead, so
   its load has ``(stages - 1) * t_c`` of compute to hide behind (``t_c``: compute time of one
   step). The load takes ``L(f) = L_hit + f * (L_dram - L_hit)``, where ``f`` is the fraction of
   tile fetches that come from DRAM. Each step then lasts

       period = t_c + max(0, L(f) - (stages - 1) * t_c)

   (``stages = 1``: ``t_c + L(f)``, every load in full). The kernel takes ``steps * period``
   (``steps``: the step count of the CTA with the most work, which finishes last).
2. **Bandwidth.** The DRAM bytes must cross the bandwidth left to the kernel:
   ``dram_bytes / bw_available``.

and ``t = max(steps * period, dram_bytes / bw_available)``. The compute bound ``steps * t_c`` is
inside the first term (``period >= t_c``). Misses change ``f`` (channel 1) and ``dram_bytes``
(channel 2); the predicted effect of sawtooth is ``t(sawtooth) / t(linear) - 1``.

What ``f`` is. In a wavefront the CTAs of one head ask for the same tile at nearly the same time;
the first request misses and the others are counted as L2 hits, but they wait for the same DRAM
fill. So ``f`` is not the per-request miss ratio: it is the DRAM bytes over the K/V bytes the
wavefronts stream (``wave_kv_bytes``: per wave of concurrently running work items, every distinct
(head, K/V tile) it visits, once). Linear above the L2: ``f ~ 1``; sawtooth: ``f ~ 1 - C/N``
(paper §Sawtooth, C tiles of cache, N tiles per head); below the L2 both ``f ~ 1 / waves``.

Worked example (H100, the CUDA 80x80 D=64 build, B=H=1, S=262144: K+V per head 64 MiB = 1.28x
the 50 MiB L2). The committed sawtooth run (profiles/h100/sawtooth-20261123) has the linear
build at 103.4 ms with P = 132, whose busiest CTA runs 25 work items x 3277 tiles = 81,925 steps:
``t_c ~ 1.26 us``. With ``L_hit = 0.143 us`` and ``L_dram = 0.349 us`` (``H100`` below):

- stages = 2: ``L(1) = 0.35 us < 1.26 us`` of compute ahead: nothing exposed; t = 103 ms for both
  orders. DRAM: linear streams 64 MiB per wave x 25 waves = 1.7 GB, 0.5 ms at 3.35 TB/s, far
  below. Predicted: no difference (measured ±1-2%: REPORT.md section 5).
- stages = 1: linear ``period = 1.26 + 0.35 = 1.61 us``; sawtooth ``f = 1 - 50/64 = 0.22``,
  ``L = 0.143 + 0.22 * 0.205 = 0.19 us``, ``period = 1.45 us``: sawtooth 10% faster.
- bandwidth: linear becomes bandwidth-bound only below ``1.7 GB / 103 ms = 16 GB/s`` for the
  whole kernel; GB10 (273 GB/s for 48 SMs, 5.7 GB/s per SM) sits far closer to that edge than
  the H100 (25 GB/s per SM) because its kernels stream the same bytes with fewer, slower SMs.

Parameters are facts, never fitted to the sawtooth-vs-linear answer: peak DRAM bandwidth from
NVIDIA's datasheets; on the H100 the L2-hit and DRAM load latencies are **measured** by a
pointer chase (``python -m experiments.instruments.latency --arch h100``,
profiles/h100/latency-20261123: 143 ns for footprints up to 16 MiB, 268-271 ns at 32-48 MiB, lines
homed in the far L2 partition, 349 ns from DRAM; one thread, unloaded). ``L_hit`` is the
near-partition value, so far-partition hits are understated; unloaded latencies understate loaded
ones: the exposed latency is a lower bound. ``t_c`` is measured: the time per step of the same
build where nothing misses (below the L2, deepest pipeline, no co-runner), a different case from
the ones predicted. Pure functions; no GPU, no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spec.arch import Arch
from spec.arch import get as get_arch
from spec.arch import known as known_archs
from spec.problem import Problem, TileGrid, Tiles
from spec.schedules import CtaSchedule


@dataclass(frozen=True)
class MemoryFacts:
    """Documented memory-system facts of one GPU (see the module docstring for sources)."""

    name: str
    num_sms: int
    dram_bytes_per_s: float   # peak DRAM bandwidth
    l2_hit_s: float           # load-to-use latency of an L2 hit (unloaded)
    dram_s: float             # load-to-use latency of an L2 miss served by DRAM (unloaded)
    source: str

    @property
    def bytes_per_s_per_sm(self) -> float:
        return self.dram_bytes_per_s / self.num_sms


def facts_of(arch: Arch) -> MemoryFacts | None:
    """The model's inputs for ``arch`` from the arch registry (``spec.arch.Memory``); None when
    the registry lacks the bandwidth or either latency."""
    m = arch.memory
    if m is None or m.l2_hit_s is None or m.dram_s is None:
        return None
    return MemoryFacts(arch.name, arch.num_sms, m.dram_bytes_per_s, m.l2_hit_s, m.dram_s,
                       m.source)


FACTS = {a: f for a in known_archs() if (f := facts_of(get_arch(a))) is not None}
"""The GPUs whose memory facts the model has, by arch name (from the arch registry)."""
H100, GB10 = FACTS["h100"], FACTS["gb10"]


@dataclass(frozen=True)
class Prediction:
    """The model's time of one build and which bound sets it."""

    seconds: float
    latency_s: float      # steps * period
    bandwidth_s: float    # dram_bytes / bandwidth
    compute_s: float      # steps * t_c (inside latency_s)
    period_s: float       # one step, compute plus exposed load latency
    exposed_s: float      # load latency per step the pipeline does not hide

    @property
    def regime(self) -> str:
        """``bandwidth`` when the DRAM bound binds, else ``latency`` when some load latency is
        exposed, else ``compute``."""
        if self.bandwidth_s > self.latency_s:
            return "bandwidth"
        return "latency" if self.exposed_s > 0 else "compute"


def load_latency(f: float, facts: MemoryFacts) -> float:
    """Latency of one tile fetch when a fraction ``f`` of fetches comes from DRAM."""
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"DRAM fraction f={f} must lie in 0..1")
    return facts.l2_hit_s + f * (facts.dram_s - facts.l2_hit_s)


def predict(*, steps: int, t_c: float, stages: int, f: float, dram_bytes: float,
            bw_available: float, facts: MemoryFacts) -> Prediction:
    """``t = max(steps * (t_c + max(0, L(f) - (stages - 1) t_c)), dram_bytes / bw_available)``."""
    if stages < 1 or steps < 0 or t_c <= 0 or bw_available <= 0 or dram_bytes < 0:
        raise ValueError(f"need stages >= 1, steps >= 0, t_c > 0, bandwidth > 0, bytes >= 0; got "
                         f"stages={stages}, steps={steps}, t_c={t_c}, bw={bw_available}, "
                         f"bytes={dram_bytes}")
    exposed = max(0.0, load_latency(f, facts) - (stages - 1) * t_c)
    period = t_c + exposed
    lat, bw = steps * period, dram_bytes / bw_available
    return Prediction(max(lat, bw), lat, bw, steps * t_c, period, exposed)


def predicted_change(linear: Prediction, sawtooth: Prediction) -> float:
    """Relative time change of sawtooth against linear (negative: sawtooth faster)."""
    return sawtooth.seconds / linear.seconds - 1.0


def bandwidth_edge(*, steps: int, t_c: float, stages: int, f: float, dram_bytes: float,
                   facts: MemoryFacts) -> float:
    """Available bandwidth (bytes/s) below which the build becomes bandwidth-bound: the
    regime boundary of the map (``dram_bytes / (steps * period)``)."""
    p = predict(steps=steps, t_c=t_c, stages=stages, f=f, dram_bytes=dram_bytes,
                bw_available=facts.dram_bytes_per_s, facts=facts)
    return dram_bytes / p.latency_s if p.latency_s > 0 else float("inf")


# -- counting steps and streamed bytes from the spec ---------------------------------------------

def critical_steps(problem: Problem, tiles: Tiles, schedule: CtaSchedule) -> int:
    """K/V steps of the CTA with the most work (it finishes last)."""
    g = TileGrid(problem, tiles)
    wi = schedule.work_items(g)
    per_item = g.kv_tiles_for(np.arange(g.n_q)).tolist()
    steps: dict[int, int] = {}
    for cta, q in zip(wi.cta.tolist(), wi.q.tolist()):
        steps[cta] = steps.get(cta, 0) + per_item[q]
    return max(steps.values())


def wave_kv_bytes(problem: Problem, tiles: Tiles, schedule: CtaSchedule) -> int:
    """K+V bytes the wavefronts stream: for each wave of concurrently running work items (the
    ``iter``-th item of every CTA), every distinct (head, K/V tile) it visits counted once. The
    denominator of ``f``: DRAM bytes / this is the fraction of tile fetches served by DRAM."""
    g = TileGrid(problem, tiles)
    wi = schedule.work_items(g)
    deepest: dict[tuple[int, int], int] = {}   # (wave, kv head) -> K/V tiles its items reach
    group = problem.H // problem.H_kv
    per_item = g.kv_tiles_for(np.arange(g.n_q)).tolist()
    for it, bh, q in zip(wi.iter.tolist(), wi.bh.tolist(), wi.q.tolist()):
        b, h = divmod(bh, problem.H)
        key = (it, b * problem.H_kv + h // group)
        deepest[key] = max(deepest.get(key, 0), per_item[q])
    tile_bytes = 2 * tiles.n * problem.D * problem.dtype.nbytes
    return sum(deepest.values()) * tile_bytes


def dram_fraction(dram_bytes: float, streamed_bytes: float) -> float:
    """``f`` from measured DRAM read bytes, clipped to 0..1 (Q reads and write-backs make the
    measured bytes a little larger than the K/V fills alone)."""
    if streamed_bytes <= 0:
        raise ValueError("streamed K/V bytes must be positive")
    return min(1.0, max(0.0, dram_bytes / streamed_bytes))

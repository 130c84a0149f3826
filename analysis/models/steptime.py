"""What one K/V step of a build costs in time, for the timed simulator's pipeline model.

Why a step's cost shapes the misses. Concurrent CTAs that scan the same K/V tiles share them in L2
only while they stay close (a *convoy*). What keeps them close is that a CTA which misses waits
for DRAM while the ones behind it, hitting, catch up; what lets them drift apart is that nothing
waits. Which of the two happens is decided by the exposed latency of a step: a build that issues
its K/V loads ``prefetch`` steps ahead of the step that uses them hides a fill that takes less
than ``prefetch`` steps of compute, and then a missing CTA runs exactly as fast as a hitting one
(no force: causal launches, whose CTAs start their items at different times, spread into a
staircase and re-fetch the K/V of every wave); a build that loads and then computes
(``prefetch = 0``) exposes every fill, and the leader of a convoy, which misses, falls back
behind the followers, which hit (a force: the convoy holds). Worked example, measured on an
H100 (``profiles/h100/misscost-20261123``, three runs): the CUDA 80x80 build, 96 persistent
CTAs, causal, S = 256K, misses 54.8 M sectors without prefetch and 535-596 M with a double
buffer; the step-model simulator gives 1010 M for both, the pipeline model 52 M and 984 M.

A build's timing (``StepTiming``): the compute of one step (``step_s``), the load-to-use
latency of an L2 hit and of a DRAM fill, and the prefetch depth. The simulator's time unit is
the step: hit and miss latencies enter as fractions of it (``units``).

- **Prefetch depth** from the build: the CUDA twin's ``stages`` template parameter minus one; a
  cuTile build whose cubin was read (``BuildCosts``): the K/V pairs its shared memory holds
  beside the Q tile, minus one (its K and V arrive by TMA from a producer loop of their own);
  otherwise one step ahead (``CUTILE_PREFETCH``).
- **Latencies**: the arch registry's (``spec.arch.Memory``): measured by pointer chase on the
  H100 (unloaded); for an arch without a measurement, a stated range (``Range``).
- **Step compute**: measured on the H100 for a reference build of each family (``REFERENCE``,
  seconds per step of one CTA alone on its SM), scaled by the step's FLOPs (tile M x N x D) and
  by the resident CTAs per SM (CTAs sharing an SM share its issue slots); on another arch,
  scaled by a stated speed ratio range (``Range``: between the ratio of SM clocks, if the
  step is issue-bound, and the ratio of dense fp16 tensor rates per SM, if it is MMA-bound); plus,
  for a build that spills inside its step loop, its in-loop local accesses at the cost one
  measured on the H100 (``SPILL_S_PER_ACCESS``), and its stacks' share of the L2 (``BuildCosts``).

Nothing here is fitted to a count: the simulator's misses follow from these inputs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from spec import Backend
from spec.arch import Arch
from spec.case import Case

CUTILE_PREFETCH = 1
"""Steps a cuTile build's K/V loads are issued ahead of use (latency hints K 2 / V 4: TMA loads
in flight across at least one step); an assumption, not read off the compiled code."""

REFERENCE: dict[Backend, tuple[int, float, str]] = {
    # family: (FLOPs of its reference step, seconds per step, where measured)
    Backend.CUTILE: (4 * 64 * 64 * 64, 0.534e-6,
                     "H100, cuTile 64x64 D=64 Static linear, non-causal, B=8 S=256K, one CTA "
                     "per SM: 544.5 ms / 1,019,904 steps (profiles/h100/sawtooth-20261123)"),
    Backend.CUDA: (4 * 80 * 80 * 64, 1.186e-6,
                   "H100, CUDA 80x80 D=64 persistent, depth 3, non-causal, S=100K, streamer "
                   "off (analysis.findings.misscost.step_time over profiles/h100/misscost-"
                   "20261123, -r2, -r3)"),
}
"""The measured step of each family's reference build
(``tests/cpu/analysis/models/test_steptime.py`` reads them back from the committed runs)."""

H100_CLOCK_HZ = 1.98e9
"""The H100's SM clock during the committed measurements (profiles/h100/latency-20261123)."""


@dataclass(frozen=True)
class Range:
    """A quantity nothing here measured, stated as a range from published figures (or an
    assumption, said in ``source``); ``mid`` is the geometric mean of its ends. Two kinds:
    how much longer a step takes on an arch than on the H100 (``SPEED``: ``lo`` if a step is
    bound by instruction issue, the ratio of SM clocks; ``hi`` if by the tensor cores, the ratio
    of dense fp16 tensor FLOP/s per SM), and a DRAM fill latency in seconds (``DRAM_LATENCY``:
    the H100's unloaded value as the floor and a stated ceiling)."""

    lo: float
    hi: float
    source: str

    @property
    def mid(self) -> float:
        return math.sqrt(self.lo * self.hi)

    def at(self, point: str) -> float:
        """The value at ``point`` of the range: ``"lo"``, ``"mid"`` or ``"hi"``."""
        return {"lo": self.lo, "mid": self.mid, "hi": self.hi}[point]


SPEED: dict[str, Range] = {
    "h100": Range(1.0, 1.0, "measured on the H100"),
    "h200": Range(1.0, 1.0, "the H100's SM (same GH100 die and clocks)"),
    "gb10": Range(H100_CLOCK_HZ / 2.55e9, (989e12 / 132) / (125e12 / 48),
                  "GB10 SM clock up to 2.55 GHz (Chips and Cheese, 'Analyzing Nvidia GB10's "
                  "GPU') against the H100's 1.98 GHz; dense fp16 tensor rate per SM: H100 "
                  "SXM 989 TFLOP/s / 132 SMs, GB10 about 125 TFLOP/s (1 PFLOP sparse FP4 / "
                  "8) / 48 SMs"),
}

DRAM_LATENCY: dict[str, Range] = {
    "gb10": Range(348.7e-9, 1.0e-6,
                  "no GB10 measurement: from the H100's unloaded HBM3 latency (floor) to "
                  "1 us for LPDDR5X behind the NVLink-C2C link to the CPU die's memory "
                  "controllers, under load (an assumption)"),
}

L1_BYTES: dict[str, int] = {"h100": 256 << 10, "h200": 256 << 10, "gb10": 128 << 10}
"""Combined L1 / shared memory per SM (NVIDIA's Hopper tuning guide; GB10: consumer Blackwell,
128 KB per SM, Chips and Cheese). What a build's shared memory leaves of it caches its stack."""

SPILL_S_PER_ACCESS = 142.7e-9 / 8
"""Seconds one spilled access in the bulk K/V step loop (LDL or STL, per thread, 256 threads)
adds to a step, measured on the H100: the causal cuTile Static linear build at occupancy 1 (8 per
bulk step, 4 LDL + 4 STL; its 680 B stacks held in L2) runs 325.7 ms against its spill-free
twin's 251.3 ms, 143 ns more per step (findings P8b, profiles/h100/spills-20261127). An upper
bound: the two builds differ in more than their spills (255 against 128 registers, deeper K/V
buffers). Measured where the stacks fit in L2; a stack larger than the L2 costs far more (the
sawtooth twin, 1888 B: 6.5x), which this does not model."""


@dataclass(frozen=True)
class BuildCosts:
    """What a build's compiled code does per K/V step, read off its cubin: local loads and stores
    per thread in its bulk step loop (``nvdisasm``: spilled registers), its stack frame per thread
    and its shared memory per CTA (``cuobjdump``), which holds its K/V buffers (``prefetch``)."""

    local_accesses: float = 0.0
    stack_bytes: int = 0
    smem_bytes: int = 0
    source: str = ""

    def prefetch(self, tile_bytes: int) -> int | None:
        """Steps ahead its K/V loads are issued: the shared memory beside one Q tile holds
        ``2·s`` tiles of ``tile_bytes`` (``s`` K/V pairs in flight), so loads run ``s − 1``
        steps ahead; None when the shared memory is not known."""
        if self.smem_bytes <= 0:
            return None
        pairs = (self.smem_bytes - tile_bytes) // (2 * tile_bytes)
        return max(0, int(pairs) - 1)

    def l2_bytes(self, threads: int, ctas_per_sm: int, l1_bytes: int) -> int:
        """Bytes of stack per SM that do not fit the L1 its CTAs' shared memory leaves, and so
        live in L2 beside K and V (re-touched every step: the most recently used lines)."""
        left = max(0, l1_bytes - ctas_per_sm * self.smem_bytes)
        return max(0, ctas_per_sm * self.stack_bytes * threads - left)


@dataclass(frozen=True)
class StepTiming:
    """One build's step on one arch: compute seconds, hit and fill latencies, prefetch depth,
    and the L2 its spilled stacks occupy over the whole launch."""

    step_s: float
    hit_s: float
    miss_s: float
    prefetch: int
    source: str
    stack_l2_bytes: int = 0

    def units(self) -> dict:
        """The ``TimeParams`` fields of the pipeline model (time unit: one step of compute)."""
        return dict(compute=1.0, hit_latency=self.hit_s / self.step_s,
                    miss_ratio=max(self.miss_s, self.hit_s) / self.step_s,
                    prefetch=self.prefetch, step_source=self.source)


def prefetch_of(case: Case) -> int:
    """Steps ahead the build issues its K/V loads."""
    v = case.variant
    return v.pipeline_stages - 1 if v.backend == Backend.CUDA else CUTILE_PREFETCH


def step_timing(case: Case, arch: Arch, point: str = "mid", *, spills: BuildCosts = BuildCosts(),
                threads: int = 256, speed: str | None = None, latency: str | None = None,
                prefetch: int | None = None) -> StepTiming:
    """The timing of ``case``'s build on ``arch`` at the ``point`` (``lo``, ``mid``, ``hi``) of
    every range the arch needs, or at ``speed``, ``latency`` and ``width`` separately (the step's
    speed ratio, the DRAM latency, the spilled access width); ``local_accesses``: spilled loads
    and stores per thread per step of the build's compiled loop (0: no spill); ``prefetch``
    overrides the build's depth (a sensitivity scan)."""
    speed, latency = (x or point for x in (speed, latency))
    for name, x in (("speed", speed), ("latency", latency)):
        if x not in ("lo", "mid", "hi"):
            raise ValueError(f"{name} point must be lo, mid or hi, got {x!r}")
    v = case.variant
    flops_ref, t_ref, where = REFERENCE[v.backend]
    t = v.tiles
    rng_speed = SPEED.get(arch.name)
    if rng_speed is None:
        raise ValueError(f"no step speed for {arch.name}: add it to analysis.models.steptime.SPEED")
    scale = rng_speed.at(speed)
    per_sm = max(1, -(-case.resident // arch.num_sms))
    step = t_ref * (4 * t.m * t.n * case.problem.D / flops_ref) * scale * per_sm
    mem = arch.memory
    hit = mem.l2_hit_s if mem and mem.l2_hit_s else 143.4e-9
    notes = [f"compute {step * 1e9:.0f} ns: {where}, x{scale:.3g} ({arch.name} speed {speed}), "
             f"x{per_sm} CTAs per SM"]
    rng = DRAM_LATENCY.get(arch.name)
    if rng is not None:
        miss = rng.at(latency)
        notes.append(f"DRAM {miss * 1e9:.0f} ns ({latency} of the assumed range)")
    elif mem and mem.dram_s:
        miss = mem.dram_s
        notes.append(f"DRAM {miss * 1e9:.0f} ns (measured)")
    else:
        raise ValueError(f"no DRAM latency for {arch.name}: measure it (python -m "
                         f"experiments.instruments.latency) or state a range in DRAM_LATENCY")
    stack_l2 = 0
    if spills.local_accesses > 0:
        extra = spills.local_accesses * SPILL_S_PER_ACCESS * scale * per_sm
        step += extra
        notes.append(f"+{extra * 1e9:.0f} ns of spills ({spills.local_accesses:g} local "
                     f"accesses per thread per step, measured cost on the H100)")
    if spills.stack_bytes > 0 and spills.local_accesses > 0:
        sms = min(arch.num_sms, case.resident)
        stack_l2 = sms * spills.l2_bytes(threads, per_sm, L1_BYTES.get(arch.name, 0))
        notes.append(f"stacks {spills.stack_bytes} B/thread: {stack_l2 / 2**20:.1f} MiB in L2")
    tile_bytes = t.n * case.problem.D * case.problem.dtype.nbytes
    built = spills.prefetch(tile_bytes)
    d = int(prefetch) if prefetch is not None else (built if built is not None
                                                    else prefetch_of(case))
    notes.append(f"prefetch {d}" + (f" ({spills.smem_bytes} B of shared memory)"
                                    if prefetch is None and built is not None else ""))
    if spills.source:
        notes.append(spills.source)
    return StepTiming(step, hit, miss, d, f"step {step * 1e9:.0f} ns = " + "; ".join(notes),
                      stack_l2)

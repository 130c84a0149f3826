"""The bandwidth knob of the miss-cost study: a DRAM streamer on the SMs attention leaves free.

Why. On an H100 the attention kernel reads DRAM at a few percent of its 3.35 TB/s, so removing
misses (sawtooth) cannot save bandwidth time; GB10 has 273 GB/s for 48 SMs (5.7 GB/s per SM, a
quarter of the H100's 25 GB/s per SM). To move the H100 towards that ratio step by step, a
co-running kernel streams DRAM on the SMs the persistent attention schedule (P < SM count) does
not use, and the bandwidth it takes is recorded, launch by launch.

The streamer (``STREAM_SOURCE``): every thread reads 16-byte vectors of a buffer 8x the L2,
grid-stride, four independent loads per iteration, accumulating into a value written at the end
(so the loads are not dead code), until a stop flag is set. Loads carry an L2 ``evict_first``
policy (``createpolicy``): the streamer's lines are the first to go, so it takes bandwidth while
evicting as little of the attention kernel's K/V as the L2 allows (it still shares the L2).
Intensity = threads per streamer CTA (``LEVELS``); one CTA per streamer SM. Each CTA records
bytes read, first and last ``%globaltimer`` and ``%smid``.

Keeping the two kernels apart (``Partition``), two paths, the one used is recorded in every row:

- ``green``: a CUDA green-context split of the device's SMs (cuda-python's driver bindings:
  ``cuDevSmResourceSplitByCount`` into the attention group and the remainder, one green context
  and stream each; the path FlashInfer's ``green_ctx`` uses). PyTorch's own
  ``torch.cuda.green_contexts.GreenContext`` makes one partition per call, from the full device,
  so two of them overlap: it is not used.
- ``smem``: without green contexts, the streamer CTAs ask for the most shared memory a block may
  have, so no attention CTA fits beside one and vice versa; the streamer grid has exactly the
  SMs the P attention CTAs leave free.

``auto`` tries ``green`` and falls back to ``smem`` when the split, the launch on a green stream
or the placement check fails (the reason is printed and recorded). Either way the partition is
checked, not assumed: the attention's trace build records ``%smid`` per CTA (cuda_baseline trace),
the streamer records its own, and the two sets must be disjoint with P distinct attention SMs.
Set ``MISSCOST_PARTITION=green|smem|auto`` (default auto) to force a path.

``python -m experiments.instruments.streamer --arch h100`` explains the plan without a GPU.
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from spec import Arch, get_arch
from spec.case import Case
from spec.records import Metric, Row

from ..registry.plans import misscost_ctas

STREAM_KERNEL = "dram_stream"
STREAM_SOURCE = (Path(__file__).with_name("dram_stream.cu")).read_text()
"""The streamer kernel (``dram_stream.cu`` beside this module), compiled with NVRTC by CuPy."""
STREAMER_GBPS = Metric.STREAMER_GBPS
"""Metric of the streamer's achieved bandwidth, one row per timed launch (x = its threads/CTA)."""
PARTITION_METRICS = (Metric.ATTENTION_SMS, Metric.STREAMER_SMS, Metric.SHARED_SMS)
"""Per streamer level, from one attention trace build beside the streamer: distinct SMs of the
attention CTAs, of the streamer CTAs, and of both (must be 0)."""
MAX_STREAM_NS = 5_000_000_000   # a streamer never outlives 5 s, even if the stop flag is lost


@dataclass(frozen=True)
class Level:
    """A streamer intensity: threads per streamer CTA (one CTA per streamer SM; 0 = off)."""

    label: str
    threads: int


LEVELS = (Level("off", 0), Level("low", 128), Level("mid", 384), Level("high", 1024))
"""In flight per streamer SM, 4 x 16 B per thread: 8, 24, 64 KiB. At ~0.6 us DRAM latency, 36
SMs can pull roughly 0.5, 1.5 and 3+ TB/s (the last saturates the 3.35 TB/s HBM3), so the
attention kernel is left roughly all, half, and little of the bandwidth. The achieved numbers
are measured (``STREAMER_GBPS``), these are only the intent."""


@dataclass(frozen=True)
class Partition:
    path: str             # "green" or "smem"
    attention_sms: int
    streamer_sms: int
    note: str = ""


def stream_buffer_bytes(arch: Arch) -> int:
    return 8 * arch.l2_bytes


def plan_lines(arch: Arch, attention_ctas: int) -> list[str]:
    """What the miss-cost measurement would do on ``arch`` (the dry-run text)."""
    free = arch.num_sms - attention_ctas
    lines = [f"misscost on {arch.name}: attention persistent on {attention_ctas} SMs, the DRAM "
             f"streamer on the other {free} ({arch.num_sms} SMs)",
             f"  partition: MISSCOST_PARTITION={os.environ.get('MISSCOST_PARTITION', 'auto')} "
             "(green context split via cuda-python, else max-shared-memory streamer CTAs); "
             "checked with %smid of the attention trace build and of the streamer",
             f"  streamer buffer {stream_buffer_bytes(arch) / 2**20:.0f} MiB (8x the L2), loads "
             "L2::evict_first, stop flag set on the attention stream after the kernel"]
    for lv in LEVELS:
        lines.append(f"  level {lv.label:>4}: " + ("streamer off" if lv.threads == 0 else
                     f"{free} CTAs x {lv.threads} threads, {lv.threads * 64 // 1024} KiB in "
                     "flight per SM"))
    lines.append("  every case is timed at every level (cold L2, launches alternating); ncu "
                 "counters are taken without the streamer (ncu serialises kernels)")
    return lines


# -- GPU side ----------------------------------------------------------------------------------

class PartitionError(RuntimeError):
    """The requested SM partition could not be made or did not hold."""


def green_streams(attention_sms: int, device_index: int):
    """Two green contexts on disjoint SM sets (attention_sms, the rest) and a torch stream in
    each: (attention stream, streamer stream, Partition). Raises PartitionError saying why."""
    import torch
    try:
        from cuda.bindings import driver as drv
    except ImportError as e:
        raise PartitionError(f"cuda-python (cuda.bindings) is not installed: {e}") from e

    def ok(res):
        err, *rest = res
        if int(err) != 0:
            raise PartitionError(f"CUDA driver error {err}")
        return rest[0] if len(rest) == 1 else rest

    torch.cuda.init()
    dev = ok(drv.cuDeviceGet(device_index))
    whole = ok(drv.cuDeviceGetDevResource(dev, drv.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM))
    groups, n, rest = ok(drv.cuDevSmResourceSplitByCount(1, whole, 0, attention_sms))
    if n != 1 or groups[0].sm.smCount != attention_sms:
        raise PartitionError(f"split gave {n} group(s) of {[g.sm.smCount for g in groups[:n]]} "
                             f"SMs, not one of {attention_sms}")
    streams = []
    for part in (groups[0], rest):
        desc = ok(drv.cuDevResourceGenerateDesc([part], 1))
        ctx = ok(drv.cuGreenCtxCreate(desc, dev,
                                      drv.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM))
        s = ok(drv.cuGreenCtxStreamCreate(ctx, drv.CUstream_flags.CU_STREAM_NON_BLOCKING, 0))
        streams.append(torch.cuda.get_stream_from_external(int(s), device_index))
    return streams[0], streams[1], Partition("green", attention_sms, rest.sm.smCount,
                                             "cuDevSmResourceSplitByCount + cuGreenCtxCreate")


class Streamer:
    """The streamer kernel, its buffer, stop flag and per-launch records on one device."""

    def __init__(self, arch: Arch, n_ctas: int, side_stream, device_index: int = 0):
        import cupy
        import torch

        from spec.family import device_limits
        self.n_ctas, self.side, self.dev = n_ctas, side_stream, device_index
        self.smem = device_limits(device_index).smem_per_block_optin
        n_vec = stream_buffer_bytes(arch) // 16
        self.buf = torch.randint(0, 2**31 - 1, (n_vec * 4,), dtype=torch.int32,
                                 device=f"cuda:{device_index}")
        self.n_vec = n_vec
        self.stop = torch.zeros(1, dtype=torch.int32, device=self.buf.device)
        with cupy.cuda.Device(device_index):
            self.kernel = cupy.RawKernel(STREAM_SOURCE, STREAM_KERNEL)
            self.kernel.max_dynamic_shared_size_bytes = self.smem
        self.rec = None
        self.slots = itertools.count()

    def reserve(self, launches: int) -> None:
        import torch
        self.rec = torch.zeros((launches, self.n_ctas, 4), dtype=torch.int64,
                               device=self.buf.device)
        self.slots = itertools.count()

    def start(self, threads: int) -> int:
        """Launch on the side stream after everything queued on the current stream; returns the
        record slot."""
        import cupy
        import numpy as np
        import torch
        k = next(self.slots)
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(self.dev))
        self.side.wait_event(ev)
        with torch.cuda.stream(self.side):
            self.stop.zero_()
            self.rec[k].zero_()
        with cupy.cuda.Device(self.dev), cupy.cuda.ExternalStream(self.side.cuda_stream,
                                                                  self.dev):
            self.kernel((self.n_ctas,), (threads,),
                        (np.uint64(self.buf.data_ptr()), np.int64(self.n_vec),
                         np.uint64(self.stop.data_ptr()), np.uint64(self.rec[k].data_ptr()),
                         np.int64(MAX_STREAM_NS)), shared_mem=self.smem)
        return k

    def finish(self) -> None:
        """Set the stop flag on the current stream (after the attention kernel)."""
        self.stop.fill_(1)

    def records(self, slot: int):
        """(bytes, start_ns, end_ns, smid) int64 [n_ctas, 4] of one launch (after a sync)."""
        return self.rec[slot].cpu().numpy()


def achieved_gbps(rec) -> float:
    """Bytes over the streamer's span (first start to last end over its CTAs), GB/s."""
    span = int(rec[:, 2].max()) - int(rec[:, 1].min())
    return float(rec[:, 0].sum()) / span if span > 0 else float("nan")


def _partition(arch: Arch, p: int, dev: int, say) -> tuple:
    """(attention stream, Streamer, Partition): the green path when asked for or possible (a
    short streamer launch on the green stream must succeed), else the shared-memory path."""
    import torch
    want = os.environ.get("MISSCOST_PARTITION", "auto")
    if want not in ("auto", "green", "smem"):
        raise PartitionError(f"MISSCOST_PARTITION={want!r}; use auto, green or smem")
    if want in ("auto", "green"):
        try:
            att, side, part = green_streams(p, dev)
            streamer = Streamer(arch, part.streamer_sms, side, dev)
            streamer.reserve(1)
            with torch.cuda.stream(att):
                streamer.start(32)
                streamer.finish()
            torch.cuda.synchronize()
            return att, streamer, part
        except Exception as e:   # noqa: BLE001 - the fallback is reported, never silent
            if want == "green":
                raise PartitionError(f"green-context partition failed: {e}") from e
            say(f"green-context partition unavailable ({type(e).__name__}: {e}); using the "
                "shared-memory partition")
    part = Partition("smem", p, arch.num_sms - p, "max-smem streamer CTAs")
    return (torch.cuda.current_stream(dev),
            Streamer(arch, part.streamer_sms, torch.cuda.Stream(dev), dev), part)


def measure_convoy(cases: list[Case], arch: Arch, *, run: str, study: str, reps: int,
                   seed: int, timed: bool = True, progress=None):
    """The convoy grid's measure hook: ``measure_misscost`` with the streamer off and at its
    highest intensity only (bandwidth free, and cut to a few hundred GB/s for the attention
    SMs, the order of GB10's per-SM share: 273 GB/s over 48 SMs)."""
    return measure_misscost(cases, arch, run=run, study=study, reps=reps, seed=seed,
                            timed=timed, progress=progress, levels=(LEVELS[0], LEVELS[-1]))


def measure_misscost(cases: list[Case], arch: Arch, *, run: str, study: str, reps: int,
                     seed: int, timed: bool = True, progress=None,
                     levels: tuple[Level, ...] = LEVELS):
    """The misscost study's measure hook (check_and_time's signature): per problem, each case's
    build through the correctness gate (streamer off); once, on the first problem, a partition
    check per streamer level (an attention trace build beside the streamer:
    ``PARTITION_METRICS`` rows); then all cases of the problem timed launch by launch
    alternating, cold L2, at each intensity of ``levels`` (default ``LEVELS``); rows
    ``kernel_time_ms`` (note ``l2=cold stream=<level> partition=<path>``, x = streamer threads per
    CTA) and ``STREAMER_GBPS`` per timed launch."""
    import torch

    from ..measurement.correctness import random_inputs, reference
    from ..measurement.families import family
    from ..measurement.measure import Outcome, by_problem, case_row, gate
    from ..measurement.timing import time_interleaved

    res = Outcome()
    dev = torch.cuda.current_device()
    p = cases[0].variant.schedule.num_ctas
    if any(c.variant.schedule.num_ctas != p for c in cases):
        raise PartitionError("every misscost case must use the same persistent CTA count")
    att, streamer, part = _partition(arch, p, dev, res.summary.append)
    res.summary.append(f"partition: {part.path} ({part.note}), attention {part.attention_sms} "
                       f"SMs, streamer {part.streamer_sms} SMs")
    fam = family(cases[0].variant.backend, arch.name)
    warmup, checked = 3, False
    with torch.cuda.stream(att):
        for problem, group in by_problem(cases).items():
            q, k, v = random_inputs(problem, seed)
            ref = reference(q, k, v, problem.causal)
            runs = {}
            for case in group:
                passed = gate(fam, case, q, k, v, res, run=run, study=study, arch=arch, ref=ref)
                if passed is not None:
                    prep, out, _ = passed
                    runs[case] = (lambda f=fam, pr=prep, o=out, q=q, k=k, v=v:
                                  f.run(pr, q, k, v, o))
            if not runs:
                continue
            if not checked:   # the partition, once per run, on the first (smallest) problem
                first = next(iter(runs))
                for lv in levels[1:]:
                    rows = _partition_rows(fam, first, q, k, v, streamer, lv, part, run=run,
                                           study=study, arch=arch)
                    res.rows += rows
                    res.summary.append(f"partition at {lv.label}: " + ", ".join(
                        f"{r.metric}={r.value:.0f}" for r in rows))
                checked = True
            for lv in levels:
                streamer.reserve(len(runs) * (warmup + reps))
                slots: dict[str, list[int]] = {c.id: [] for c in runs}

                def launcher(c, fn, lv=lv):
                    def go():
                        if lv.threads:
                            slots[c.id].append(streamer.start(lv.threads))
                        fn()
                        if lv.threads:
                            streamer.finish()
                    return go
                samples = time_interleaved({c.id: launcher(c, fn) for c, fn in runs.items()},
                                           reps=reps, warmup=warmup, l2="cold",
                                           l2_bytes=arch.l2_bytes)
                note = f"l2=cold stream={lv.label} partition={part.path}"
                for c in runs:
                    for i, ms in enumerate(samples[c.id].ms):
                        res.rows.append(case_row(c, problem, Metric.KERNEL_TIME_MS, ms, run=run,
                                             study=study, arch=arch.name, sample=i, note=note,
                                             x=float(lv.threads)))
                    for i, slot in enumerate(slots[c.id][warmup:]):
                        res.rows.append(case_row(c, problem, STREAMER_GBPS,
                                             achieved_gbps(streamer.records(slot)), run=run,
                                             study=study, arch=arch.name, sample=i, note=note,
                                             unit="GB/s", x=float(lv.threads)))
                    med = samples[c.id].median
                    res.summary.append(f"{c.id} [{lv.label}]: {med:.3f} ms")
            del q, k, v, ref
            torch.cuda.empty_cache()
            if progress is not None:
                progress(len(group))
    return res


def _partition_rows(fam, case: Case, q, k, v, streamer: Streamer, lv: Level, part: Partition,
                    *, run: str, study: str, arch: Arch) -> list[Row]:
    """One attention trace build beside the streamer at level ``lv``: distinct SMs of each and
    of both. A shared SM means the partition did not hold (reported, and the summary says so)."""
    import torch

    from ..measurement.correctness import poisoned_like
    from ..measurement.measure import case_row
    prep = fam.prepare(case.variant, case.problem)
    streamer.reserve(1)
    slot = streamer.start(lv.threads)
    tr = fam.trace(prep, q, k, v, poisoned_like(q))   # synchronises the attention stream
    streamer.finish()
    torch.cuda.synchronize()
    att = {int(s) for s in tr["smid"]}
    mine = {int(s) & 0xFFFFFFFF for s in streamer.records(slot)[:, 3]}
    values = (len(att), len(mine), len(att & mine))
    note = (f"stream={lv.label} partition={part.path}; trace build {tr['build']}; attention "
            f"CTAs {len(tr['smid'])} on {len(att)} SMs")
    return [case_row(case, case.problem, m, val, run=run, study=study, arch=arch.name, note=note,
                 unit="SM", x=float(lv.threads)) for m, val in zip(PARTITION_METRICS, values)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.instruments.streamer",
                                 description="explain the misscost co-runner plan (no GPU needed)")
    ap.add_argument("--arch", default="h100")
    args = ap.parse_args(argv)
    try:
        arch = get_arch(args.arch)
    except Exception as e:   # noqa: BLE001
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(plan_lines(arch, misscost_ctas(arch))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

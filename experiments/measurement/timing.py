"""Kernel timing: the measurement protocol every speed number of this project follows.

- CUDA events on the torch current stream; CuPy and cuTile launches go on the same stream.
- Warm-up launches first (compilation and first-touch stay out of the samples), then ``reps``
  timed launches; every sample is kept and reported (median and spread are computed from them).
- The L2 state is explicit. ``cold``: before each repetition a buffer of at least 2x the L2 is
  written, which evicts the inputs, and the events bracket the kernel alone. The L2 is then full
  of dirty lines, which the timed kernel's first misses write back to DRAM (up to the L2's size
  of writes, about 12 us at 4 TB/s: a kernel that moves a few L2s of data pays it visibly).
  ``clean``: the same write, then a read of a second 2x-L2 buffer, so the L2 holds no input and
  no dirty line (what a kernel meets after a read-mostly predecessor). ``warm``: back-to-back
  launches, inputs may be resident.
- The events bracket GPU time, not host time. Before each start event the GPU spins
  (``torch.cuda._sleep``) for longer than the host needs to enqueue the start event, the launch
  and the end event, so the kernel is already queued when the start event fires (the "blocking
  kernel" of NVIDIA's nvbench). Without it a launch whose host side (Python, cuTile's argument
  handling, SDPA's dispatch: 20-100 us) outlasts the flush leaves the GPU idle between the
  events, and a 10 us kernel reads as 100 us: every short shape then measures the host, not the
  kernel. The host side is measured too (``Samples.host_ms``: wall time of the launch call),
  because it is what a caller without CUDA graphs pays per call.
- Comparisons alternate A/B/A/B launch by launch (``time_interleaved``), so clock drift and
  neighbours on the GPU affect every variant alike.
- Speed claims are ratios against peers timed in the same call (PyTorch SDPA flash and cuDNN).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Literal

L2State = Literal["cold", "clean", "warm"]


@dataclass(frozen=True)
class Samples:
    ms: tuple[float, ...]          # GPU time per launch (CUDA events)
    l2: str
    host_ms: tuple[float, ...] = ()  # host wall time of each launch call

    @property
    def host_median(self) -> float:
        return statistics.median(self.host_ms)

    @property
    def median(self) -> float:
        return statistics.median(self.ms)

    @property
    def spread(self) -> float:
        """Half the interquartile range relative to the median (a robust relative spread)."""
        if len(self.ms) < 4:
            return (max(self.ms) - min(self.ms)) / (2 * self.median)
        q = statistics.quantiles(self.ms, n=4)
        return (q[2] - q[0]) / (2 * self.median)

    def tflops(self, flops: float) -> float:
        return flops / (self.median * 1e-3) / 1e12


class _Flusher:
    """``cold``: write a 2x-L2 buffer; ``clean``: then read another one (write-backs done)."""

    def __init__(self, l2_bytes: int, clean: bool = False):
        import torch
        n = max(2 * l2_bytes, 1 << 20) // 4
        self.buf = torch.empty(n, dtype=torch.int32, device="cuda")
        self.other = torch.full((n,), 7, dtype=torch.int32, device="cuda") if clean else None

    def __call__(self) -> None:
        self.buf.fill_(0x5A5A5A5A)
        if self.other is not None:
            self.other.max()


HOLD_MARGIN = 3.0     # the GPU spins this many times the slowest host launch of the warm-up
HOLD_MIN_MS = 0.2     # and at least this long


def spin_cycles_per_ms() -> float:
    """GPU clock cycles of ``torch.cuda._sleep`` per millisecond, measured on the spot (the spin
    counts SM clock cycles, so the rate follows the clock the GPU runs at now)."""
    import torch
    cycles = 2_000_000
    torch.cuda._sleep(cycles)                 # first launch out of the measurement
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / start.elapsed_time(end)


def time_interleaved(fns: dict[str, Callable[[], None]], *, reps: int = 20, warmup: int = 3,
                     l2: L2State = "cold", l2_bytes: int | None = None,
                     prime: dict[str, Callable[[], None]] | None = None) -> dict[str, Samples]:
    """Time several launchers, alternating them launch by launch; returns samples per name
    (GPU time between events that the host cannot stretch, and the host time of each call).
    ``prime[name]``, when given, runs untimed after the flush and before the spin: the L2 state
    the timed launch meets is then what that call leaves (a decode step after the one before)."""
    import time

    import torch
    if l2_bytes is None:
        l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    flush = _Flusher(l2_bytes, clean=l2 == "clean") if l2 != "warm" else (lambda: None)
    slowest = 0.0                             # host ms of the last warm-up call (no compile)
    for fn in fns.values():
        for _ in range(warmup):
            t0 = time.perf_counter()
            fn()
            last = (time.perf_counter() - t0) * 1e3
            torch.cuda.synchronize()
        slowest = max(slowest, last if warmup else 0.0)
    hold = int(max(HOLD_MIN_MS, HOLD_MARGIN * slowest) * spin_cycles_per_ms())
    events = {name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(reps)] for name in fns}
    host = {name: [] for name in fns}
    prime = prime or {}
    for i in range(reps):
        for name, fn in fns.items():
            flush()
            if name in prime:
                prime[name]()
            torch.cuda._sleep(hold)           # the GPU waits here while the host enqueues
            start, end = events[name][i]
            t0 = time.perf_counter()
            start.record()
            fn()
            end.record()
            host[name].append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return {name: Samples(tuple(s.elapsed_time(e) for s, e in ev), l2, tuple(host[name]))
            for name, ev in events.items()}


STORED_DIGITS = 5
"""Significant digits a timed value is stored with: a median of CUDA-event samples whose spread
is rarely under 0.5% carries no more (and 17-digit floats triple a compressed table's size)."""


def stored(value):
    """``value`` as a timing table stores it: a float to ``STORED_DIGITS`` significant digits
    (``repr`` of the rounded float, so it reads back equal), anything else as it is."""
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.{STORED_DIGITS}g}")
    return value


def time_one(fn: Callable[[], None], **kw) -> Samples:
    return time_interleaved({"fn": fn}, **kw)["fn"]


def sdpa_peers(q, k, v, causal: bool) -> dict[str, Callable[[], None]]:
    """Launchers for PyTorch SDPA's flash and cuDNN backends (those that accept the shapes)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    peers = {}
    gqa = q.shape[1] != k.shape[1]      # grouped-query heads: flash needs the flag to accept them
    for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                          ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
        def launch(backend=backend):
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
        try:
            launch()
        except RuntimeError:
            continue   # backend unavailable for this shape/GPU: reported as missing, not faked
        peers[name] = launch
    return peers

"""Kernel timing: the measurement protocol every speed number of this project follows.

- CUDA events on the torch current stream; CuPy and cuTile launches go on the same stream.
- Warm-up launches first (compilation and first-touch stay out of the samples), then ``reps``
  timed launches; every sample is kept and reported (median and spread are computed from them).
- The L2 state is explicit. ``cold``: before each repetition a buffer of at least 2x the L2 is
  written, which evicts the inputs, and the events bracket the kernel alone. ``warm``: back-to-back
  launches, inputs may be resident.
- Comparisons alternate A/B/A/B launch by launch (``time_interleaved``), so clock drift and
  neighbours on the GPU affect every variant alike.
- Speed claims are ratios against peers timed in the same call (PyTorch SDPA flash and cuDNN).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Literal

L2State = Literal["cold", "warm"]


@dataclass(frozen=True)
class Samples:
    ms: tuple[float, ...]
    l2: str

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
    def __init__(self, l2_bytes: int):
        import torch
        self.buf = torch.empty(max(2 * l2_bytes, 1 << 20) // 4, dtype=torch.int32, device="cuda")

    def __call__(self) -> None:
        self.buf.fill_(0x5A5A5A5A)


def time_interleaved(fns: dict[str, Callable[[], None]], *, reps: int = 20, warmup: int = 3,
                     l2: L2State = "cold", l2_bytes: int | None = None) -> dict[str, Samples]:
    """Time several launchers, alternating them launch by launch; returns samples per name."""
    import torch
    if l2_bytes is None:
        l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    flush = _Flusher(l2_bytes) if l2 == "cold" else (lambda: None)
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    events = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            flush()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            events[name].append((start, end))
    torch.cuda.synchronize()
    return {name: Samples(tuple(s.elapsed_time(e) for s, e in ev), l2)
            for name, ev in events.items()}


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

"""GPU architectures the study targets: SM count, L2 size, cache geometry and kernel defaults.

The registry holds published numbers so that plans and simulations work without a GPU; ``detect()``
reads the real device when there is one, and measured runs record the live values (never the
registry's) in every row.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .problem import Tiles

MiB = 1 << 20


class UnknownArch(ValueError):
    """An arch name that is not in the registry."""


@dataclass(frozen=True)
class Memory:
    """The DRAM and L2 facts the time model and the DRAM-bound sections need: the peak DRAM
    bandwidth (published) and the unloaded load-to-use latencies of an L2 hit and of a miss served
    by DRAM (measured by pointer chase where ``None`` is not given; ``None``: not known)."""

    dram_bytes_per_s: float
    l2_hit_s: float | None = None
    dram_s: float | None = None
    source: str = ""


@dataclass(frozen=True)
class Arch:
    name: str
    sm: str                  # compile target, e.g. "sm_90"
    compute_capability: tuple[int, int]
    num_sms: int
    l2_bytes: int
    l2_partitions: int = 1   # Hopper's L2 is two partitions joined by a crossbar
    sector_bytes: int = 32
    line_bytes: int = 128
    cutile_tiles: Tiles = Tiles(64, 64)
    cutile_occupancy: int = 2
    cuda_tiles: Tiles = Tiles(64, 64)
    cuda_occupancy: int = 1
    marketing_name: str = ""
    memory: Memory | None = None

    @property
    def dram_bytes_per_s(self) -> float | None:
        """Peak DRAM bandwidth (``memory``), None when the registry has no figure for it."""
        return self.memory.dram_bytes_per_s if self.memory else None

    @property
    def l2_mib(self) -> float:
        return self.l2_bytes / MiB

    def resident_ctas(self, occupancy: int) -> int:
        """CTAs resident at once when every SM holds ``occupancy`` of them."""
        return self.num_sms * occupancy


# Published specs. GB10: the paper (48 SMs, 24 MiB). H100 SXM: 132 SMs, 50 MiB L2 as
# cudaDeviceProp.l2CacheSize reports it (52428800 B; NVIDIA quotes "50 MB"). H200: same GH100 die,
# 60 MiB L2 read off the device on this project's lent H200 (anchors.md).
# B200: 148 SMs and 126 MiB L2 (NVIDIA Blackwell datasheet / CUDA device query of a DGX B200).
# B300 (Blackwell Ultra, sm_103): 148 SMs enabled of the 160 on the die and 126 MiB L2, per
# NVIDIA's technical blog "Inside NVIDIA Blackwell Ultra" (2025). Both Blackwell entries are
# published numbers this project has not read off a device: detect() replaces them with the
# device's own when run there.
# cuTile defaults on sm_90 (h100, h200): 128x128 tiles at occupancy 1, the fastest spill-free
# configuration measured on an H100 for D in {64, 128}, causal or not
# (kernels/rules/configs/h100.json, which also carries the 8 worker warps these tiles need to stay
# spill-free).
# Memory: H100 SXM5 80 GB HBM3 3.35 TB/s and H200 SXM 141 GB HBM3e 4.8 TB/s (NVIDIA datasheets;
# the committed H100 runs are on "NVIDIA H100 80GB HBM3", the SXM5 part); GB10 273 GB/s LPDDR5x
# (DGX Spark spec). Latencies: pointer chase on an H100 (profiles/h100/latency-20261123, near-
# partition L2 hit 143.4 ns, DRAM 348.7 ns, unloaded); GB10 has none measured and takes the
# H100's (LPDDR5x is likely slower, so exposed latency is understated); H200 by pointer chase
# (profiles/h200/latency-20261128: 141.5 ns, 333.6 ns).
_H100_LAT = (143.4e-9, 348.7e-9)
_DATACENTER_BUILDS = dict(cutile_tiles=Tiles(128, 128), cutile_occupancy=1,
                          cuda_tiles=Tiles(128, 64))
"""The default builds of the datacenter parts (Hopper, Blackwell B200/B300), one for all of
them: 128x128 cuTile tiles, one cuTile CTA per SM, 128x64 CUDA tiles."""
_REGISTRY: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch("gb10", "sm_121", (12, 1), 48, 24 * MiB, 1,
             cutile_tiles=Tiles(64, 64), cutile_occupancy=2, cuda_tiles=Tiles(80, 80),
             marketing_name="NVIDIA GB10 (DGX Spark)",
             memory=Memory(273e9, *_H100_LAT,
                           "NVIDIA DGX Spark / GB10 spec (273 GB/s LPDDR5x, 48 SMs); latencies: no "
                           "GB10 measurement, the H100's measured values are assumed (LPDDR5x is "
                           "likely slower, so exposed latency is understated)")),
        Arch("h100", "sm_90", (9, 0), 132, 50 * MiB, 2,
             **_DATACENTER_BUILDS,
             marketing_name="NVIDIA H100 80GB HBM3",
             memory=Memory(3.35e12, *_H100_LAT,
                           "NVIDIA H100 SXM5 datasheet (3.35 TB/s HBM3); latencies measured by "
                           "pointer chase, profiles/h100/latency-20261123 (near-partition L2 hit, "
                           "DRAM; unloaded)")),
        Arch("h200", "sm_90", (9, 0), 132, 60 * MiB, 2,
             **_DATACENTER_BUILDS,
             marketing_name="NVIDIA H200",
             memory=Memory(4.8e12, 141.5e-9, 333.6e-9,
                           "NVIDIA H200 SXM datasheet (4.8 TB/s HBM3e); latencies measured by "
                           "pointer chase, profiles/h200/latency-20261128 (L2 hit, DRAM; "
                           "unloaded)")),
        Arch("b200", "sm_100", (10, 0), 148, 126 * MiB, 2,
             **_DATACENTER_BUILDS,
             marketing_name="NVIDIA B200"),
        Arch("b300", "sm_103", (10, 3), 148, 126 * MiB, 2,
             **_DATACENTER_BUILDS,
             marketing_name="NVIDIA B300"),
    )
}


def known() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def get(name: str) -> Arch:
    try:
        return _REGISTRY[name.lower()]
    except KeyError:
        raise UnknownArch(f"unknown arch {name!r}; known: {', '.join(known())}") from None


def no_gpu_reason() -> str:
    """Why ``detect()`` finds no GPU, in words: torch not installed (and how to install it) is
    told apart from torch present without a usable CUDA device."""
    import importlib.util

    from .install import GPU_EXTRA
    if importlib.util.find_spec("torch") is None:
        return f"torch is not installed, so no GPU can be used; to measure, {GPU_EXTRA}"
    return "no CUDA GPU found (torch is installed; torch.cuda.is_available() is False)"


def detect() -> Arch | None:
    """The current CUDA device as an ``Arch`` (registry defaults, live SM count and L2 size).

    Returns None when there is no usable CUDA device (no torch, no driver, or no GPU).
    """
    try:
        import torch
    except ImportError:
        return None
    try:
        if not torch.cuda.is_available():
            return None
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
    except Exception:  # a driver without a device raises various errors; all mean "none here"
        return None
    cc = (props.major, props.minor)
    name = props.name
    candidates = [a for a in _REGISTRY.values() if a.compute_capability == cc]
    base = next((a for a in candidates if "H200" in name and a.name == "h200"), None)
    base = base or next((a for a in candidates if a.name != "h200"), None)
    if base is None:
        base = Arch(f"sm{cc[0]}{cc[1]}", f"sm_{cc[0]}{cc[1]}", cc, props.multi_processor_count,
                    props.L2_cache_size)
    return replace(base, num_sms=props.multi_processor_count, l2_bytes=props.L2_cache_size,
                   marketing_name=name)

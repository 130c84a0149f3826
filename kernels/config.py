"""Kernel configurations per arch: tiles, occupancy hint, worker warps, tuning-ladder level.

Runs never autotune. They read ``kernels/configs/<arch>.json`` (written by ``python -m experiments.tune``,
values chosen by measurement) and fall back to the arch registry's ``cutile_tiles`` /
``cutile_occupancy`` (spec/arch.py) for keys the file lacks.

JSON schema (version 1)::

    {"schema": 1, "arch": "h100", "device": "...", "source": "...",
     "configs": {"d64.full": {"tile_m": 128, "tile_n": 64, "occupancy": 2, "worker_warps": null,
                              "schedule": "persistent"}, "d64.causal": {...}, ...}}
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from spec import arch as arch_registry
from spec.problem import Tiles

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
SCHEMA = 1

LEVELS = {1: "basic", 2: "exp2", 3: "transposed-K", 4: "latency-hints", 5: "occupancy",
          6: "approx-division"}
"""The NVIDIA tuning ladder; each level includes every lower one (kernels/fmha.py)."""


@dataclass(frozen=True)
class KernelConfig:
    tile_m: int
    tile_n: int
    occupancy: int | None = None       # CTAs per SM hint (None: compiler default)
    worker_warps: int | None = None    # num_worker_warps hint (None: default, 4 -> 256 threads)
    schedule: str = "persistent"       # default schedule for attention(): "persistent" or "grid"

    @property
    def tiles(self) -> Tiles:
        return Tiles(self.tile_m, self.tile_n)

    def to_json(self) -> dict:
        return asdict(self)


def config_key(D: int, causal: bool) -> str:
    return f"d{D}.{'causal' if causal else 'full'}"


# archs without a measured file of their own that share a die with one that has it (same SMs,
# registers and shared memory; only the L2 size differs): H200 is a GH100 like the H100
SAME_DIE = {"h200": "h100"}


@lru_cache(maxsize=None)
def load_arch_configs(arch: str) -> dict[str, KernelConfig]:
    path = CONFIG_DIR / f"{arch}.json"
    if not path.exists() and arch in SAME_DIE:
        path = CONFIG_DIR / f"{SAME_DIE[arch]}.json"
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {data.get('schema')!r}, expected {SCHEMA}; re-run "
                         f"python -m experiments.tune --arch {arch}")
    return {k: KernelConfig(**v) for k, v in data.get("configs", {}).items()}


def default_config(arch: str, D: int, causal: bool) -> KernelConfig:
    """The measured default for (arch, D, causal), else the registry's per-arch defaults."""
    cfg = load_arch_configs(arch).get(config_key(D, causal))
    if cfg is not None:
        return cfg
    a = arch_registry.get(arch)
    # on sm_90, 128x128 tiles need 8 worker warps (384 threads, 168 registers) to stay spill-free
    ww = 8 if a.sm == "sm_90" and a.cutile_tiles.m * a.cutile_tiles.n >= 128 * 128 else None
    return KernelConfig(a.cutile_tiles.m, a.cutile_tiles.n, a.cutile_occupancy, ww)

"""Kernel configurations per arch: tiles, occupancy hint, worker warps, schedule; the configs
file, the tuned (D, causal) defaults and the shape classes.

Runs never autotune. They read ``kernels/rules/configs/<arch>.json``. What ``attention()`` runs is
chosen by the fitted work model of ``kernels.rules.choice`` (the file's ``rule`` block, written by
``python -m experiments.tuning.rulefit``); the tuned blocks below (written by
``python -m experiments.tuning.tune``) are its fallback for a (D, causal) key without rule
constants, and the arch registry's ``cutile_tiles`` / ``cutile_occupancy`` (spec/arch.py) theirs for
keys the file lacks.

Why shape classes: a configuration tuned at B=1, H=16, S=16K (the benchmark's shapes) fills the
GPU with hundreds of long work items. A batch of short sequences, a ragged last tile, grouped K/V
heads shared by several query heads, or a short query block against a long K/V cache change what
limits the kernel (few or short work items, a masked tail on every head, K/V reuse across heads,
long scans per item), so the best tiles and schedule can differ. A problem with no more 128-row
Q tiles than a Hopper GPU has SMs is ``small`` whatever its lengths: at one CTA per SM it leaves SMs
idle for its whole run, so what fills them (64-row tiles, two CTAs per SM) matters more than what
a ragged tail or a short scan costs. A problem whose work items scan at most 512 keys is ``tiny``:
each CTA runs 1-4 K/V steps, so launching it, loading its Q tile and storing its output weigh as
much as its loop, and persistent CTAs that stay resident save the launches (H100: q-major
persistent 1.02-1.04x the grid launch at S=512, 0.97x at S=1024, B 16/32, H=16, D=128: the
short-variant measurements of docs/history.md). ``shape_class`` sorts a problem
into one of a few explicit classes (first match wins):

==========  ==========================================  ==================================
class       rule                                        example (the issue's suite)
==========  ==========================================  ==================================
``cross``   S_q != S_kv                                 S_q=1024, S_kv=16K
``gqa``     H_kv < H (grouped-query heads)              B=2, H=32, H_kv=8, S=4K
``small``   B·H·⌈S_q/128⌉ <= 128 (one wave or less)      B=1, H=4, S=1000
``uneven``  S_q or S_kv not a multiple of 128           B=1, H=4, S=7000
``tiny``    S_kv <= 512                                 B=32, H=16, S=512
``short``   S_kv <= 2048                                B=16, H=16, S=1024
``long``    everything else (the benchmark's class)     B=1, H=16, S=16K
==========  ==========================================  ==================================

The ``long`` class is the file's top-level ``configs`` (one per (D, causal) key, measured at
B=1, H=16, S=16K); every other class has its own ``configs`` per key, and a key it lacks falls back
to the top-level (D, causal) default. A class nobody has measured says so in its ``status``.

JSON schema (version 2; version-1 files, without ``classes``, are read as "every class falls
back")::

    {"schema": 2, "arch": "h100", "device": "...", "source": "...",
     "configs": {"d64.full": {"tile_m": 128, "tile_n": 64, "occupancy": 2, "worker_warps": null,
                              "schedule": "grid", "ctas_per_sm": null}, ...},
     "measured": {"d64.full": [trials...], ...},
     "classes": {"short": {"status": "unmeasured, falls back to the d/causal default",
                           "configs": {}, "measured": {}}, ...}}
"""
from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from spec import arch as arch_registry
from spec.problem import Problem, Tiles

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
SCHEMA = 2
READABLE_SCHEMAS = (1, 2)

LEVELS = {1: "basic", 2: "exp2", 3: "transposed-K", 4: "latency-hints", 5: "occupancy",
          6: "approx-division"}
"""The NVIDIA tuning ladder; each level includes every lower one (kernels/device/fmha.py)."""

SCHEDULES = ("grid", "glpt", "persistent", "snake", "lpt")
"""Default schedules a configuration may name: one CTA per work item (``grid``; ``glpt``: longest
causal rows first within L2 sections of heads, ``spec.schedules``), or P persistent CTAs taking
work items in q-major order (``persistent``: the grid-stride deal; ``snake``: odd rounds dealt in
reverse, which balances causal work when a round holds whole heads), or P persistent CTAs taking
the longest causal rows first."""


@dataclass(frozen=True)
class KernelConfig:
    tile_m: int
    tile_n: int
    occupancy: int | None = None       # CTAs per SM hint (None: compiler default)
    worker_warps: int | None = None    # num_worker_warps hint (None: default, 4 -> 256 threads)
    schedule: str = "persistent"       # default schedule for attention(): one of SCHEDULES
    ctas_per_sm: int | None = None     # persistent P = SMs x this (None: the occupancy hint)
    tactic: int = 0                    # kernels.device.fmha TACTIC bits (0: the studies' build)

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule {self.schedule!r}; a configuration names one of "
                             f"{', '.join(SCHEDULES)}")

    @property
    def tiles(self) -> Tiles:
        return Tiles(self.tile_m, self.tile_n)

    def to_json(self) -> dict:
        d = asdict(self)
        if not self.tactic:     # files written before the field existed stay byte-identical
            d.pop("tactic")
        return d


def config_key(D: int, causal: bool) -> str:
    return f"d{D}.{'causal' if causal else 'full'}"


# -- shape classes ---------------------------------------------------------------------------------

class ShapeClass(str, enum.Enum):
    """The closed set of shape classes (module docstring); the value is the JSON name."""

    CROSS = "cross"
    GQA = "gqa"
    SMALL = "small"
    UNEVEN = "uneven"
    TINY = "tiny"
    SHORT = "short"
    LONG = "long"


UNEVEN_QUANTUM = 128   # the largest tile edge of any configuration: below it a tile is ragged
TINY_MAX_S = 512       # "tiny": at most 4 K/V tiles of 128 keys per work item
SHORT_MAX_S = 2048     # "short": at most 16 K/V tiles of 128 keys per work item
SMALL_MAX_ITEMS = 128  # "small": at most 128 Q tiles of 128 rows, one wave on >= 128 SMs


def shape_class(problem: Problem) -> ShapeClass:
    """The class of ``problem`` (first match of the module docstring's table)."""
    p = problem
    if p.S_q != p.S_kv:
        return ShapeClass.CROSS
    if p.H_kv < p.H:
        return ShapeClass.GQA
    if p.B * p.H * -(-p.S_q // UNEVEN_QUANTUM) <= SMALL_MAX_ITEMS:
        return ShapeClass.SMALL
    if p.S_q % UNEVEN_QUANTUM or p.S_kv % UNEVEN_QUANTUM:
        return ShapeClass.UNEVEN
    if p.S_kv <= TINY_MAX_S:
        return ShapeClass.TINY
    if p.S_kv <= SHORT_MAX_S:
        return ShapeClass.SHORT
    return ShapeClass.LONG


def representatives(cls: ShapeClass, D: int, causal: bool) -> tuple[Problem, ...]:
    """The problems a class is tuned at for a (D, causal) key: its small and its large end in
    the shape suite, at that D and mask (fp16 except GQA, which the suite runs in bf16).

    Two ends, because the best tiles move with the size inside a class: at D=128 non-causal,
    64x128 tiles at two CTAs per SM ran 5% faster than 128x128 at S=16K and 13% slower at
    S=128K (H100, one tuning run: ``measured`` in profiles/h100/tune-trials-20261125), where K/V
    per head (64 MiB) outgrows the L2, so that each K/V tile, now read by twice as many Q tiles, is
    more often read from DRAM (the likely cause, not profiled). ``experiments.tuning.tune`` ranks a
    candidate by the geometric mean of its times over these problems."""
    shapes = {
        ShapeClass.LONG: (dict(B=1, H=16, S_q=16384), dict(B=1, H=16, S_q=131072)),
        ShapeClass.TINY: (dict(B=16, H=16, S_q=512), dict(B=32, H=16, S_q=512)),
        ShapeClass.SHORT: (dict(B=32, H=16, S_q=1024), dict(B=32, H=16, S_q=2048)),
        ShapeClass.SMALL: (dict(B=1, H=4, S_q=1000), dict(B=1, H=4, S_q=3000)),
        ShapeClass.UNEVEN: (dict(B=1, H=4, S_q=7000), dict(B=1, H=12, S_q=20000)),
        ShapeClass.GQA: (dict(B=2, H=32, H_kv=8, S_q=4096, dtype="bf16"),
                         dict(B=2, H=32, H_kv=4, S_q=16384, dtype="bf16")),
        ShapeClass.CROSS: (dict(B=1, H=16, S_q=1024, S_kv=16384),),
    }
    out = tuple(Problem(D=D, causal=causal, **kw) for kw in shapes[cls])
    for p in out:
        if shape_class(p) != cls:
            raise ValueError(f"the representative {p.label} of {cls.value} is "
                             f"{shape_class(p).value}")
    return out


def representative(cls: ShapeClass, D: int, causal: bool) -> Problem:
    """The first of ``representatives``: the problem a class's builds are resource-checked at."""
    return representatives(cls, D, causal)[0]


UNMEASURED = "unmeasured, falls back to the d/causal default"


# -- reading ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ArchConfigs:
    """A parsed ``kernels/rules/configs/<arch>.json``: the (D, causal) defaults (the long class)
    and, per other class, its measured keys and status."""

    base: dict          # key -> KernelConfig
    classes: dict       # class name -> {key -> KernelConfig}
    status: dict        # class name -> status line
    rule: dict | None = None   # the raw ``rule`` block (kernels.rules.choice reads it)


# archs without a measured file of their own that share a die with one that has it (same SMs,
# registers and shared memory; only the L2 size differs): H200 is a GH100 like the H100
SAME_DIE = {"h200": "h100"}


def config_path(arch: str) -> Path | None:
    """The JSON an arch reads: its own, or that of the arch it shares a die with."""
    path = CONFIG_DIR / f"{arch}.json"
    if not path.exists() and arch in SAME_DIE:
        path = CONFIG_DIR / f"{SAME_DIE[arch]}.json"
    return path if path.exists() else None


def parse(data: dict, where: str = "configs") -> ArchConfigs:
    """Read a schema-1 or schema-2 document; a bad one raises ValueError naming the fix."""
    fix = "re-run python -m experiments.tuning.tune"
    if data.get("schema") not in READABLE_SCHEMAS:
        raise ValueError(f"{where}: schema {data.get('schema')!r}, expected one of "
                         f"{READABLE_SCHEMAS}; {fix}")

    def configs(block: dict, name: str) -> dict:
        try:
            return {k: KernelConfig(**v) for k, v in block.items()}
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}: {name}: {e}; {fix}") from None

    base = configs(data.get("configs", {}), "configs")
    known = {c.value for c in ShapeClass if c != ShapeClass.LONG}
    raw = data.get("classes", {})
    bad = sorted(set(raw) - known)
    if bad:
        raise ValueError(f"{where}: unknown shape class {', '.join(bad)}; known: "
                         f"{', '.join(sorted(known))} (the long class is the top-level configs); "
                         f"{fix}")
    classes = {name: configs(raw.get(name, {}).get("configs", {}), f"classes.{name}")
               for name in sorted(known)}
    status = {name: raw.get(name, {}).get("status", UNMEASURED) for name in sorted(known)}
    return ArchConfigs(base, classes, status, data.get("rule"))


@lru_cache(maxsize=None)
def load(arch: str) -> ArchConfigs:
    path = config_path(arch)
    if path is None:
        return ArchConfigs({}, {}, {})
    return parse(json.loads(path.read_text()), str(path))


def load_arch_configs(arch: str) -> dict[str, KernelConfig]:
    """The (D, causal) defaults of ``arch`` (the long class)."""
    return load(arch).base


def registry_config(arch: str, tiles: Tiles | None = None) -> KernelConfig:
    """The arch registry's hints for ``tiles`` (default: the registry's own tiles): its
    occupancy hint, and on sm_90 8 worker warps for 128x128 tiles (384 threads, 168 registers:
    with the default 4 warps they spill). What a build gets when no measured configuration has
    its tiles."""
    a = arch_registry.get(arch)
    t = tiles or a.cutile_tiles
    ww = 8 if a.sm == "sm_90" and t.m * t.n >= 128 * 128 else None
    return KernelConfig(t.m, t.n, a.cutile_occupancy, ww)


def default_config(arch: str, D: int, causal: bool) -> KernelConfig:
    """The measured default for (arch, D, causal), else the registry's per-arch defaults."""
    cfg = load_arch_configs(arch).get(config_key(D, causal))
    return cfg if cfg is not None else registry_config(arch)


def class_config(arch: str, problem: Problem) -> KernelConfig:
    """The configuration of ``problem``'s shape class for (D, causal), else the (D, causal)
    default (``default_config``): what ``kernels.rules.choice.problem_config`` falls back to for a
    key the arch's rule has no constants for."""
    cls = shape_class(problem)
    key = config_key(problem.D, problem.causal)
    cfg = load(arch).classes.get(cls.value, {}).get(key)
    return cfg if cfg is not None else default_config(arch, problem.D, problem.causal)


def persistent_ctas(cfg: KernelConfig, n_work: int, num_sms: int) -> int:
    """P of a persistent default schedule: one wave of resident CTAs, at most one per work item.

    The hook for small problems: ``ctas_per_sm`` (measured per class by ``experiments.tuning.tune``)
    sets the wave; None keeps the occupancy hint's (1 when there is none)."""
    per_sm = cfg.ctas_per_sm or cfg.occupancy or 1
    return max(1, min(num_sms * per_sm, n_work))

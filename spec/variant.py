"""A variant: one compile-time specialisation of a kernel family, named by one id grammar.

``{backend}.{order}.{schedule}.m{TILE_M}n{TILE_N}d{D}[.occ{N}][.L{level}][.st{stages}][.t{tactic}][.{pass}]``,
e.g. ``cutile.sawtooth.static132.m64n64d64``, ``cuda.linear.static96.m80n80d64.st1`` or
``cutile.linear.static264.m64n128d64.occ2.t4096`` (the forward's TACTIC bits,
``kernels.device.tactics``). The id is the NVTX range under ncu, the ``variant`` column of every
CSV and the key of the figure style table. Optional fields appear only when they differ from the
family default, so ids of builds made before a knob existed stay what they were.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any

from .orders import OrderKind, ScanOrder
from .problem import Problem, Tiles
from .schedules import CtaSchedule

DEFAULT_STAGES = 2
"""K/V pipeline depth of every build unless a variant says otherwise: a double buffer (tile s+1
loads while tile s is computed). ``Variant.stages`` None means this depth."""
STAGE_RANGE = (1, 4)
"""Pipeline depths a variant may ask for: 1 (load, wait, compute: no lookahead) .. 4."""

STAGES_TOKEN = "st"
"""Prefix of the stage field of a variant id (``.st1``, ``.st3``)."""
TACTIC_TOKEN = "t"
"""Prefix of the tactic field of a variant id (``.t4096``)."""
TACTIC_LIMIT = 1 << 16
"""The TACTIC constant's range (16 bits: ``kernels.device.tactics``)."""


class BackwardPass(enum.Enum):
    """A kernel of the backward (``kernels.device.fmha_bwd``): ``dkdv`` (a CTA owns a K/V tile and
    streams the Q, dO, LSE and Δ tiles) or ``dq`` (a CTA owns a Q tile and streams K/V, as the
    forward does). A variant with a pass is that kernel alone; its id ends in ``.dkdv``/``.dq``."""

    DKDV = "dkdv"
    DQ = "dq"


class Backend(enum.Enum):
    """The name of the kernel family a variant belongs to: the first field of its id and the
    ``backend`` column of every CSV (the values are committed data). The family itself, the code
    that builds and launches the variant, is a ``spec.family.KernelFamily``
    (``experiments.measurement.families.family(backend)``)."""

    CUTILE = "cutile"
    CUDA = "cuda"


@dataclass(frozen=True)
class Variant:
    backend: Backend
    order: ScanOrder
    schedule: CtaSchedule
    tiles: Tiles
    occupancy: int | None = None   # None: the family's default for the arch
    level: int | None = None       # cuTile tuning-ladder level 1..6; None: the full kernel (6)
    stages: int | None = None      # K/V pipeline depth (CUDA family); None: DEFAULT_STAGES
    bwd: BackwardPass | None = None   # a backward kernel (cuTile family); None: the forward
    tactic: int = 0                # the cuTile forward's TACTIC bits (kernels.device.tactics)

    def __post_init__(self) -> None:
        t = self.tactic
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < TACTIC_LIMIT:
            raise ValueError(f"tactic={t!r}: the TACTIC bits are an integer in "
                             f"0..{TACTIC_LIMIT - 1}")
        if t and (self.backend != Backend.CUTILE or self.bwd is not None
                  or self.order.kind != OrderKind.LINEAR):
            raise ValueError(f"tactic={t}: kernel tactics are bits of the cuTile forward's linear "
                             "scan only (the studies' other orders are built without them)")
        if self.bwd is not None:
            object.__setattr__(self, "bwd", BackwardPass(self.bwd))
            if self.backend != Backend.CUTILE:
                raise ValueError(f"bwd={self.bwd.value}: the backward passes are variants of "
                                 "the cuTile family only")
        s = self.stages
        if s is None:
            return
        lo, hi = STAGE_RANGE
        if not isinstance(s, int) or isinstance(s, bool) or not lo <= s <= hi:
            raise ValueError(f"stages={s!r}: the K/V pipeline depth must be an integer in "
                             f"{STAGE_RANGE[0]}..{STAGE_RANGE[1]}")
        if self.backend != Backend.CUDA:
            raise ValueError(f"stages={s}: the pipeline depth is a knob of the CUDA family only "
                             "(cuTile schedules its own loads); leave stages None")
        if s == DEFAULT_STAGES:   # one spelling of the default: equal variants, equal ids
            object.__setattr__(self, "stages", None)

    @property
    def pipeline_stages(self) -> int:
        """The K/V pipeline depth this variant builds (``DEFAULT_STAGES`` when unset)."""
        return DEFAULT_STAGES if self.stages is None else self.stages

    def id(self, problem: Problem) -> str:
        occ = "" if self.occupancy is None else f".occ{self.occupancy}"
        lvl = "" if self.level is None else f".L{self.level}"
        st = "" if self.stages is None else f".{STAGES_TOKEN}{self.stages}"
        tac = f".{TACTIC_TOKEN}{self.tactic}" if self.tactic else ""
        bwd = "" if self.bwd is None else f".{self.bwd.value}"
        return (f"{self.backend.value}.{self.order.label}.{self.schedule.label}."
                f"{self.tiles.label}d{problem.D}{occ}{lvl}{st}{tac}{bwd}")

    @classmethod
    def parse(cls, vid: str) -> tuple["Variant", int]:
        """The variant and head dimension D an id names: the inverse of ``id`` (the one parser of
        the grammar in the module docstring). Raises ValueError naming the field it cannot read;
        ``is_variant_id`` tells variant ids from the peers' names (``sdpa-flash``)."""
        fields = str(vid).split(".")
        if len(fields) < 4:
            raise ValueError(f"{vid!r} is not a variant id: expected "
                             f"backend.order.schedule.mMnNdD[.occN][.LN][.stN]")
        try:
            backend = Backend(fields[0])
        except ValueError:
            raise ValueError(f"{vid!r}: unknown backend {fields[0]!r}; known: "
                             f"{', '.join(b.value for b in Backend)}") from None
        order, schedule = ScanOrder.parse(fields[1]), CtaSchedule.parse(fields[2])
        m = _TILES.fullmatch(fields[3])
        if m is None:
            raise ValueError(f"{vid!r}: tile field {fields[3]!r} is not m<M>n<N>d<D>")
        opt: dict[str, int] = {}
        bwd = None
        if fields[-1] in {p.value for p in BackwardPass} and len(fields) > 4:
            bwd = BackwardPass(fields.pop())
        for f in fields[4:]:
            o = _OPTIONAL.fullmatch(f)
            if o is None or o["key"] in opt:
                raise ValueError(f"{vid!r}: unknown or repeated field {f!r}; optional fields "
                                 f"are occ<N>, L<N>, {STAGES_TOKEN}<N>, {TACTIC_TOKEN}<N>, in that "
                                 "order")
            opt[o["key"]] = int(o["n"])
        v = cls(backend, order, schedule, Tiles(int(m["m"]), int(m["n"])), opt.get("occ"),
                opt.get("L"), parse_stages(f"{STAGES_TOKEN}{opt['st']}") if "st" in opt else None,
                bwd, opt.get(TACTIC_TOKEN, 0))
        return v, int(m["d"])


_TILES = re.compile(r"m(?P<m>\d+)n(?P<n>\d+)d(?P<d>\d+)")
_OPTIONAL = re.compile(rf"(?P<key>occ|L|{STAGES_TOKEN}|{TACTIC_TOKEN})(?P<n>\d+)")


def is_variant_id(text: str) -> bool:
    """Whether ``text`` is a kernel variant id (not a peer such as ``sdpa-cudnn``)."""
    return str(text).split(".", 1)[0] in {b.value for b in Backend}


def parse_stages(token: str) -> int | None:
    """The stage count of an id field (``st1`` -> 1) or of a CSV / JSON value (``"1"``, ``""``);
    None for the default. Raises ValueError naming the accepted forms."""
    t = str(token).strip().lower()
    if t in ("", "none"):
        return None
    digits = t[len(STAGES_TOKEN):] if t.startswith(STAGES_TOKEN) else t
    if not digits.isdigit():
        raise ValueError(f"unknown stage field {token!r}; expected st<N> or <N> with N in "
                         f"{STAGE_RANGE[0]}..{STAGE_RANGE[1]}")
    n = int(digits)
    if not STAGE_RANGE[0] <= n <= STAGE_RANGE[1]:
        raise ValueError(f"stage count {n} is outside {STAGE_RANGE[0]}..{STAGE_RANGE[1]}")
    return None if n == DEFAULT_STAGES else n


@dataclass(frozen=True)
class Training:
    """The builds one training step runs, as a family's ``default_variant(..., training=True)``
    resolves them: ``forward``, the forward variant (its training build also stores the
    log-sum-exp), and ``backward``, the family's backward configuration (cuTile: a
    ``kernels.rules.backward_config.BackwardConfig``, both passes' tiles, hints, scan orders and
    schedules; CUDA: the backward's ``Tiles``)."""
    forward: Variant
    backward: Any

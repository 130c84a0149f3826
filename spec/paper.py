"""The paper's own builds and the GB10 problem they ran, tabled once.

The paper (arXiv 2601.16032) published four cuTile kernels (SchrodingerZhu/AttnFMHA): two
persistent ("FullyStatic": ``NUM_VSM`` CTAs walk the work items) and two tile-based (``TILE_X``
Q tiles per CTA), each in a linear and a sawtooth ("Alt") K/V scan, each built causal and not.
The paper-build toolchain (``kernels.paper_builds``) compiles them from a copy of that
repository, the data door (``analysis.data.steps``) reads their per-step SASS costs by these
names, and the GB10 sawtooth study (``experiments.registry.plans``) simulates the build each of
its cases stands for.
"""
from __future__ import annotations

from dataclasses import dataclass

PAPER_S, PAPER_B, PAPER_H, PAPER_D = 131072, 8, 1, 64
"""The paper's GB10 problem: B = 8, H = 1, S = 128K, D = 64, fp16."""
PAPER_TILE, PAPER_NUM_VSM, PAPER_TILE_X = 64, 48, 2
"""64x64 tiles; the persistent kernels' CTA count (``NUM_VSM``), the tile-based ones' Q tiles
per CTA (``TILE_X``): the arguments of their launch wrappers for the published counts."""
AUTHORS_TOOLCHAIN = "cuda-tile 1.0.x, tileiras 13.1.80"
"""The toolchain the paper's cuTile builds were most likely compiled with (the releases before the
authors' counts; 1.1.0 already rejects their sawtooth sources)."""
AUTHORS_CUDA_TILE = "1.0.1"
"""The cuda-tile release of ``AUTHORS_TOOLCHAIN`` whose cubins the GB10 study reads."""
AUTHORS_OCCUPANCY = 1
"""The occupancy the paper's builds compile to (FullyStatic linear ``occupancy=1``; the others no
hint, which gives the same cubin): one CTA per SM."""


@dataclass(frozen=True)
class PaperBuild:
    """One published kernel: its file's stem, its schedule (``static``: persistent, ``tile2``:
    tile-based with ``PAPER_TILE_X``) and its scan order (``linear`` / ``sawtooth``)."""

    stem: str
    schedule: str
    order: str

    def id(self, causal: bool) -> str:
        """The build's id in the builds-toolchains data: ``authors.<stem>.<causal|noncausal>``."""
        return f"authors.{self.stem}.{'causal' if causal else 'noncausal'}"


PAPER_BUILDS = (PaperBuild("AttentionFMHAFullyStatic", "static", "linear"),
                PaperBuild("AttentionFMHAFullyStaticAlt", "static", "sawtooth"),
                PaperBuild("AttentionFMHATile", "tile2", "linear"),
                PaperBuild("AttentionFMHATileAlt", "tile2", "sawtooth"))


def paper_build(schedule: str, order: str) -> PaperBuild:
    """The published build with this schedule (``static`` | ``tile2``) and scan order."""
    for b in PAPER_BUILDS:
        if (b.schedule, b.order) == (schedule, order):
            return b
    raise ValueError(f"no published build for schedule {schedule!r}, order {order!r}; the paper "
                     f"has {sorted((b.schedule, b.order) for b in PAPER_BUILDS)}")

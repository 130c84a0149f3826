"""The request-coalescer term of the sector-access model: L2 sectors = loads × (1 − merged share).

``analysis.models.traffic.sector_accesses`` counts what the kernel *loads* (Q and O once per Q tile,
K and V once per visited pair), and predicts the L1 sectors to under 1% on the H100. The L2 counts
fewer (REPORT.md §1-2: 0.35..0.58 of the loads with 132 CTAs): the L2 Request Coalescer merges
requests for the same sector that arrive close together before they reach the L2 (``lrc__``
counters, ``../shared/l2-ncu-notes.md`` §6). How many merge depends on how many CTAs read the same
tile within the window, i.e. on the wavefront and its drift, which is what the timed simulator
models: the merged share is ``merged_sectors / (tex_sectors + merged_sectors)`` of a timed run with
the window on, and the model's L2 sectors are the loads times one minus it.

The window is not fitted: ``DEFAULT_WINDOW`` = one hit step (a request merges with one for the
same half-tile that reached the L2 less than one step earlier, i.e. while that one can still be
outstanding at the coalescer). A stated assumption, checked by the L2 MAPE it gives.
"""
from __future__ import annotations

from dataclasses import replace

from analysis.cache.timesim import TimeParams, simulate_case
from analysis.models.traffic import sector_accesses
from spec.case import Case
from spec.problem import TileGrid

__all__ = ["DEFAULT_WINDOW", "merged_share", "merged_sector_accesses"]

DEFAULT_WINDOW = 1.0


def merged_share(case: Case, params: TimeParams, sector_bytes: int = 32) -> float:
    """Fraction of the loaded sectors the coalescer removes (timed simulation, window on)."""
    if params.merge_window <= 0:
        return 0.0
    c = simulate_case(case, params, sector_bytes)
    loaded = c.tex_sectors + c.merged_sectors
    return c.merged_sectors / loaded if loaded else 0.0


def merged_sector_accesses(case: Case, params: TimeParams, sector_bytes: int = 32,
                           window: float | None = None) -> float:
    """``sector_accesses`` with the merge term: the L2 sector requests of one case.

    ``params`` are the arch's timed-simulator parameters; ``window`` (hit steps, default
    ``params.merge_window`` or ``DEFAULT_WINDOW`` when that is 0) the coalescing window."""
    w = window if window is not None else (params.merge_window or DEFAULT_WINDOW)
    loads = sector_accesses(case.problem, TileGrid(case.problem, case.variant.tiles).tiles,
                            sector_bytes).total
    return loads * (1.0 - merged_share(case, replace(params, merge_window=w), sector_bytes))

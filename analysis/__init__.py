"""Pure analysis functions (CPU only: numpy, scipy, numba; no GPU imports).

``analysis.reuse``
    LRU stack (reuse) distances of a trace, their histograms and the exact miss-ratio curve of a
    fully associative LRU cache at every capacity.
``analysis.l2sim``
    The L2 simulator: ``simulate(trace, capacity)`` → ``L2Counts`` and tidy simulated rows.
``analysis.datasets``
    Which stored run a report section or figure reads (one rule), and the reader whose errors are
    one line (``DatasetError``).
``analysis.rows``
    Small helpers on tidy rows shared by the findings and the figures.
``analysis.findings``
    The findings report, one module per section (``python -m analysis.findings``).
``analysis.models``
    Exact and closed-form sector-access and cold-miss models, the wave model of non-compulsory
    misses and the least-squares fit of the effective capacity ``C_eff``.

The locality argument, in short. The CTAs running at the same time on one head walk its K/V
tiles together (a *wavefront*): one of them misses on a tile, the others hit. The next wavefront
of the same head reuses every tile; in the linear order each tile is reused after the whole
head's K/V (stack distance ``N − 1`` tiles), so once K+V exceed the cache every tile misses again.
The sawtooth order alternates the scan direction, tile ``j`` is reused at distance ``j`` or
``N − 1 − j``, and a cache of ``C`` tiles keeps ``C`` of the ``N`` tiles for the next wave.
"""
from .l2sim import L2Counts, capacity_note, counts_to_rows, simulate, simulate_capacities
from .models import (CEffFit, Shape, Traffic, cold_misses, cold_misses_closed_form, fit_c_eff,
                     fit_c_eff_rows, kv_sectors, mape, noncompulsory, paper_sector_accesses,
                     sector_accesses, sector_accesses_closed_form, wave_misses, wave_misses_paper)
from .reuse import (COLD, Histogram, MissRatioCurve, access_weights, distance_histogram,
                    exact_histogram, hits_at, miss_ratio_curve, stack_distances,
                    trace_stack_distances)

__all__ = [
    "COLD", "Histogram", "MissRatioCurve", "access_weights", "distance_histogram",
    "exact_histogram", "hits_at", "miss_ratio_curve", "stack_distances", "trace_stack_distances",
    "L2Counts", "capacity_note", "counts_to_rows", "simulate", "simulate_capacities",
    "CEffFit", "Shape", "Traffic", "cold_misses", "cold_misses_closed_form", "fit_c_eff",
    "fit_c_eff_rows", "kv_sectors", "mape", "noncompulsory", "paper_sector_accesses",
    "sector_accesses", "sector_accesses_closed_form", "wave_misses", "wave_misses_paper",
]

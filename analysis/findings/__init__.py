"""Every number the findings report (REPORT.md) cites, computed from stored runs only.

``python -m analysis.findings --arch h100 [--run DIR ...] [--out DIR] [--no-sim] [--cache DIR]``
prints one markdown table per section and, with ``--out DIR``, writes each table as
``<section>.csv`` and all of them as ``findings-<arch>.md`` into the new directory ``DIR/<arch>``.

Which runs are read: per study the one ``analysis.data.select`` picks (a committed,
measured run with default parameters, latest stamp, repeat 1; the rule is in that module's
docstring, and ``paper_figures`` uses the same one), or the run named with ``--run``. Every section
title names the run it read. Only section 5c (and the extra rows of section 0) read the repeats
``-r2``, ``-r3`` of the sawtooth run (P5 those of the hints run), each on its own, never pooled. The
for-loop spill artifact (``longseq-forloop-spill-20261121``) is never selected; section 9b reads it
by its explicit path.

One module per section, each a pure function of tidy rows (dicts from ``spec.records.read_csv``):

0. ``consistency``: ``hits + misses`` against the ``srcunit_tex`` sectors, per study.
1. ``l1``: L1 pass-through (l1l2 study; the cuTile kernels' L1 sectors from the sawtooth study).
2. ``traffic``: error of the exact sector-access model against three sector counters.
3. ``divergence``: misses over the cold-miss line, the wave model's ``C_eff`` fit, fabric shares.
4. ``active``: L2 hit rate against ``1 - 1/N`` per persistent CTA count.
5. ``sawtooth``: sawtooth vs linear per configuration (one run), the SDPA peers, and across
   repeated runs with the verdict rule of ``sawtooth.repeat_verdict``.
6. ``drift``: how far the persistent CTAs drift apart from lock-step, in steps and K/V bytes.
7. ``simulator``: the LRU simulator on the measured cases, one fitted capacity, per-case error
   (the slow one: ``--no-sim`` skips it).
8. ``longseq``: the best configuration at long S beside cuDNN and flash.
9. ``dram``: the DRAM bandwidth bound (9a, 9c) and the spill artifact (9b).
P. ``paper``: the published GB10 values beside the GB10 simulation and this GPU's measurement
   (P-P4); the hints study, the authors' occupancy against the study's (P5, P5b: its repeats,
   each read alone); what the published speedups ask of ``analysis.models.timemodel`` (P6).
B. ``backward``: the backward's sawtooth, each kernel alone (dK/dV's Q scan, dQ's K/V scan),
   predicted (committed before) and measured on the H100, beside the forward's pairs (B-B3).

``report`` puts them together (``compute``) and writes them (``markdown``, ``write_report``).
"""
import importlib

__all__ = ["compute", "markdown", "write_report"]


def __getattr__(name: str):
    """``compute``, ``markdown`` and ``write_report``, imported from ``report`` on first use:
    ``report`` brings every section and the models they fit (scipy, numba), which the command's
    ``--help`` and its refusals of bad input (``__main__``) do not need."""
    if name in __all__:
        value = getattr(importlib.import_module("analysis.findings.report"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Pure analysis functions on the study's rows and traces (CPU only: numpy, scipy, numba; no GPU
imports), in subpackages by job. Imports go down this list, never up
(``tests/cpu/repository/test_layering.py``):

``analysis.data``
    The one door to the committed data: the registry of runs under ``profiles/`` pinned by content
    hash, the readers of manifests and tidy CSVs, and the rule that picks the run a figure or a
    findings section reads (``python -m analysis.data``).
``analysis.models``
    Closed-form models: sector accesses, cold misses, the wave model of non-compulsory misses and
    the C_eff fit (``traffic``, ``wave``); where a miss costs time (``timemodel``).
``analysis.cache``
    The cache simulators: LRU stack distances and miss-ratio curves (``reuse``), the lock-step L2
    simulator (``l2sim``), the timed two-partition simulator (``timesim``), the measured SM map
    (``smmap``) and the request-coalescer term (``merge``).
``analysis.launch``
    Launch diagnostics of measured runs: CTA drift, where and when CTAs ran, whether a counter's
    spread belongs to the ncu session, and whether run B reproduces run A.
``analysis.calibration``
    The simulator's parameters per arch, fitted on one study and judged on the others
    (``python -m analysis.calibration fit|validate|sectors|scan``; ``analysis/params/<arch>.json``).
``analysis.findings``
    The findings report, one module per section (``python -m analysis.findings``).

The locality argument, in short. The CTAs running at the same time on one head walk its K/V
tiles together (a *wavefront*): one of them misses on a tile, the others hit. The next wavefront
of the same head reuses every tile; in the linear order each tile is reused after the whole
head's K/V (stack distance ``N − 1`` tiles), so once K+V exceed the cache every tile misses again.
The sawtooth order alternates the scan direction, tile ``j`` is reused at distance ``j`` or
``N − 1 − j``, and a cache of ``C`` tiles keeps ``C`` of the ``N`` tiles for the next wave.
"""

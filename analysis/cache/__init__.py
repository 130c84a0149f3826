"""The cache simulators: LRU stack distances (``reuse``), the lock-step L2 simulator (``l2sim``),
the timed two-partition simulator (``timesim``), the measured SM -> L2-partition map (``smmap``)
and the request-coalescer term of the sector model (``merge``)."""

"""Profiling: Nsight Compute metric sets and one-pass metric groups (``metrics``), the ncu runner
(``ncu``), repeated pass-aware collection (``collect``), report reading with NVIDIA's ``ncu_report``
or the CSV export (``report``, ``ingest``), and the tidy rows with repeat statistics and
consistency checks (``counters``); plus the curated, committed datasets under
``profiles/<arch>/``."""

"""Profiling: Nsight Compute metric sets, the ncu runner, the profiling target and the ingestion
of reports into the tidy schema; plus the curated, committed datasets under ``profiles/<arch>/``."""

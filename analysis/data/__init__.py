"""Stored data: the one door to ``profiles/`` (``registry``: what is registered and pinned by
content hash), the readers of manifests and tidy CSVs (``tables``) and the rule that picks the run
a figure or findings section reads (``select``). ``python -m analysis.data`` lists, checks and
registers runs and writes the catalogue ``profiles/README.md``."""
from analysis.data.registry import (
                                    DatasetError,
                                    Entry,
                                    content_hash,
                                    entry,
                                    find,
                                    instrument,
                                    open_path,
)
from analysis.data.select import (
                                    ANY,
                                    Dataset,
                                    candidates,
                                    dataset,
                                    default_runs,
                                    discover,
                                    repeated_runs,
                                    repeats_of,
                                    select,
)
from analysis.data.tables import (
                                    DATA_FILES,
                                    RUN_DIR,
                                    check_run_dir,
                                    csv_rows,
                                    load_rows,
                                    new_directory,
                                    output_problem,
                                    read_file,
                                    read_manifest,
                                    read_run,
                                    read_table,
                                    resolve,
                                    run_of,
                                    stored,
                                    timing_rows,
)

__all__ = ["DatasetError", "Entry", "content_hash", "entry", "find", "instrument", "open_path",
           "csv_rows", "ANY", "Dataset", "candidates", "dataset", "default_runs", "discover",
           "repeated_runs", "repeats_of", "select", "DATA_FILES", "RUN_DIR", "load_rows",
           "new_directory", "read_file", "read_manifest", "read_run", "read_table", "resolve",
           "run_of", "stored", "timing_rows", "check_run_dir", "output_problem"]

"""Section 7d: the timed simulator's validations, in sample and out of sample, as committed.

``python -m analysis.calibration validate`` fits nothing and writes ``summary.csv`` (relative RMS
error of the predicted misses per study and sample, over the cases whose launches agree within
15%) into ``profiles/cpu/simcheck-<arch>-<stamp>/``. Re-simulating them takes minutes per arch, so
this section reads the committed summaries, one row per (validation, study, sample), and names
each validation's standing: a holdout (``simcheck-<arch>-holdout-*``: measured after the model was
frozen) is the clean out-of-sample figure; the others were seen while the model was revised.
Every number is simulated against measured."""
from __future__ import annotations

from analysis.data import csv_rows, registry, stored


def simcheck_summaries(arch: str) -> list[dict]:
    """Rows of the ``summary.csv`` of every registered validation of ``arch``
    (``profiles/cpu/simcheck-<arch>-*``), oldest first, with the validation's name and standing; a
    validation's ``gpu-<uuid>/`` subdirectories (the same cases, one chip's runs: ``simcheck
    validate --device``) follow it as ``<validation>/gpu-<uuid>``."""
    vals = sorted(registry.find(role="validation", arch=arch, prefix=f"cpu/simcheck-{arch}-"),
                  key=lambda e: e.path)
    dirs = [sub for e in vals for sub in
            [(e.name, e.path), *((f"{e.name}/{d.name}", f"{e.path}/{d.name}")
                                 for d in registry.subdirs(e.path) if d.name.startswith("gpu-"))]]
    out = []
    for name, rel in dirs:
        path = stored(rel, "summary.csv")
        if path is None:
            continue
        standing = ("holdout, measured after the model was frozen" if "-holdout-" in name
                    else "measured before the model was frozen; its errors seen while revising")
        for r in csv_rows(path, typed=False):
            out.append({"validation": name, "standing": standing, "study": r["study"],
                        "sample": r["sample"], "cases": int(r["cases"]),
                        "stable": int(r["stable"]),
                        "rel_rms_pct": round(100 * float(r["rel_rms"]), 1),
                        "unstable": int(r["unstable"]),
                        "unstable_overlap": int(r["unstable_overlap"]),
                        "source": "simulated vs measured"})
    return out

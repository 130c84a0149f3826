"""Section 7d: the timed simulator's validations, in sample and out of sample, as committed.

``python -m analysis.simcheck validate`` fits nothing and writes ``summary.csv`` (relative RMS
error of the predicted misses per study and sample, over the cases whose launches agree within
15%) into ``profiles/cpu/simcheck-<arch>-<stamp>/``. Re-simulating them takes minutes per arch, so
this section reads the committed summaries, one row per (validation, study, sample), and names
each validation's standing: a holdout (``simcheck-<arch>-holdout-*``: measured after the model was
frozen) is the clean out-of-sample figure; the others were seen while the model was revised.
Every number is simulated against measured."""
from __future__ import annotations

from pathlib import Path

from spec.records import data_path, read_dicts


def simcheck_summaries(root: Path, arch: str) -> list[dict]:
    """Rows of every ``profiles/cpu/simcheck-<arch>-*/summary.csv`` under ``root``, oldest first,
    with the validation's name and standing; a validation's ``gpu-<uuid>/`` subdirectories (the
    same cases, one chip's runs: ``simcheck validate --device``) follow it as
    ``<validation>/gpu-<uuid>``."""
    cpu = Path(root) / "profiles" / "cpu"
    dirs = [sub for d in sorted(cpu.glob(f"simcheck-{arch}-*"))
            for sub in [d, *sorted(d.glob("gpu-*"))]]
    out = []
    for d in dirs:
        path = data_path(d, "summary.csv")          # committed gzipped since 2026-11-25
        if path is None:
            continue
        name = d.relative_to(cpu).as_posix()
        standing = ("holdout, measured after the model was frozen" if "-holdout-" in name
                    else "measured before the model was frozen; its errors seen while revising")
        for r in read_dicts(path):
            out.append({"validation": name, "standing": standing, "study": r["study"],
                        "sample": r["sample"], "cases": int(r["cases"]),
                        "stable": int(r["stable"]),
                        "rel_rms_pct": round(100 * float(r["rel_rms"]), 1),
                        "unstable": int(r["unstable"]),
                        "unstable_overlap": int(r["unstable_overlap"]),
                        "source": "simulated vs measured"})
    return out

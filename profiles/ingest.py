"""Nsight Compute exports → tidy rows, by metric *name* (never by column position).

``parse_raw_csv`` reads ``ncu --import R --csv --page raw --print-units base``: a header row of
column names, a row of units, then one row per profiled kernel in launch order. ``to_rows`` pairs
the kernels with the cases the profiling target launched (one kernel per case, each inside an NVTX
range named by the case id, in the order of the target's plan) and checks the pairing by count and
kernel name.
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass

from spec.records import UNITS, Row, Source, case_fields



@dataclass(frozen=True)
class KernelResult:
    index: int
    kernel: str
    values: dict[str, tuple[float, str]]      # metric -> (value, unit)


class IngestError(ValueError):
    pass


def _number(text: str, column: str) -> float:
    t = text.strip().replace(",", "")
    if t in ("", "n/a", "N/A"):
        return math.nan
    try:
        return float(t)
    except ValueError:
        raise IngestError(f"ncu column {column!r} holds {text!r}, not a number") from None


def parse_raw_csv(text: str, metrics: tuple[str, ...]) -> list[KernelResult]:
    """Kernels of a raw-page export with the values of ``metrics`` (other columns, such as
    launch and device attributes, are not read)."""
    rows = list(csv.reader(io.StringIO(text)))
    start = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
    if start is None or len(rows) < start + 2:
        raise IngestError("not an ncu raw-page CSV export (no header row starting with 'ID')")
    header, units = rows[start], rows[start + 1]
    col = {name: i for i, name in enumerate(header)}
    if "Kernel Name" not in col:
        raise IngestError("ncu CSV has no 'Kernel Name' column")
    missing = [m for m in metrics if m not in col]
    if missing:
        raise IngestError(f"ncu export lacks metric column(s) {', '.join(missing)}: was the "
                          "report collected with this metric set?")
    out = []
    for r in rows[start + 2:]:
        if not r or len(r) != len(header):
            continue
        values = {m: (_number(r[col[m]], m), units[col[m]]) for m in metrics}
        out.append(KernelResult(int(r[col["ID"]]), r[col["Kernel Name"]], values))
    return out


def to_rows(kernels: list[KernelResult], cases: list, *, run: str, study: str, arch: str,
            kernel_substrings: list[str] | None = None) -> list[Row]:
    """One Row per (case, metric), ``source=measured``. ``cases`` are the target's plan, in order;
    ``kernel_substrings`` (optional, per case) must appear in the profiled kernel's name."""
    if len(kernels) != len(cases):
        names = ", ".join(sorted({k.kernel for k in kernels}))
        raise IngestError(f"ncu profiled {len(kernels)} kernels for {len(cases)} cases "
                          f"(kernels: {names}); each case must launch exactly one kernel inside "
                          "its NVTX range")
    rows = []
    for i, (k, case) in enumerate(zip(kernels, cases)):
        want = kernel_substrings[i] if kernel_substrings else None
        if want and want not in k.kernel:
            raise IngestError(f"case {case.id}: profiled kernel {k.kernel!r} is not {want!r}")
        fields = case_fields(case.problem, case.variant)
        for metric, (value, unit) in k.values.items():
            rows.append(Row(run=run, study=study, arch=arch, metric=metric, value=value,
                            unit=UNITS.get(metric, unit), source=Source.MEASURED.value,
                            note=f"kernel={k.kernel}", **fields))
    return rows

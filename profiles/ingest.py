"""Nsight Compute exports → tidy rows, by metric *name* (never by column position).

``parse_raw_csv`` reads ``ncu --import R --csv --page raw --print-units base``: a header row of
column names, a row of units, then one row per profiled kernel in launch order. With ``--nvtx``
the export has a ``thread Domain:Push/Pop_Range:...`` column holding each kernel's NVTX range
stack, e.g.::

    521  "<default domain>:cuda.linear.static132.m80n80d64 b1h1s16384d64.fp16.full:none:..."

``to_rows`` pairs kernels with cases by that range name (the case id), so a stray or missing
launch is an error rather than a silent shift of every later row.
"""
from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass

from spec.records import UNITS, Row, Source, case_fields

NVTX_COLUMN_PREFIX = "thread Domain:Push/Pop_Range"


@dataclass(frozen=True)
class KernelResult:
    index: int
    kernel: str
    nvtx_range: str | None                    # innermost push/pop range, None outside any
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


def innermost_range(cell: str) -> str | None:
    """The innermost push/pop range name of an NVTX cell (``<domain>:<range>:...`` per range)."""
    quoted = re.findall(r'"([^"]*)"', cell)
    if not quoted:
        return None
    parts = quoted[-1].split(":")
    return parts[1] if len(parts) > 1 else None


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
    nvtx = next((i for i, name in enumerate(header) if name.startswith(NVTX_COLUMN_PREFIX)), None)
    out = []
    for r in rows[start + 2:]:
        if not r or len(r) != len(header):
            continue
        values = {m: (_number(r[col[m]], m), units[col[m]]) for m in metrics}
        rng = innermost_range(r[nvtx]) if nvtx is not None else None
        out.append(KernelResult(int(r[col["ID"]]), r[col["Kernel Name"]], rng, values))
    return out


def to_rows(kernels: list[KernelResult], cases: list, *, run: str, study: str,
            arch: str) -> list[Row]:
    """One Row per (case, metric), ``source=measured``, pairing kernels and cases by NVTX range."""
    by_id = {c.id: c for c in cases}
    seen: dict[str, KernelResult] = {}
    for k in kernels:
        if k.nvtx_range is None:
            raise IngestError(f"kernel {k.index} ({k.kernel[:60]}) has no NVTX range: profile "
                              "with --nvtx and launch every case inside a range named by its id")
        if k.nvtx_range not in by_id:
            raise IngestError(f"kernel {k.index} ran in NVTX range {k.nvtx_range!r}, which is "
                              "not a case of this plan")
        if k.nvtx_range in seen:
            raise IngestError(f"case {k.nvtx_range!r} launched more than one kernel; each case "
                              "must launch exactly one")
        seen[k.nvtx_range] = k
    missing = [c.id for c in cases if c.id not in seen]
    if missing:
        raise IngestError(f"no profiled kernel for {len(missing)} case(s): {', '.join(missing)}")
    rows = []
    for case in cases:
        k = seen[case.id]
        fields = case_fields(case.problem, case.variant)
        for metric, (value, unit) in k.values.items():
            rows.append(Row(run=run, study=study, arch=arch, metric=metric, value=value,
                            unit=UNITS.get(metric, unit), source=Source.MEASURED.value,
                            note=f"kernel={k.kernel[:60]}", **fields))
    return rows

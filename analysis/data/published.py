"""The paper's published GB10 numbers (arXiv 2601.16032) as the study's reference dataset.

``profiles/gb10/paper-2601.16032/published.csv.xz`` holds, per case of the paper's main study
(cuTile Static and Tile-based at B=8, CUDA 80x80 at B=1..8, linear and sawtooth, causal or not,
S=128K, D=64), the published L2 misses and TFLOPS with their provenance. It is registered like every
committed run (role ``reference``) and read only here. These values judge the models; nothing is
fitted to them.

A published case is matched to the framework's rows by what both name the same way: the family,
the *kind* of CTA schedule (``static``: persistent CTAs; ``tile``: two Q tiles per CTA), causal, the
batch and the order. The GB10 study runs the paper's builds with its parameters; the H100 and
H200 studies run the same builds at the scaled length and CTA count
(``experiments.registry.studies``).
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from typing import Iterable

from analysis.data.registry import DatasetError
from analysis.data.tables import read_file, resolve
from spec.records import Metric

PAPER = "profiles/gb10/paper-2601.16032"
FILE = "published.csv"
COLUMNS = ("family", "schedule", "causal", "batch", "seq", "head_dim", "tile", "order",
           "l2_misses", "tflops", "provenance")
SCHEDULES = {"cutile": {"static": "static", "tile": "tile"}, "cuda": {"static48": "static"}}
"""The paper's schedule names per family, and the kind each one is."""
ORDERS = ("linear", "sawtooth")
LABELS = {("cutile", "static"): "cuTile Static", ("cutile", "tile"): "cuTile Tile-based",
          ("cuda", "static"): "CUDA"}


@dataclass(frozen=True)
class PaperCase:
    """One published case: its key, its numbers and where they come from."""

    backend: str
    kind: str
    causal: bool
    B: int
    order: str
    S: int
    D: int
    tile: int
    misses: float
    tflops: float
    provenance: str
    line: int

    @property
    def key(self) -> tuple:
        return (self.backend, self.kind, self.causal, self.B, self.order)

    @property
    def config(self) -> tuple:
        """The key without the order: what a linear/sawtooth pair shares."""
        return self.key[:4]

    @property
    def label(self) -> str:
        b = f" B={self.B}" if self.backend == "cuda" else ""
        return f"{LABELS[(self.backend, self.kind)]}{b} {'causal' if self.causal else 'non-causal'}"


def schedule_kind(label: str) -> str:
    """The kind of a schedule label of our ids: ``static132`` -> static, ``tile2`` -> tile."""
    for kind in ("static", "tile"):
        if label.startswith(kind) and label[len(kind):].isdigit():
            return kind
    return label


def key_of_row(r: dict) -> tuple:
    """The published-case key of one of the study's rows."""
    return (r["backend"], schedule_kind(r["schedule"]), bool(r["causal"]), int(r["B"]), r["order"])


def _number(text: str, where: str, col: str, integer: bool = False) -> float:
    try:
        v = int(text) if integer else float(text)
    except (TypeError, ValueError):
        raise DatasetError(f"{where}: {col} {text!r} is not a number; restore the file with "
                           f"`git checkout -- {PAPER}`") from None
    if not math.isfinite(v) or v <= 0 and col != "causal":
        raise DatasetError(f"{where}: {col} {text!r} must be a positive finite number; restore "
                           f"the file with `git checkout -- {PAPER}`")
    return v


def read_published(run_dir: str = PAPER) -> list[PaperCase]:
    """Every published case, validated: a missing or non-numeric value, an unknown family,
    schedule or order, or a case listed twice is a ``DatasetError`` naming the row."""
    path = resolve(f"{run_dir}/{FILE}")
    where0 = f"{run_dir}/{FILE}"
    text = read_file(path).decode("utf-8", errors="replace")
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or tuple(rows[0]) != COLUMNS:
        raise DatasetError(f"{where0}:1: header is not {','.join(COLUMNS)}; restore the file "
                           f"with `git checkout -- {PAPER}`")
    out, seen = [], {}
    for n, fields in enumerate(rows[1:], 2):
        where = f"{where0}:{n}"
        if len(fields) != len(COLUMNS) or any(f.strip() == "" for f in fields[:-1]):
            raise DatasetError(f"{where}: a value is missing ({len(fields)} fields); restore the "
                               f"file with `git checkout -- {PAPER}`")
        r = dict(zip(COLUMNS, fields))
        kinds = SCHEDULES.get(r["family"])
        if kinds is None or r["schedule"] not in kinds or r["order"] not in ORDERS \
                or r["causal"] not in ("0", "1"):
            raise DatasetError(f"{where}: ({r['family']}, {r['schedule']}, causal={r['causal']}, "
                               f"{r['order']}) is not a case of the sawtooth study (families "
                               f"{sorted(SCHEDULES)}, orders {list(ORDERS)}, causal 0/1)")
        c = PaperCase(r["family"], kinds[r["schedule"]], r["causal"] == "1",
                      int(_number(r["batch"], where, "batch", True)), r["order"],
                      int(_number(r["seq"], where, "seq", True)),
                      int(_number(r["head_dim"], where, "head_dim", True)),
                      int(_number(r["tile"], where, "tile", True)),
                      _number(r["l2_misses"], where, "l2_misses"),
                      _number(r["tflops"], where, "tflops"), r["provenance"], n)
        if c.key in seen:
            raise DatasetError(f"{where}: the case of line {seen[c.key]} again")
        seen[c.key] = n
        out.append(c)
    return out


def check_against(cases: Iterable[PaperCase], rows: Iterable[dict], what: str) -> None:
    """Every published case has rows in ``rows`` (the study's, e.g. the simulated GB10 run), else
    a ``DatasetError`` naming the first case it lacks."""
    have = {key_of_row(r) for r in rows if r.get("metric") == Metric.L2_TEX_MISSES}
    for c in cases:
        if c.key not in have:
            raise DatasetError(f"{PAPER}/{FILE}:{c.line}: {c.label} {c.order} is not a case of "
                               f"{what}; the reference names a case the study does not have")

"""The tidy result schema shared by measured (ncu, CUDA events) and simulated rows.

One row per (run, variant, case, metric): analysis and figures treat measured and simulated data
alike and tell them apart by ``source`` alone. Metric names are Nsight Compute's where a counter
exists (paper.md), so a simulated ``lts__t_sectors_srcunit_tex_lookup_miss.sum`` sits on the same
axis as the measured one.
"""
from __future__ import annotations

import csv
import enum
import gzip
import io
import itertools
import lzma
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Iterable, Sequence

from .problem import Problem, Tiles
from .variant import Variant

SCHEMA_VERSION = 3
"""2: adds ``x``, the abscissa of curve metrics (schema-1 files read with ``x = None``).
3: adds ``group``, ``stat``, ``lo``, ``hi`` and ``flags`` for repeated, pass-aware ncu counters
(older files read with ``group = stat = flags = ""`` and ``lo = hi = None``)."""


class Source(enum.Enum):
    MEASURED = "measured"
    SIMULATED = "simulated"
    MODEL = "model"


class Metric:
    """Metric names (ncu's where one exists). Curve metrics carry their abscissa in ``Row.x``."""

    L2_SECTORS = "lts__t_sectors.sum"
    L2_TEX_SECTORS = "lts__t_sectors_srcunit_tex.sum"
    L2_TEX_HITS = "lts__t_sectors_srcunit_tex_lookup_hit.sum"
    L2_TEX_MISSES = "lts__t_sectors_srcunit_tex_lookup_miss.sum"
    L2_HIT_RATE = "lts__t_sector_hit_rate.pct"
    L1_SECTORS = "l1tex__t_sectors.sum"
    L1_HITS = "l1tex__t_sectors_lookup_hit.sum"
    DRAM_READ_BYTES = "dram__bytes_read.sum"
    L2_TEX_READ_SECTORS = "lts__t_sectors_srcunit_tex_op_read.sum"
    L2_TEX_READ_HITS = "lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum"
    L2_TEX_READ_MISSES = "lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum"
    # Hopper's L2 is two partitions: a tex lookup miss in the SM's local partition is forwarded
    # over the L2 fabric to the line's home partition, where it is looked up again and counted
    # under srcunit_ltcfabric. So L2_TEX_MISSES are *local tex misses*, not DRAM fills.
    L2_FABRIC_SECTORS = "lts__t_sectors_srcunit_ltcfabric.sum"
    L2_FABRIC_HITS = "lts__t_sectors_srcunit_ltcfabric_lookup_hit.sum"
    L2_FABRIC_MISSES = "lts__t_sectors_srcunit_ltcfabric_lookup_miss.sum"
    # simulated only (analysis.cache.timesim): what the hardware counts no other way
    MERGED_SECTORS = "lrc_merged_sectors"          # requests the coalescer removed
    INFLIGHT_SECTORS = "inflight_merged_sectors"   # hits that waited on a fill in flight
    MAKESPAN_STEPS = "makespan_steps"              # kernel length in hit-step units
    # L2 Request Coalescer: read sectors L1 received from the crossbar vs sectors the LRC sent
    # to the crossbar after coalescing (why L2 tex sectors fall below L1 read sectors)
    L1_XBAR_READ_SECTORS = "l1tex__m_xbar2l1tex_read_sectors.sum"
    LRC_READ_SECTORS = "lrc__lrc2xbar_sectors_op_read.sum"
    LRC_COALESCED_HW_SECTORS = "lrc__lrc2xbar_sectors_op_read_coalescing_achieved_type_hardware.sum"
    LRC_COALESCED_PROG_SECTORS = (
        "lrc__lrc2xbar_sectors_op_read_coalescing_achieved_type_programmatic.sum")
    LRC_UNCOALESCED_SECTORS = "lrc__lrc2xbar_sectors_op_read_coalescing_none.sum"
    REPLAY_PASSES = "profiler__replayer_passes"
    CTAS_PER_SM = "ctas_per_sm"     # the driver's occupancy of the loaded build (a resource row)
    # derived from measured counters: the two meanings of "a miss" on a partitioned L2
    DRAM_FILL_SECTORS = "dram_fill_sectors"                    # dram__bytes_read.sum / sector
    DRAM_FILL_ESTIMATE_SECTORS = "dram_fill_estimate_sectors"  # tex misses - fabric hits
    # consistency checks (ratios that must be 1, or are reported beside one that must)
    CHECK_TEX_LOOKUPS = "check_tex_lookups"            # (tex hits + misses) / tex sectors
    CHECK_FABRIC_LOOKUPS = "check_fabric_lookups"      # (fabric hits + misses) / fabric sectors
    CHECK_DRAM_PER_TEX_MISS = "check_dram_per_tex_miss"  # DRAM fills / local tex misses
    CHECK_DRAM_PER_ESTIMATE = "check_dram_per_estimate"  # DRAM fills / fabric-aware estimate
    # derived (not ncu counters)
    COLD_MISSES = "cold_misses"
    NONCOMPULSORY_MISSES = "noncompulsory_misses"
    KERNEL_TIME_MS = "kernel_time_ms"
    HOST_LAUNCH_MS = "host_launch_ms"      # host wall time of one launch call (median)
    EAGER_CALL_MS = "eager_call_ms"        # one eager call, host included (CUDA events, warm L2)
    TFLOPS = "tflops"
    DRAM_SECONDS_OF_MISSES = "dram_seconds_of_misses"   # misses' bytes / the DRAM bandwidth
    GRAD_REL_DIFF = "grad_rel_diff_vs_flash"   # max|ours - SDPA flash| / max|flash| (gradients)
    MAX_ABS_ERR = "max_abs_err"
    # curves (x = capacity in bytes / lower edge of a log2 distance bin in bytes)
    LRU_MISSES = "lru_misses"
    REUSE_DISTANCE_SECTORS = "reuse_distance_sectors"
    # CTA drift (trace build timestamps; x = step index)
    CTA_START_SPREAD_NS = "cta_start_spread_ns"
    STEP_NS = "median_step_ns"
    STEP_NS_BY_GAP = "step_ns_by_gap"   # mean step duration; x = steps behind the leading CTA
    # the co-running DRAM streamer (misscost study; x = the streamer's threads per CTA)
    STREAMER_GBPS = "streamer_dram_gbps"
    ATTENTION_SMS = "attention_sms"
    STREAMER_SMS = "streamer_sms"
    SHARED_SMS = "shared_sms"


UNITS = {
    Metric.STREAMER_GBPS: "GB/s", Metric.ATTENTION_SMS: "SM", Metric.STREAMER_SMS: "SM",
    Metric.SHARED_SMS: "SM",
    Metric.L2_SECTORS: "sector", Metric.L2_TEX_SECTORS: "sector", Metric.L2_TEX_HITS: "sector",
    Metric.L2_TEX_MISSES: "sector", Metric.L2_HIT_RATE: "%", Metric.L1_SECTORS: "sector",
    Metric.L1_HITS: "sector", Metric.DRAM_READ_BYTES: "byte", Metric.COLD_MISSES: "sector",
    Metric.NONCOMPULSORY_MISSES: "sector", Metric.KERNEL_TIME_MS: "ms",
    Metric.HOST_LAUNCH_MS: "ms", Metric.DRAM_SECONDS_OF_MISSES: "s",
    Metric.GRAD_REL_DIFF: "", Metric.EAGER_CALL_MS: "ms", Metric.TFLOPS: "TFLOP/s",
    Metric.MAX_ABS_ERR: "", Metric.LRU_MISSES: "sector", Metric.REUSE_DISTANCE_SECTORS: "sector",
    Metric.CTA_START_SPREAD_NS: "ns", Metric.STEP_NS: "ns", Metric.STEP_NS_BY_GAP: "ns",
    Metric.L2_TEX_READ_SECTORS: "sector", Metric.L2_TEX_READ_HITS: "sector",
    Metric.L2_TEX_READ_MISSES: "sector", Metric.L2_FABRIC_SECTORS: "sector",
    Metric.L2_FABRIC_HITS: "sector", Metric.L2_FABRIC_MISSES: "sector",
    Metric.MERGED_SECTORS: "sector", Metric.INFLIGHT_SECTORS: "sector",
    Metric.MAKESPAN_STEPS: "step",
    Metric.L1_XBAR_READ_SECTORS: "sector", Metric.LRC_READ_SECTORS: "sector",
    Metric.LRC_COALESCED_HW_SECTORS: "sector", Metric.LRC_COALESCED_PROG_SECTORS: "sector",
    Metric.LRC_UNCOALESCED_SECTORS: "sector",
    Metric.REPLAY_PASSES: "pass", Metric.CTAS_PER_SM: "CTA", Metric.DRAM_FILL_SECTORS: "sector",
    Metric.DRAM_FILL_ESTIMATE_SECTORS: "sector", Metric.CHECK_TEX_LOOKUPS: "ratio",
    Metric.CHECK_FABRIC_LOOKUPS: "ratio", Metric.CHECK_DRAM_PER_TEX_MISS: "ratio",
    Metric.CHECK_DRAM_PER_ESTIMATE: "ratio",
}


@dataclass(frozen=True)
class Row:
    run: str
    study: str
    arch: str
    variant: str
    backend: str
    order: str
    schedule: str
    tile_m: int
    tile_n: int
    occupancy: int | None
    B: int
    H: int
    H_kv: int
    S_q: int
    S_kv: int
    D: int
    dtype: str
    causal: bool
    metric: str
    value: float
    unit: str
    source: str
    sample: int = 0          # repetition index (timing samples, repeated ncu sessions)
    note: str = ""           # e.g. "LRU capacity=24.00MiB (nominal L2)" for simulated rows
    x: float | None = None   # abscissa of a curve metric (e.g. cache capacity in bytes)
    group: str = ""          # ncu metric group (one replay pass by intent) the value came from
    stat: str = ""           # "" = one observation; "median" = summary over repeats (lo..hi)
    lo: float | None = None  # min over repeats of a summary row
    hi: float | None = None  # max over repeats of a summary row
    flags: str = ""          # ';'-joined: failed, multipass=N, inconsistent=<check>, ...


COLUMNS = tuple(f.name for f in fields(Row))
PROBLEM_COLUMNS = ("B", "H", "H_kv", "S_q", "S_kv", "D", "dtype", "causal")
"""The columns that name a row's problem (``case_fields`` without the variant)."""

CASE_COLUMNS = ("variant", "backend", "order", "schedule", "tile_m", "tile_n", *PROBLEM_COLUMNS)
"""The columns that name a case, one variant on one problem: the one case key of every reader
(``case_key``). The variant id alone fixes the build; the build's fields are kept beside it so
that a key reads back as a labelled case. ``dtype`` is part of it: an fp16 and a bf16 run of one
shape are two cases."""


def case_key(row) -> tuple:
    """The case a row (dict or ``Row``) belongs to, as a tuple of ``CASE_COLUMNS``."""
    get = row.__getitem__ if isinstance(row, dict) else lambda k: getattr(row, k)
    return tuple(get(k) for k in CASE_COLUMNS)


def case_fields(problem: Problem, variant: Variant | None = None,
                tiles: Tiles | None = None) -> dict:
    """The case columns of a row (problem shape, and the variant's ids when there is one)."""
    d = dict(B=problem.B, H=problem.H, H_kv=problem.H_kv, S_q=problem.S_q, S_kv=problem.S_kv,
             D=problem.D, dtype=problem.dtype.value, causal=problem.causal)
    if variant is not None:
        tiles = variant.tiles
        d.update(variant=variant.id(problem), backend=variant.backend.value,
                 order=variant.order.label, schedule=variant.schedule.label,
                 occupancy=variant.occupancy)
    if tiles is not None:
        d.update(tile_m=tiles.m, tile_n=tiles.n)
    return d


def simulated_rows(values: dict[str, float], case: dict, *, run: str, study: str, arch: str,
                   note: str) -> list[Row]:
    """One ``source=simulated`` row per metric of ``values`` (in its unit, ``UNITS``) for the
    case whose columns are ``case`` (``case_fields``); ``note`` names the simulator and every
    parameter it ran with."""
    return [Row(run=run, study=study, arch=arch, metric=m, value=float(v), unit=UNITS[m],
                source=Source.SIMULATED.value, note=note, **case)
            for m, v in values.items()]


def write_csv(path: Path, rows: Iterable[Row]) -> int:
    """Write rows as CSV with the schema's columns; returns the number written."""
    return write_dicts(path, (asdict(r) for r in rows), COLUMNS)


def write_dicts(path: Path, rows: Iterable[dict], columns: Sequence[str] | None = None) -> int:
    """Write dicts as CSV (``read_dicts`` reads them back), compressed by the path's suffix
    (``COMPRESSED``); the columns are ``columns``, else the first row's keys. Returns the number
    of rows written (none: the file holds no header either)."""
    it = iter(rows)
    first = next(it, None)
    if columns is None and first is None:
        return 0
    opener = COMPRESSED.get(Path(path).suffix, open)
    n = 0
    with opener(path, "wt", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns if columns is not None else first))
        w.writeheader()
        for r in (() if first is None else itertools.chain((first,), it)):
            w.writerow(r)
            n += 1
    return n


COMPRESSED = {".xz": lzma.open, ".gz": gzip.open}
"""The ways a stored file may be compressed, by the suffix appended to its name: committed
machine-read files (tables, manifests, logs) are stored ``.xz`` by ``python -m analysis.data
compact`` (LZMA finds the long repeats of a tidy CSV's rows that DEFLATE's 32 KiB window misses,
about 28% smaller on the committed tables); ``.gz`` is what several writers emit."""


def plain_name(name: str) -> str:
    """``name`` without its compression suffix (``timing.csv.xz`` -> ``timing.csv``)."""
    for suffix in COMPRESSED:
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def data_path(directory: Path, name: str) -> Path | None:
    """``directory/name`` as stored: the file itself, else its compressed copy ``name.xz`` or
    ``name.gz`` (``COMPRESSED``); None when none exists. ``name`` may carry a compression suffix of
    its own (a path cited before the file was recompressed): its plain name is looked up."""
    base = plain_name(name)
    for candidate in dict.fromkeys((name, base, *(base + s for s in COMPRESSED))):
        p = Path(directory) / candidate
        if p.exists():
            return p
    return None


def open_text(path: Path | str):
    """A text stream over a stored file, decompressed by its suffix (``COMPRESSED``)."""
    opener = COMPRESSED.get(Path(path).suffix, open)
    return opener(path, "rt", newline="")


def read_bytes(path: Path | str) -> bytes:
    """The content of a stored file, decompressed by its suffix (``COMPRESSED``)."""
    opener = COMPRESSED.get(Path(path).suffix)
    if opener is None:
        return Path(path).read_bytes()
    with opener(path, "rb") as f:
        return f.read()


class TruncatedCSV(ValueError):
    """A CSV file that ends inside a quoted field: it was cut short (an interrupted copy, a full
    disk). Its last "row" would swallow the rest of the file, so it is refused."""


def read_dicts(path: Path) -> list[dict]:
    """Every row of any CSV file as a dict of strings; a compressed path (``.xz``, ``.gz``) is
    decompressed (``open_text``). A file cut inside a quoted field is
    a ``TruncatedCSV``: a well-formed CSV has an even number of quote characters (a quoted field
    opens and closes, a quote inside it is doubled), so an odd count means the file ends inside
    one; the csv module itself would return the broken field as if the file were whole."""
    with open_text(path) as f:
        text = f.read()
    if text.count('"') % 2:
        line = text[:text.rfind('"')].count("\n") + 1
        raise TruncatedCSV(f"{path}: ends inside the quoted field opened on line {line}: the "
                           "file was cut short; restore or re-write it")
    return list(csv.DictReader(io.StringIO(text, newline="")))


def read_csv(path: Path) -> list[dict]:
    """Result rows (this schema) as dicts with numeric columns converted (value float, sizes
    int, causal bool); a compressed path is decompressed (``open_text``)."""
    ints = {"tile_m", "tile_n", "B", "H", "H_kv", "S_q", "S_kv", "D", "sample"}
    out = []
    for r in read_dicts(path):
        for k in ints:
            r[k] = int(r[k])
        r["occupancy"] = int(r["occupancy"]) if r["occupancy"] else None
        r["value"] = float(r["value"])
        r["causal"] = r["causal"] in ("True", "true", "1")
        for k in ("x", "lo", "hi"):
            r[k] = float(r[k]) if r.get(k) not in (None, "") else None
        for k in ("group", "stat", "flags"):
            r[k] = r.get(k) or ""
        out.append(r)
    return out

"""Split-K/V decode: the vocabulary both kernel families share (CPU only, no torch).

A decode call is a few query rows per head (S_q ≤ ``DECODE_MAX_ROWS``) over a long K/V cache.
Its kernels (``kernels.device.decode``, ``cuda_baseline/device/decode.cuh``) split the cache's
K/V tiles over ``splits`` CTAs per K/V head and merge the partial results through their
log-sum-exp. Here, once:

* ``DecodeSchedule``: the ``schedule=`` labels that ask for it: "decode" (the work model's
  number of splits) and "decode<N>" (N splits); ``DecodeSchedule.parse`` answers None for any
  other label, which names a split-Q CTA schedule (``spec.schedules.CtaSchedule``).
* ``packing``: how many query heads of a GQA group (× their padded rows) one CTA packs as the
  M rows of its tile, so each K/V tile it loads serves the whole pack.
* ``chunk_of`` / ``split_tiles``: which K/V tiles split s scans (a contiguous chunk).
* ``choose_splits``: the work model choosing the number of splits (no shape table).
* ``DecodePlan``: a launch's plan (tile, packing, splits), subclassed by each family's host side.

The work model. Decode reads each K/V byte once, so its time is the cache's bytes over the
bandwidth the launch draws, plus what each CTA pays besides streaming (issuing its first loads,
the softmax epilogue, writing its partial result) and the merge. With ``units`` CTAs per split
(B·H_kv·head chunks), ``slots`` CTAs resident at once (SMs × CTAs per SM) and ``n`` K/V tiles of
``tile_bytes`` each (K and V), ``s`` splits run ``waves(s) = ⌈units·s / slots⌉`` waves of CTAs
that each stream ``⌈n / s⌉`` tiles; a slot streams at 1/slots of the GPU's bandwidth, so in bytes
at one slot's bandwidth::

    T(s) = waves(s) · (⌈n/s⌉ · tile_bytes + F)                 the split kernel
         + [s > 1] · (2 · s · B·H·S_q·D·4 / slots + C)          the merge: fp32 partials written
                                                               and read back, one more launch

and ``choose_splits`` takes the s of least T (the fewest splits on a tie) with
``1 ≤ s ≤ max(1, n // MIN_TILES_PER_SPLIT)``: never more splits than tiles, and each split keeps
at least a few tiles to amortise F. F (``FIXED_TILES`` K/V tiles' worth) and C
(``MERGE_LAUNCH_BYTES``) are estimates (about 1 µs of a slot's ≈ 35 GB/s share of an H200's
≈ 4.8 TB/s; a launch ≈ 3 µs), to be fitted on the GPU, not measured values.
Worked example (H200: 132 slots; B = 1, H = 32, H_kv = 8, S_q = 1, S_kv = 32K, D = 128, tiles of
128 keys: n = 256, 64 KB each): one split is 8 CTAs on 132 slots, T = 256 tiles; 16 splits fill
one wave of 128 CTAs with 16 tiles each, T ≈ 16 + F + a small merge; 33 splits (264 CTAs) are 2
waves of 8 tiles: 2·(8 + F), no better, so 16.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import ClassVar

DECODE_MAX_ROWS = 16
"""Query rows per head at most for the decode kernels (speculative decoding's few tokens)."""

DECODE_MAX_M = 64
"""Packed rows of one CTA at most (the cuTile build of M = 128 spills on sm_90: 384 threads,
344 B)."""
DECODE_MIN_M = 16
"""Packed rows at least (an MMA tile's smallest M)."""

MERGE_TILE_ELEMS = 4096
"""fp32 elements of the merge's partial-output tile at most (16 KB): ``merge_chunk``."""
MIN_TILES_PER_SPLIT = 4
FIXED_TILES = 1.0
MERGE_LAUNCH_BYTES = 100_000
FP32 = 4


class BadDecodeSchedule(ValueError):
    pass


@dataclass(frozen=True)
class DecodeSchedule:
    """The decode launch asked for by a ``schedule=`` label: ``splits`` = 0 lets the work model
    choose (``choose_splits``)."""

    splits: int = 0

    @property
    def label(self) -> str:
        return "decode" if self.splits == 0 else f"decode{self.splits}"

    @classmethod
    def parse(cls, token) -> "DecodeSchedule | None":
        """The decode schedule a label names, or None when it names none (a split-Q schedule, a
        ``CtaSchedule`` object, or None)."""
        if isinstance(token, DecodeSchedule):
            return token
        if not isinstance(token, str) or not token.startswith("decode"):
            return None
        m = re.fullmatch(r"decode(\d*)", token)
        if m is None or (m.group(1) and int(m.group(1)) < 1):
            raise BadDecodeSchedule(f"schedule={token!r}: 'decode' (the work model's splits) or "
                                    "'decode<N>' with N >= 1 splits")
        return cls(int(m.group(1) or 0))


def pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def packing(G: int, S_q: int) -> tuple[int, int]:
    """(HG, SQP): query heads of a group per CTA and the padded rows per head, so that the packed
    M = HG·SQP is a power of two in [DECODE_MIN_M, DECODE_MAX_M] (or SQP alone above
    DECODE_MAX_M is refused).

    HG is the largest power of two dividing G with HG·SQP ≤ DECODE_MAX_M (a non-power-of-two
    group, e.g. G = 6, packs 2 heads per CTA); SQP is S_q rounded up to a power of two, then
    raised until M ≥ DECODE_MIN_M (the extra rows read as zeros and are never stored).
    >>> packing(8, 1) == (8, 2); packing(1, 1) == (1, 16); packing(32, 16) == (4, 16)."""
    if S_q < 1 or G < 1:
        raise ValueError(f"G={G}, S_q={S_q}: both must be >= 1")
    sqp = pow2_at_least(S_q)
    if sqp > DECODE_MAX_M:
        raise ValueError(f"S_q={S_q}: decode packs at most {DECODE_MAX_M} query rows per CTA")
    hg = 1
    while G % (hg * 2) == 0 and hg * 2 * sqp <= DECODE_MAX_M:
        hg *= 2
    while hg * sqp < DECODE_MIN_M:
        sqp *= 2
    return hg, sqp


def tile_n_for(D: int, rows: int) -> int:
    """Keys per K/V tile of both families' decode kernels for ``rows`` packed rows per CTA
    (``packing``: HG·SQP). At 16 rows, the one-token decode that streams the cache, 32 KB of K
    and 32 KB of V per copy (128 keys at D = 128, 256 at D = 64): fewer, longer copies keep more
    bytes in flight per resident CTA, 5% faster than 16 KB tiles over the split fit problems on
    an H200, where more resident CTAs or deeper latency hints were not (explorations/README.md).
    With more rows the [rows, keys] score tile doubles with the keys: the cuTile exports of 32
    and 64 rows with the larger tile spill under the bottom-right causal mask, and 16 rows per
    head over a 2-head cache ran 13% slower with it; there the 16 KB tile stays."""
    return (16384 if rows <= 16 else 8192) // D


def cache_bytes(B: int, H_kv: int, S_kv: int, D: int, elt: int = 2) -> int:
    """K and V bytes of a cache of S_kv keys: what one decode step must read."""
    return 2 * B * H_kv * S_kv * D * elt


def n_tiles(S_kv: int, tile_n: int) -> int:
    return -(-S_kv // tile_n)


def merge_chunk(splits: int, D: int) -> int:
    """Splits the merge of one query row reads per step: as many as fit a ``MERGE_TILE_ELEMS``
    tile of D-wide partial outputs (a power of two, at most the splits rounded up). The merge is
    a chain of dependent steps, each waiting for its loads: one split per step makes a 128-split
    merge 128 load latencies long (a one-row MQA cache: most of the call), 32 per step four."""
    return max(1, min(pow2_at_least(splits), MERGE_TILE_ELEMS // D))


def chunk_of(n: int, splits: int) -> int:
    """K/V tiles per split: ⌈n / splits⌉ (the kernel's ``chunk``)."""
    return -(-n // splits)


def split_tiles(s: int, n: int, splits: int, n_seen: int | None = None) -> range:
    """The K/V tiles split ``s`` scans: ``[s·chunk, min((s+1)·chunk, n_seen))`` (``n_seen``: the
    tiles holding keys the sequence's rows see; None: all n). Empty for a split past them."""
    c = chunk_of(n, splits)
    end = n if n_seen is None else min(n_seen, n)
    return range(s * c, max(s * c, min((s + 1) * c, end)))


def predicted_cost(s: int, *, units: int, n: int, slots: int, tile_bytes: int,
                   merge_bytes_per_split: int) -> float:
    """``T(s)`` of the module docstring, in bytes at one slot's bandwidth."""
    waves = -(-units * s // slots)
    t = waves * (chunk_of(n, s) * tile_bytes + FIXED_TILES * tile_bytes)
    if s > 1:
        t += 2 * s * merge_bytes_per_split / slots + MERGE_LAUNCH_BYTES
    return t


def max_splits(n: int) -> int:
    """At most ``n // MIN_TILES_PER_SPLIT`` splits (at least 1): never more than the tiles."""
    return max(1, n // MIN_TILES_PER_SPLIT)


def choose_splits(*, B: int, H: int, H_kv: int, S_q: int, S_kv: int, D: int, elt: int,
                  tile_n: int, head_chunks: int, slots: int) -> int:
    """The number of splits of least predicted time (module docstring): ``head_chunks`` CTAs
    per K/V head and split (query heads of a group beyond one CTA's packing), ``slots`` CTAs
    resident at once on the GPU, ``elt`` bytes per K/V element."""
    n = n_tiles(S_kv, tile_n)
    units = B * H_kv * head_chunks
    kw = dict(units=units, n=n, slots=slots, tile_bytes=2 * tile_n * D * elt,
              merge_bytes_per_split=B * H * S_q * D * FP32)
    best, best_t = 1, math.inf
    for s in range(1, max_splits(n) + 1):
        t = predicted_cost(s, **kw)
        if t < best_t * (1 - 1e-9):
            best, best_t = s, t
    return best


@dataclass(frozen=True)
class DecodePlan:
    """What a decode launch specialises on, in both families: the K/V tile, the packing (HG query
    heads × SQP padded rows per CTA), the splits and the resident slots the work model filled.
    Each family's subclass adds its build (``FAMILY`` names it in the label)."""

    problem: object          # spec.problem.Problem
    tile_n: int
    hg: int                  # query heads per CTA
    sqp: int                 # padded query rows per head in the packed tile
    splits: int
    slots: int               # resident CTAs the work model filled
    FAMILY: ClassVar[str] = ""

    @classmethod
    def make(cls, problem, slots: int, splits: int = 0, tile_n: int | None = None,
             group: bool = True, **build):
        """The plan of ``problem`` for ``slots`` resident CTAs: ``splits`` 0 takes the work
        model's (``choose_splits``), ``tile_n`` None the tile rule's (``tile_n_for``); ``group``
        False packs one query head per CTA (the decode study's control: each K/V tile read
        once per query head); ``build`` the subclass's own fields."""
        from .family import UnsupportedVariant
        if problem.S_q > DECODE_MAX_ROWS:
            raise UnsupportedVariant(f"S_q={problem.S_q}: the decode kernels take at most "
                                     f"{DECODE_MAX_ROWS} query rows per head; use a split-Q "
                                     "schedule (schedule=None or 'grid')")
        hg, sqp = packing(problem.group_size if group else 1, problem.S_q)
        tile_n = tile_n or tile_n_for(problem.D, hg * sqp)
        if splits == 0:
            splits = choose_splits(B=problem.B, H=problem.H, H_kv=problem.H_kv, S_q=problem.S_q,
                                   S_kv=problem.S_kv, D=problem.D, elt=2, tile_n=tile_n,
                                   head_chunks=problem.group_size // hg, slots=slots)
        return cls(problem, tile_n, hg, sqp, int(splits), slots, **build)

    @property
    def head_chunks(self) -> int:
        return self.problem.group_size // self.hg

    @property
    def units(self) -> int:
        """CTAs per split: B · H_kv · head chunks."""
        return self.problem.B * self.problem.H_kv * self.head_chunks

    @property
    def n_ctas(self) -> int:
        return self.splits * self.units

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.splits, self.units, 1)

    @property
    def chunk(self) -> int:
        """K/V tiles per split (of the cache capacity S_kv)."""
        return chunk_of(n_tiles(self.problem.S_kv, self.tile_n), self.splits)

    @property
    def combine_chunk(self) -> int:
        """Splits the merge reads per step (``merge_chunk``)."""
        return merge_chunk(self.splits, self.problem.D)

    @property
    def label(self) -> str:
        return (f"{self.FAMILY}.decode{self.splits}.g{self.hg}x{self.sqp}n{self.tile_n}"
                f"d{self.problem.D}")


"""K/V scan orders: in which order a CTA visits the K/V tiles of one Q tile.

The locality argument (paper §Sawtooth; reuse distance after Mattson 1970). A CTA that processes
several Q tiles one after another scans the same ``N`` K/V tiles each time. In the *linear* order
every scan runs ``0 .. N-1``: when tile ``j`` is read again, all ``N`` tiles were touched since, so
its LRU stack distance is ``N - 1`` for every ``j``, and once ``N`` tiles exceed the cache every
access misses. The *sawtooth* order flips direction on every other scan (``0..N-1``, then
``N-1..0``): the tiles the previous scan touched last are touched first, and tile ``j`` has stack
distance ``N - 1 - j`` (entering a backward scan) or ``j`` (entering a forward one), mean
``(N-1)/2``. With a cache of ``C < N`` tiles, each scan then misses ``N - C`` tiles instead of
``N``.

Worked example, N = 4 tiles, cache of 2 tiles, 3 scans:

    linear:    0123 0123 0123   -> 4 + 4 + 4 = 12 misses (every reuse is at distance 3)
    sawtooth:  0123 3210 0123   -> 4 + 2 + 2 = 8 misses (3,2 then 0,1 hit)

The *group factor* X flips the direction every X Q tiles of the CTA's own sequence instead of every
one; X = 1 is the paper's form. *Block-parity* picks the direction from the CTA index instead: it
looks similar but is not the technique: concurrent neighbouring CTAs then scan in opposite
directions and the wavefront that lets one CTA's miss become the others' hits is destroyed (an
ablation, kept to show that). *Reverse* always scans backward (a control for direction alone).

For causal problems a Q tile reads only ``Tc`` tiles ``0..Tc-1``; the reversal happens inside that
range (``j = Tc - 1 - step``), as in the paper's kernels.

The integer codes of ``OrderKind`` are the ``ct.Constant`` / C++ template values the kernels use.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np


class OrderKind(enum.IntEnum):
    LINEAR = 0
    SAWTOOTH = 1
    REVERSE = 2
    BLOCK_PARITY = 3


@dataclass(frozen=True)
class ScanOrder:
    """A K/V scan order. ``group`` is the sawtooth group factor X (only meaningful for SAWTOOTH)."""

    kind: OrderKind = OrderKind.LINEAR
    group: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", OrderKind(self.kind))
        if not isinstance(self.group, int) or self.group < 1:
            raise ValueError(f"sawtooth group factor X={self.group!r} must be an integer >= 1")
        if self.kind != OrderKind.SAWTOOTH and self.group != 1:
            raise ValueError(f"group factor X={self.group} only applies to the sawtooth order")

    @classmethod
    def linear(cls) -> "ScanOrder":
        return cls(OrderKind.LINEAR)

    @classmethod
    def sawtooth(cls, group: int = 1) -> "ScanOrder":
        return cls(OrderKind.SAWTOOTH, group)

    @classmethod
    def reverse(cls) -> "ScanOrder":
        return cls(OrderKind.REVERSE)

    @classmethod
    def block_parity(cls) -> "ScanOrder":
        return cls(OrderKind.BLOCK_PARITY)

    @property
    def label(self) -> str:
        """Token used in variant ids: linear, sawtooth, sawtooth4, reverse, blockparity."""
        if self.kind == OrderKind.SAWTOOTH:
            return "sawtooth" if self.group == 1 else f"sawtooth{self.group}"
        return self.kind.name.lower().replace("_", "")

    @classmethod
    def parse(cls, token: str) -> "ScanOrder":
        t = token.strip().lower()
        if t.startswith("sawtooth"):
            rest = t[len("sawtooth"):].lstrip("x")
            return cls.sawtooth(int(rest) if rest else 1)
        names = {"linear": cls.linear(), "reverse": cls.reverse(),
                 "blockparity": cls.block_parity(), "block-parity": cls.block_parity()}
        if t not in names:
            raise ValueError(f"unknown scan order {token!r}; known: linear, sawtooth[X], "
                             "reverse, blockparity")
        return names[t]

    def reversed_for(self, local_iter, cta):
        """Whether the scan runs backward, for a CTA's ``local_iter``-th Q tile (array-friendly).

        ``local_iter`` counts the Q tiles this CTA has processed before (0 for its first), ``cta``
        is the CTA index in the launched grid.
        """
        local_iter = np.asarray(local_iter)
        if self.kind == OrderKind.LINEAR:
            return np.zeros(local_iter.shape, dtype=bool)
        if self.kind == OrderKind.REVERSE:
            return np.ones(local_iter.shape, dtype=bool)
        if self.kind == OrderKind.SAWTOOTH:
            return (local_iter // self.group) % 2 == 1
        return np.broadcast_to(np.asarray(cta) % 2 == 1, local_iter.shape).copy()

    def kv_index(self, step, n_tiles, reverse):
        """K/V tile visited at ``step`` of a scan over ``n_tiles`` tiles (array-friendly)."""
        step = np.asarray(step)
        return np.where(reverse, np.asarray(n_tiles) - 1 - step, step)

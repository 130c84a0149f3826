"""A small deterministic pairwise (all-pairs) generator for test matrices.

``pairwise(axes)`` returns rows (one value per axis) such that every value of every axis appears,
and every pair of values of two different axes appears in at least one row. Greedy, in the
manner of AETG without the randomness: each new row starts from the first pair not yet covered
(in axis order, then value order) and fills the other axes one by one with the value that covers
the most pairs still missing against the values already chosen (ties: the earlier value). Every
row covers at least one new pair, so it ends; the same axes always give the same rows, in the same
order. For two axes it is the full product.

``covers_all_pairs(axes, rows)`` is the check the CPU test runs (tests/cpu/repository/
test_gpu_runner.py) and that ``pairwise`` asserts on its own output.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence


def _pairs(axes: Sequence[Sequence]) -> set[tuple[int, int, int, int]]:
    """Every (axis i, value index a, axis j > i, value index b)."""
    return {(i, a, j, b) for i, j in itertools.combinations(range(len(axes)), 2)
            for a in range(len(axes[i])) for b in range(len(axes[j]))}


def _row_pairs(row: Sequence[int]) -> set[tuple[int, int, int, int]]:
    return {(i, row[i], j, row[j]) for i, j in itertools.combinations(range(len(row)), 2)}


def pairwise_indices(sizes: Sequence[int]) -> list[tuple[int, ...]]:
    """Rows of value indices for axes of ``sizes`` values covering every pair (see module doc)."""
    if any(n < 1 for n in sizes):
        raise ValueError(f"every axis needs at least one value: sizes {list(sizes)}")
    n = len(sizes)
    if n <= 2:
        return list(itertools.product(*(range(s) for s in sizes)))
    missing = _pairs([range(s) for s in sizes])
    rows: list[tuple[int, ...]] = []
    while missing:
        i, a, j, b = min(missing)
        row: list[int | None] = [None] * n
        row[i], row[j] = a, b
        for k in range(n):
            if row[k] is not None:
                continue

            def gain(v: int, k: int = k) -> int:
                return sum(((min(k, m), v if k < m else row[m], max(k, m),
                             row[m] if k < m else v) in missing)
                           for m in range(n) if row[m] is not None)
            row[k] = max(range(sizes[k]), key=lambda v: (gain(v), -v))
        done = tuple(int(x) for x in row)
        rows.append(done)
        missing -= _row_pairs(done)
    return rows


def pairwise(axes: Sequence[Sequence]) -> list[tuple]:
    """Rows of values of ``axes`` (each a sequence of values) covering every pair of values of
    two axes at least once, deterministic; two or fewer axes: the full product."""
    axes = [list(a) for a in axes]
    rows = [tuple(axes[k][v] for k, v in enumerate(r))
            for r in pairwise_indices([len(a) for a in axes])]
    assert covers_all_pairs(axes, rows)
    return rows


def covers_all_pairs(axes: Sequence[Sequence], rows: Sequence[Sequence]) -> bool:
    """Whether ``rows`` hold every value of every axis and every pair of values of two axes."""
    axes = [list(a) for a in axes]
    if any(len(r) != len(axes) for r in rows):
        return False
    seen_values = [{_key(r[k]) for r in rows} for k in range(len(axes))]
    if any(set(map(_key, a)) - s for a, s in zip(axes, seen_values)):
        return False
    for i, j in itertools.combinations(range(len(axes)), 2):
        want = {(_key(x), _key(y)) for x in axes[i] for y in axes[j]}
        got = {(_key(r[i]), _key(r[j])) for r in rows}
        if want - got:
            return False
    return True


def _key(x):
    """A hashable stand-in for a value (dicts, e.g. tactic keyword sets, are not hashable)."""
    try:
        hash(x)
        return x
    except TypeError:
        return repr(x)

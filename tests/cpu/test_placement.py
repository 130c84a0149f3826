"""CPU checks of the CTA placement records: the CUDA trace build's per-CTA buffer layout
(cuda_baseline.backend.unpack_trace) and the placement / drift statistics of analysis.placement
on hand-made launches."""
from __future__ import annotations

import numpy as np
import pytest

from cuda_baseline.backend import unpack_trace


def _buffers(n_ctas: int, steps: int, used: list[int]):
    """Flat trace buffers as the kernel leaves them: CTA c ran ``used[c]`` steps, step s of CTA c
    visited (0, 0, c, s) at 1000 c + 10 s ns, on SM 7 c, started at 1000 c - 5, ended 1000 c + 500."""
    visits = np.full(4 * n_ctas * steps + n_ctas, -1, dtype=np.int32)
    times = np.full(n_ctas * (steps + 2), -1, dtype=np.int64)
    for c in range(n_ctas):
        for s in range(used[c]):
            visits[4 * (c * steps + s):4 * (c * steps + s) + 4] = (0, 0, c, s)
            times[c * steps + s] = 1000 * c + 10 * s
        visits[4 * n_ctas * steps + c] = 7 * c
        times[n_ctas * steps + c] = 1000 * c - 5
        times[n_ctas * steps + n_ctas + c] = 1000 * c + 500
    return visits, times


def test_unpack_trace_reads_per_step_then_per_cta_records():
    visits, times = _buffers(3, 5, used=[3, 2, 0])
    tr = unpack_trace(visits, times, 3, 5)
    assert tr["visits"].shape == (3, 3, 4)            # 2 step columns nobody used are dropped
    assert tr["visits"][1, 1].tolist() == [0, 0, 1, 1]
    assert (tr["visits"][1, 2] == -1).all() and (tr["visits"][2] == -1).all()
    assert tr["time_ns"].tolist() == [[0, 10, 20], [1000, 1010, -1], [-1, -1, -1]]
    assert tr["smid"].tolist() == [0, 7, 14] and tr["smid"].dtype == np.int32
    assert tr["start_ns"].tolist() == [-5, 995, 1995] and tr["start_ns"].dtype == np.int64
    assert tr["end_ns"].tolist() == [500, 1500, 2500]


def test_unpack_trace_refuses_buffers_of_another_shape():
    visits, times = _buffers(3, 5, used=[1, 1, 1])
    with pytest.raises(ValueError, match="3 CTAs x 4 steps"):
        unpack_trace(visits, times, 3, 4)
    with pytest.raises(ValueError, match="do not hold"):
        unpack_trace(visits[:-1], times, 3, 5)

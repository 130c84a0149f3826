"""The timed simulator's normal draws, compiled with numba: numpy's legacy ``RandomState`` stream
(MT19937 seeded by ``init_genrand``, 53-bit doubles from two 32-bit words, the polar method
keeping the second value of each pair), with its state in arrays the event loop owns.

Why not ``np.random`` inside the loop: numba's generator is the same stream, but its state is
thread-local, so every draw looks it up (``__tls_get_addr``) and calls two functions that are not
inlined; under perf that took about a quarter of the loop on the GB10 cases. The draws here are the
same doubles bit for bit (``tests/cpu/analysis/cache/test_timesim.py`` compares a million of
them per seed with ``numpy.random.RandomState``), so the simulated counts do not change.

The loop draws from a buffer that ``_fill`` refills ``BUFFER`` normals at a time, in stream order:
one call per thousand draws instead of two per draw. State: ``mt`` (int64[STATE_WORDS]) holds
the 624 words, the next word's index, the has-a-spare flag and the buffer's next index; ``buf``
(float64[BUFFER + 1]) the buffered normals and, last, the spare value of the last pair.
"""
from __future__ import annotations

import math

import numba
import numpy as np

_N = 624
_M = 397
_POS = _N            # index of the next word
_HAS = _N + 1        # 1 when the spare holds the second value of a pair
_NEXT = _N + 2       # index of the next buffered normal
STATE_WORDS = _N + 3
BUFFER = 1024


@numba.njit(cache=True, _nrt=False)
def _twist(y):  # pragma: no cover - compiled
    return (y >> 1) ^ (-(y & 1) & 0x9908B0DF)


@numba.njit(cache=True, _nrt=False)
def _regenerate(mt):  # pragma: no cover - compiled
    """The next 624 words (MT19937's generation step)."""
    for i in range(_N - _M):
        y = (mt[i] & 0x80000000) | (mt[i + 1] & 0x7FFFFFFF)
        mt[i] = mt[i + _M] ^ _twist(y)
    for i in range(_N - _M, _N - 1):
        y = (mt[i] & 0x80000000) | (mt[i + 1] & 0x7FFFFFFF)
        mt[i] = mt[i + _M - _N] ^ _twist(y)
    y = (mt[_N - 1] & 0x80000000) | (mt[0] & 0x7FFFFFFF)
    mt[_N - 1] = mt[_M - 1] ^ _twist(y)
    mt[_POS] = 0


@numba.njit(cache=True, _nrt=False)
def seed(mt, buf, s):  # pragma: no cover - compiled
    """``np.random.seed(s)`` (``init_genrand``) into ``mt``: no spare value, the buffer empty."""
    x = s & 0xFFFFFFFF
    for i in range(_N):
        mt[i] = x
        x = (1812433253 * (x ^ (x >> 30)) + i + 1) & 0xFFFFFFFF
    mt[_POS] = _N
    mt[_HAS] = 0
    mt[_NEXT] = BUFFER
    buf[BUFFER] = 0.0


@numba.njit(cache=True, _nrt=False)
def _word(mt):  # pragma: no cover - compiled
    """The next tempered 32-bit word."""
    if mt[_POS] >= _N:
        _regenerate(mt)
    y = mt[mt[_POS]]
    mt[_POS] += 1
    y ^= y >> 11
    y ^= (y << 7) & 0x9D2C5680
    y ^= (y << 15) & 0xEFC60000
    y ^= y >> 18
    return y


@numba.njit(cache=True, _nrt=False)
def _double(mt):  # pragma: no cover - compiled
    a = _word(mt) >> 5
    b = _word(mt) >> 6
    return (a * 67108864.0 + b) / 9007199254740992.0


@numba.njit(cache=True, _nrt=False)
def _gauss(mt, buf):  # pragma: no cover - compiled
    """The stream's next standard normal (numpy's ``legacy_gauss``)."""
    if mt[_HAS]:
        mt[_HAS] = 0
        return buf[BUFFER]
    while True:
        x1 = 2.0 * _double(mt) - 1.0
        x2 = 2.0 * _double(mt) - 1.0
        r2 = x1 * x1 + x2 * x2
        if r2 < 1.0 and r2 != 0.0:
            break
    f = math.sqrt(-2.0 * math.log(r2) / r2)
    buf[BUFFER] = f * x1
    mt[_HAS] = 1
    return f * x2


@numba.njit(cache=True, _nrt=False)
def _fill(mt, buf):  # pragma: no cover - compiled
    for i in range(BUFFER):
        buf[i] = _gauss(mt, buf)
    mt[_NEXT] = 0


@numba.njit(cache=True, _nrt=False)
def normal(mt, buf):  # pragma: no cover - compiled
    """The next standard normal: ``np.random.standard_normal()`` after the same seed and draws."""
    if mt[_NEXT] >= BUFFER:
        _fill(mt, buf)
    i = mt[_NEXT]
    mt[_NEXT] = i + 1
    return buf[i]


@numba.njit(cache=True)
def draws(s, n):  # pragma: no cover - compiled
    """``n`` normals after ``seed(s)`` (the test's view of the stream)."""
    mt = np.zeros(STATE_WORDS, np.int64)
    buf = np.zeros(BUFFER + 1, np.float64)
    seed(mt, buf, s)
    out = np.empty(n, np.float64)
    for i in range(n):
        out[i] = normal(mt, buf)
    return out

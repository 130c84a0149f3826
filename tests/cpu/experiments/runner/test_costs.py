"""The closed-form work and cost model of ``experiments.runner.costs``: exact counts, constants that
are what the committed data give, memory estimates that bound what the simulators take, and the
simulator's kernels compiled once (and read from numba's disk cache after that)."""
from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from experiments.registry.studies import get_study
from experiments.runner import costfit, costs
from spec import Problem, TileGrid, Tiles, build_trace, get_arch
from tests.conftest import ROOT


def test_floor_sum_matches_the_loop():
    rng = random.Random(1)
    for _ in range(500):
        n, m, a, b = rng.randrange(0, 60), rng.randrange(1, 40), rng.randrange(0, 90), \
            rng.randrange(0, 90)
        assert costs.floor_sum(n, m, a, b) == sum((a * i + b) // m for i in range(n))


def test_kv_pairs_closed_form_equals_the_grid():
    rng = random.Random(2)
    for _ in range(300):
        m, n = rng.choice([16, 32, 64, 80, 128]), rng.choice([16, 32, 64, 80, 128])
        p = Problem(rng.randrange(1, 3), rng.randrange(1, 3), rng.randrange(1, 3000), 64,
                    S_kv=rng.randrange(1, 3000), causal=rng.random() < 0.6)
        g = TileGrid(p, Tiles(m, n))
        want = int(np.sum(g.kv_tiles_for(np.arange(g.n_q))))
        assert costs.kv_pairs_per_head(g) == want, (p, m, n)


def test_tile_accesses_are_the_trace_length():
    for c in get_study("sawtooth").plan(get_arch("gb10"))[::3]:
        small = dataclasses.replace(c, problem=dataclasses.replace(c.problem, S_q=3000,
                                                                   S_kv=3000))
        v = small.variant
        trace = build_trace(TileGrid(small.problem, v.tiles), v.schedule, v.order, small.resident)
        assert costs.tile_accesses(small) == trace.n_accesses
        assert costs.tile_ids(small) == len(trace.key_sectors)


def test_a_billion_tokens_is_counted_at_once():
    import time
    c = get_study("sawtooth").plan(get_arch("gb10"))[4]          # causal
    big = dataclasses.replace(c, problem=dataclasses.replace(c.problem, S_q=10**9, S_kv=10**9))
    t0 = time.perf_counter()
    n = costs.tile_accesses(big)
    assert time.perf_counter() - t0 < 0.01
    g = TileGrid(big.problem, big.variant.tiles)
    assert n == 2 * g.n_bh * (g.n_q * (g.n_q + 1) // 2) + 2 * g.n_work   # m == n: a triangle


def test_the_constants_are_what_the_committed_data_give():
    step, entry, cases = costfit.fit_timed_sim()
    assert step == pytest.approx(costs.TIMED_S_PER_STEP, rel=0.01)
    assert entry == pytest.approx(costs.TIMED_S_PER_ENTRY, rel=0.01)
    assert len(cases) == 92 and all(0.6 < fit / got < 1.6 for _, got, fit in cases)
    lock, per_case = costfit.fit_lockstep()
    assert lock == pytest.approx(costs.LOCKSTEP_S_PER_ACCESS, rel=0.01) and len(per_case) == 16
    coef, runs = costfit.fit_measure()
    for k, v in coef.items():
        assert v == pytest.approx(costs.MEASURE_COEF[k], rel=0.01), k
    assert len(runs) == costs.measure_fit_runs()    # the registered measured runs, timed kernels
    assert not any("backward" in n for n, _, _ in runs)   # the backward study is not fitted
    # every run over 200 s within 5%, the shape suites' eager calls included (their own terms)
    long_runs = [(n, w, f) for n, w, f in runs if w > 200]
    assert len(long_runs) >= 5 and all(abs(f / w - 1) < 0.05 for n, w, f in long_runs)
    rates = costfit.fit_rates()
    assert rates == {k: v for k, v in costs.RATES.items()}


def test_the_timed_estimate_is_exact_unless_sampled_and_then_counts_every_seed():
    """The main command simulates exactly: every K/V step of every item; ``--sample`` simulates
    a SHARDS share of them, once per seed of the spread its rows state."""
    from analysis.cache.sampling import SHARDS_TARGET, SPREAD_SEEDS
    assert (costs.SHARDS_TARGET, costs.SPREAD_SEEDS) == (SHARDS_TARGET, SPREAD_SEEDS)
    arch = get_arch("gb10")
    c = get_study("sawtooth").plan(arch)[0]
    g = TileGrid(c.problem, c.variant.tiles)
    pairs = costs.kv_pairs_per_head(g) * g.n_bh
    ids = costs.tile_ids(c)
    entries = costs.TIMED_S_PER_ENTRY * ids
    exact = costs.sim_case_cost(c, arch, "timed").seconds
    assert exact == pytest.approx(costs.TIMED_S_PER_STEP * pairs + entries)
    r = SHARDS_TARGET / ids
    steps = 2 * g.n_work + (2 * r - r * r) * pairs
    sampled = costs.sim_case_cost(c, arch, "timed", sample=True).seconds
    assert sampled == pytest.approx(SPREAD_SEEDS * (costs.TIMED_S_PER_STEP * steps + entries))


def test_the_h100_main_study_default_fits_ten_minutes_and_the_full_protocol_is_stated():
    """The model's estimate of the default protocol (3 repeats in one ncu session per group),
    under ten minutes, and of one session per repeat, longer, for the H100 main study; and what
    it says of the run the issue timed (``--groups dram --repeats 1``: 166 s measured, a run the
    fit did not see)."""
    h100 = get_arch("h100")
    cases = get_study("sawtooth").plan(h100)
    est = lambda **kw: costs.measure_cost(cases, h100, reps=10, timed=True,  # noqa: E731
                                          profiled=True, **kw).seconds
    default = est(groups=("dram", "lrc", "tex", "fabric", "l1"), repeats=3, sessions=1)
    full = est(groups=("dram", "lrc", "tex", "fabric", "l1"), repeats=3, sessions=3)
    assert default < 600 and full > default
    assert est(groups=("dram",), repeats=1, sessions=1) == pytest.approx(166, rel=0.1)


def _rss_growth(arch: str, index: int, S: int, model: str) -> tuple[int, int]:
    """(measured growth of the resident set while one case runs, the estimate), in a fresh
    process: the resident size is sampled every millisecond from /proc/self/statm, and glibc is
    told to map every array of 64 KiB or more on its own (MALLOC_MMAP_THRESHOLD_), so that an
    array is resident while it lives and returned when freed (not hidden in a reused heap)."""
    code = f"""
import dataclasses, json, os, threading, time
from experiments.runner import costs
from experiments.simulation.simulate import model_params, resident_of_build, simulate_case, \
    timed_counts
from experiments.registry.studies import get_study
from spec import get_arch
page = os.sysconf("SC_PAGE_SIZE")
rss = lambda: int(open("/proc/self/statm").read().split()[1]) * page
arch = get_arch({arch!r}); c = get_study("sawtooth").plan(arch)[{index}]
sized = lambda s: dataclasses.replace(c, problem=dataclasses.replace(c.problem, S_q=s, S_kv=s))
p = model_params(arch)
run = (lambda x: timed_counts(resident_of_build(x, arch)[0], arch, p, sample=True)) \\
    if {model!r} == "timed" else (lambda x: simulate_case(x, arch, arch.l2_bytes))
run(sized(1024))
peak, done = [0], []
def poll():
    while not done:
        peak[0] = max(peak[0], rss()); time.sleep(0.001)
base = rss()
t = threading.Thread(target=poll); t.start()
run(sized({S}))
done.append(1); t.join()
P = p.time_params(arch).partitions if {model!r} == "timed" else 1
print(json.dumps([peak[0] - base, costs.sim_case_cost(sized({S}), arch, {model!r}, P).bytes]))
"""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=600, env=env)
    assert out.returncode == 0, out.stderr
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
@pytest.mark.parametrize("arch, index, S, model", [("h100", 0, 1048576, "timed"),
                                                   ("gb10", 15, 1048576, "timed"),
                                                   ("gb10", 15, 262144, "lockstep")])
def test_the_memory_estimate_bounds_what_the_simulator_takes(arch, index, S, model):
    grown, est = _rss_growth(arch, index, S, model)
    assert grown <= est <= 2.0 * grown, (grown, est)


def test_the_timed_kernel_compiles_once_and_loads_from_the_disk_cache():
    """Three cases of different shapes and both partition layouts: one compiled signature of
    the event loop (its LRU entry, ``timeloop.entry(False, False)``) per process, and in a second
    process that one comes from numba's disk cache (no compile at all)."""
    code = """
import json
from experiments.simulation.simulate import model_params, timed_rows
from experiments.registry.studies import get_study
from spec import get_arch
import dataclasses
from analysis.cache import timeloop
for a in ("gb10", "h100"):
    arch = get_arch(a)
    for c in get_study("sawtooth").plan(arch)[7:10]:
        c = dataclasses.replace(c, problem=dataclasses.replace(c.problem, S_q=4096, S_kv=4096))
        timed_rows(c, arch, model_params(arch), run="r", study="s")
d = timeloop.entry(False, False)
print(json.dumps([len(d.signatures), sum(d.stats.cache_hits.values()),
                  sum(d.stats.cache_misses.values())]))
"""
    got = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        got.append(json.loads(out.stdout.strip().splitlines()[-1]))
    signatures, hits, misses = got[1]
    assert signatures == 1 and misses == 0 and hits == 1, got

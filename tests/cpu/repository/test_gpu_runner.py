"""The GPU suite's runner logic on the CPU: the pairwise generator (tests/pairwise.py) covers every
pair and is deterministic; the matrices built with it keep the products they promise; the shard
plan (tests/gpu/plan.py) runs every test once, balanced, keeps whole modules whole; the junit
reader gives back the node ids."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tests.gpu import plan as gp
from tests.pairwise import covers_all_pairs, pairwise, pairwise_indices

AXES = [
    [["a", "b", "c", "d", "e"], list(range(7)), [False, True], [64, 128], ["fp16", "bf16"]],
    [list("abcdef"), list(range(10)), [False, True]],
    [[1, 2, 3]] * 4,
    [[0, 1], [{"x": 1}, {"y": 2}, {"x": 1, "y": 2}], ["p", "q", "r"]],
    [["only"], [1, 2, 3], [True, False]],
    [[1, 2, 3, 4]],
]


@pytest.mark.parametrize("axes", AXES, ids=lambda a: "x".join(str(len(x)) for x in a))
def test_pairwise_covers_every_pair_deterministically(axes):
    rows = pairwise(axes)
    assert covers_all_pairs(axes, rows)
    assert rows == pairwise(axes)                      # the same rows, in the same order
    full = list(itertools.product(*axes))
    assert len(rows) <= len(full)
    # no row is redundant enough to drop the lower bound: at least the two largest axes' product
    sizes = sorted(map(len, axes), reverse=True)
    assert len(rows) >= (sizes[0] * sizes[1] if len(sizes) > 1 else sizes[0])


def test_pairwise_is_the_product_for_two_axes_and_smaller_for_more():
    assert pairwise([[1, 2], "xyz"]) == list(itertools.product([1, 2], "xyz"))
    assert len(pairwise_indices([5, 7, 2, 2, 2])) == 35      # vs 280 for the product
    assert len(pairwise_indices([6, 10, 2])) == 60           # vs 120
    with pytest.raises(ValueError):
        pairwise_indices([3, 0])


def test_cover_check_can_fail():
    axes = [[0, 1], [0, 1], [0, 1]]
    rows = pairwise(axes)
    for i in range(len(rows)):
        assert not covers_all_pairs(axes, rows[:i] + rows[i + 1:]), f"row {i} is not needed"
    assert not covers_all_pairs(axes, [r[:2] for r in rows])


def test_gpu_matrices_are_pairwise_and_keep_order_times_schedule():
    from tests.gpu import test_cutile as tc
    from tests.gpu import test_cutile_tactics as tt
    ref_axes = [tc.ORDERS, tc.SCHEDULES, (False, True), tc.HEAD_DIMS, tc.DTYPES]
    assert covers_all_pairs(ref_axes, tc.REFERENCE_CASES)
    assert {(o, s) for o, s, *_ in tc.REFERENCE_CASES} == set(itertools.product(tc.ORDERS,
                                                                                tc.SCHEDULES))
    assert covers_all_pairs([tc.TRACE_ORDERS, tc.TRACE_SCHEDULES, (False, True)], tc.TRACE_CASES)
    assert {(o, s) for o, s, _ in tc.TRACE_CASES} == set(itertools.product(tc.TRACE_ORDERS,
                                                                            tc.TRACE_SCHEDULES))
    assert covers_all_pairs([(False, True), tt.TACTICS, tt.TACTIC_TILES],
                            [(c, t, (tl, o, w)) for c, t, tl, o, w in tt.TACTIC_CASES])
    assert covers_all_pairs([(False, True), tt.PREFETCH_SCHEDULES, tt.PREFETCH_TILES],
                            tt.PREFETCH_CASES)
    # the parametrisation is the matrix, and builds() lists what each case launches
    marks = {m.args[0]: m.args[1] for m in tc.test_matches_fp32_reference.pytestmark
             if m.name == "parametrize"}
    assert marks["order,schedule,causal,D,dtype"] == tc.REFERENCE_CASES


def _ids():
    ids = []
    ids += [f"tests/gpu/test_a.py::test_big[{i}]" for i in range(40)]
    ids += [f"tests/gpu/test_a.py::test_small[{i}]" for i in range(3)]
    ids += [f"tests/gpu/test_cuda_baseline.py::test_m[{i}]" for i in range(30)]
    ids += [f"tests/gpu/test_cuda_baseline.py::test_n[{i}]" for i in range(5)]
    ids += ["tests/gpu/test_b.py::test_long", "tests/gpu/test_b.py::test_short"]
    return ids


def _costs():
    c = {f"tests/gpu/test_a.py::test_big[{i}]": 3.0 for i in range(40)}
    c["tests/gpu/test_b.py::test_long"] = 50.0
    return c


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_plan_runs_every_test_once_balanced_and_deterministic(n):
    ids, costs = _ids(), _costs()
    shards = gp.plan(ids, costs, n)
    got = [i for s in shards for i in s.nodeids]
    assert sorted(got) == sorted(ids) and len(got) == len(set(got))
    assert [s.nodeids for s in shards] == [s.nodeids for s in gp.plan(list(ids), costs, n)]
    assert 1 <= len(shards) <= n
    units = gp.units(ids, costs, n)
    total = sum(u.cost for u in units)
    worst = max(s.cost for s in shards) - gp.SHARD_OVERHEAD
    assert worst <= total / len(shards) + max(u.cost for u in units) + 1e-9
    # a module of WHOLE_MODULES stays in one shard, named by its path
    holding = [s for s in shards if any("test_cuda_baseline" in i for i in s.nodeids)]
    assert len(holding) == 1 and "tests/gpu/test_cuda_baseline.py" in holding[0].args
    # a function that fits is passed whole; the big one is cut into case lists when n > 1
    for s in shards:
        for u in s.units:
            if u.whole and u.function:
                assert u.args == [f"{u.path}::{u.function}"]
            elif not u.whole:
                assert u.args == list(u.nodeids) and u.function == "test_big"
    assert any(not u.whole for u in units) == (n > 1)


def test_plan_costs_measured_then_estimated(tmp_path):
    assert gp.cost_of("tests/gpu/test_b.py::test_long", _costs()) == 50.0
    assert gp.cost_of("tests/gpu/test_cutile.py::test_x[1]", {}) == \
        gp.MODULE_COST["tests/gpu/test_cutile.py"]
    assert gp.cost_of("tests/gpu/test_backward_cuda.py::test_copy_task_trains_to_sdpa_loss[x]",
                      {}) == gp.FUNCTION_COST["test_copy_task_trains_to_sdpa_loss"]
    assert gp.cost_of("tests/gpu/test_new.py::test_y", {}) == gp.DEFAULT_COST
    fc = gp.function_costs({"tests/gpu/test_a.py::test_f[1]": 1.0,
                            "tests/gpu/test_a.py::test_f[2]": 3.0,
                            "tests/gpu/test_a.py::test_g": 0.5})
    assert fc == {"tests/gpu/test_a.py": {"test_f": 2.0, "test_g": 0.5}}
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(fc))
    flat = gp.load_costs(path)
    assert flat == {"tests/gpu/test_a.py::test_f": 2.0, "tests/gpu/test_a.py::test_g": 0.5}
    assert gp.cost_of("tests/gpu/test_a.py::test_f[9]", flat) == 2.0   # a case not yet run
    assert gp.cost_of("tests/gpu/test_a.py::test_f[1]", {**flat, "tests/gpu/test_a.py::test_f[1]":
                                                          7.0}) == 7.0  # the test's own first
    committed = gp.load_costs(Path(gp.__file__).with_name("costs.json"))
    assert committed and all("[" not in k and v >= 0 for k, v in committed.items())
    assert gp.plan([], {}, 4) == []
    with pytest.raises(ValueError):
        gp.plan(_ids(), {}, 0)


def test_junit_results_give_back_the_node_ids(tmp_path):
    xml = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
    <testcase classname="tests.gpu.test_cutile" name="test_m[linear-grid-full-64-fp16]" time="1.5"/>
    <testcase classname="tests.gpu.test_cutile" name="test_f" time="0.2">
      <failure message="x"/></testcase>
    <testcase classname="tests.cpu.kernels.test_backward_wiring" name="test_w" time="0.1">
      <skipped message="no torch"/></testcase>
    <testcase classname="tests.gpu.test_k" name="test_e" time="3"><error message="e"/></testcase>
    </testsuite></testsuites>"""
    got = gp.junit_results(xml)
    assert got == {
        "tests/gpu/test_cutile.py::test_m[linear-grid-full-64-fp16]": ("passed", 1.5),
        "tests/gpu/test_cutile.py::test_f": ("failed", 0.2),
        "tests/cpu/kernels/test_backward_wiring.py::test_w": ("skipped", 0.1),
        "tests/gpu/test_k.py::test_e": ("error", 3.0)}
    p = tmp_path / "d.json"
    assert gp.load_costs(p) == {}
    p.write_text('{"a::b": 2}')
    assert gp.load_costs(p) == {"a::b": 2.0}


def _runner(tmp_path, *targets, shards=2):
    import subprocess
    import sys

    from tests.conftest import ROOT
    log = tmp_path / "log"
    r = subprocess.run([sys.executable, "-m", "tests.gpu", "--shards", str(shards), "--log-dir",
                        str(log), "--cache-dir", str(tmp_path / "cache"), "--targets", *targets],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    return r, log


def test_runner_end_to_end_on_the_cpu(tmp_path):
    """``python -m tests.gpu`` without a GPU: the warm step collects and compiles nothing, the
    shards run their tests (a CPU test passes, the GPU ones skip), one combined log with each
    shard's exit code and time, the durations of every test; exit 0."""
    me = "tests/cpu/repository/test_gpu_runner.py"
    r, log = _runner(tmp_path, "tests/gpu/test_drift.py", f"{me}::test_cover_check_can_fail",
                     f"{me}::test_plan_costs_measured_then_estimated")
    text = (log / "gpu-suite.log").read_text()
    assert r.returncode == 0, text[-3000:]
    assert "GPU suite: PASSED" in text and " 0 failed, 0 errors" in text, text[-2000:]
    assert "shard 0: exit 0" in text and "shard 1: exit 0" in text
    import json
    assert len(json.loads((log / "durations.json").read_text())) == 4


def test_runner_fails_when_nothing_is_collected_or_nothing_passes(tmp_path):
    r, log = _runner(tmp_path / "a", "tests/gpu/test_no_such_module.py")
    assert r.returncode != 0
    assert "the warm step failed or collected nothing" in (log / "gpu-suite.log").read_text()
    r, log = _runner(tmp_path / "b", "tests/gpu/test_drift.py")        # every test skips here
    assert r.returncode != 0 and "no test passed" in (log / "gpu-suite.log").read_text()


def test_the_warm_step_compiles_the_tactic_builds_the_tests_launch():
    """The tactics module lists its builds with the family defaults they need (tactic bits,
    worker warps), and the warm jobs carry them: the warm step compiles what the tests launch,
    not their tactic-free twins."""
    from kernels.device.tactics import tactic_code
    from spec import get_arch
    from tests.gpu import test_cutile_tactics as tt
    from tests.gpu.conftest import _jobs_and_instances
    b = tt.builds(get_arch("h200"))
    jobs, insts = _jobs_and_instances(b["test_tactics_match_fp32_reference"])
    assert not insts
    assert {j.tactic for j in jobs} == {tactic_code(**t) for t in tt.TACTICS}
    assert {(j.tile_m, j.tile_n, j.worker_warps) for j in jobs} == \
        {(tl.m, tl.n, ww) for tl, _, ww in tt.TACTIC_TILES}
    jobs, _ = _jobs_and_instances(b["test_prefetch_matches_fp32_reference_and_its_twin"])
    assert {j.tactic for j in jobs} == {0, tactic_code(prefetch_q=True)}
    assert len(jobs) == 2 * len(tt.PREFETCH_CASES)


def test_timing_instruments_run_last_and_alone():
    """``ALONE``'s tests (they time the GPU) are one last shard, never beside another (on an
    H200, a 1 MiB chase timed beside other shards read 788.7 ns per load: CHANGELOG,
    2026-11-28)."""
    ids = _ids() + ["tests/gpu/test_latency.py::test_chase", "tests/gpu/test_drift.py::test_d[1]"]
    shards = gp.plan(ids, _costs(), 4)
    last = shards[-1]
    assert last.alone and sorted(last.nodeids) == sorted(ids[-2:])
    assert not any(s.alone for s in shards[:-1])
    assert not any(i in s.nodeids for s in shards[:-1] for i in ids[-2:])
    assert [s.index for s in shards] == list(range(len(shards)))
    assert not any(s.alone for s in gp.plan(_ids(), _costs(), 4))

"""The experiments CLI's plan, without running it: ``--list``, ``--seq``, the longseq study's
order twins, and ``--dry-run`` (the plan and its work estimate, nothing written)."""
from __future__ import annotations

import dataclasses
import re

import pytest

from experiments.registry.plans import LONG_S, longseq_plan
from experiments.registry.studies import get_study
from experiments.run import _plan, build_parser
from spec import Backend, ScanOrder, get_arch, known_archs
from spec.schedules import ScheduleKind
from tests.cpu.experiments.cli_helpers import main_cli


def test_list_names_the_studies():
    r = main_cli("--list")
    assert r.returncode == 0
    for study in ("sawtooth", "l1l2", "traffic", "divergence", "active-sms", "ladder", "scaling",
                  "longseq", "reuse"):
        assert study in r.stdout


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path):
    r = main_cli("sawtooth", "--arch", "gb10", "--dry-run", "--out", str(tmp_path / "x"))
    assert r.returncode == 0, r.stderr
    assert "16 cases" in r.stdout and "cutile.sawtooth.static48.m64n64d64.occ1" in r.stdout
    assert "32 MiB = 1.33x the 24 MiB L2" in r.stdout
    assert not (tmp_path / "x").exists()


def test_seq_runs_a_plan_at_several_lengths_each_case_once():
    """``--seq A,B``: the traffic study sweeps S, so at one length its 16 cases are one non-causal
    and one causal case; at two lengths four, in the order the lengths were given."""
    arch = get_arch("h100")
    args = build_parser().parse_args(["traffic", "--arch", "h100", "--seq", "229376,196608"])
    cases = _plan(args, get_study("traffic"), arch)
    assert [(c.problem.S_kv, c.problem.causal) for c in cases] == [
        (229376, False), (229376, True), (196608, False), (196608, True)]
    assert args.seq == (229376, 196608)


@pytest.mark.parametrize("name", known_archs())
def test_longseq_plan_is_order_twins_over_schedules_and_families(name):
    arch = get_arch(name)
    cases = longseq_plan(arch)
    groups = {(c.problem.D, c.problem.causal) for c in cases}
    assert groups == {(64, False), (64, True), (128, False), (128, True)}
    assert len(cases) == 4 * 2 * 3 * 2 == 48
    assert len({c.id for c in cases}) == 48
    for c in cases:
        assert (c.problem.B, c.problem.H, c.problem.S_q, c.problem.S_kv) == (1, 16, LONG_S, LONG_S)
        assert c.panel == f"longseq-d{c.problem.D}-{'causal' if c.problem.causal else 'noncausal'}"
    for backend in (Backend.CUTILE, Backend.CUDA):
        mine = [c for c in cases if c.variant.backend == backend]
        assert len(mine) == 24
        assert {c.variant.schedule.kind for c in mine} == {ScheduleKind.GRID, ScheduleKind.TILE_X,
                                                           ScheduleKind.PERSISTENT}
        assert {c.variant.tiles for c in mine} == {arch.cutile_tiles if backend == Backend.CUTILE
                                                   else arch.cuda_tiles}
    saw = [c for c in cases if c.variant.order == ScanOrder.sawtooth()]
    lin = [c for c in cases if c.variant.order == ScanOrder.linear()]
    assert len(saw) == len(lin) == 24
    for c in saw:   # exactly one linear twin, identical but for the order
        twins = [t for t in lin if t.problem == c.problem and t.panel == c.panel
                 and t.resident == c.resident
                 and dataclasses.replace(t.variant, order=c.variant.order) == c.variant]
        assert len(twins) == 1, c.id
    for c in cases:
        if c.variant.schedule.kind == ScheduleKind.PERSISTENT:
            want = (arch.resident_ctas(arch.cutile_occupancy) if c.variant.backend == Backend.CUTILE
                    else arch.num_sms)
            assert c.variant.schedule.num_ctas == c.resident == want, c.id


def test_longseq_dry_run(tmp_path):
    r = main_cli("longseq", "--arch", "h100", "--dry-run", "--out", str(tmp_path / "x"))
    assert r.returncode == 0, r.stderr
    assert "longseq on h100: 48 cases" in r.stdout
    assert "cutile.sawtooth.static132.m128n128d128" in r.stdout   # P = 132 x occupancy 1
    assert "cuda.linear.tile2.m128n64d64" in r.stdout
    assert not (tmp_path / "x").exists()


def test_dry_run_estimates_the_work():
    from experiments.run import tile_accesses
    from spec import TileGrid, build_trace
    for c in get_study("sawtooth").plan(get_arch("gb10"))[:2]:     # the count is exact
        small = dataclasses.replace(c, problem=dataclasses.replace(c.problem, S_q=3000,
                                                                   S_kv=3000))
        v = small.variant
        trace = build_trace(TileGrid(small.problem, v.tiles), v.schedule, v.order, small.resident)
        assert tile_accesses(small) == trace.n_accesses
    out = {a: " ".join(main_cli("sawtooth", "--arch", a, "--dry-run").stdout.split())
           for a in ("gb10", "b200")}
    acc = {}
    for a, text in out.items():
        m = re.search(r"work: 16 cases, ([\d,.]+) M tile accesses", text)
        acc[a] = float(m.group(1).replace(",", ""))
        assert re.search(r"simulate \(timed model, \d+ MiB L2\): about [\d.]+ (s|min|h) on "
                         r"\d+ thread\(s\), peak memory about [\d.]+ (MiB|GiB)", text), text
    text = " ".join(main_cli("sawtooth", "--arch", "gb10", "--dry-run", "--model",
                        "lockstep").stdout.split())
    assert re.search(r"simulate \(lock-step model, 24 MiB L2\): about [\d.]+ (s|min|h) on \d+ "
                     r"thread\(s\), peak memory about [\d.]+ GiB", text), text
    assert 25 < acc["b200"] / acc["gb10"] < 31          # b200's study is ~28x GB10's

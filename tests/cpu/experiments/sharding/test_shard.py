"""Sharding a measured study over GPUs (experiments.sharding.shard), without a GPU: the jobs run
through submitit's LocalExecutor (real worker processes, pinned with CUDA_VISIBLE_DEVICES) with a
fake measure function that writes deterministic rows the way the real measure path does (resource
and counter rows per case, SDPA peer timing per problem)."""
from __future__ import annotations

import json
import os
import signal
import zlib
from collections import Counter
from pathlib import Path

import pytest

from experiments import run as cli
from experiments.registry.studies import get_study
from experiments.sharding import shard
from spec import get_arch
from spec.records import Row, case_fields, read_csv, write_csv
from tests.conftest import ROOT
from tests.cpu.experiments.sharding.test_devices import H200

FAIL = "FAKE_SHARD_FAIL"       # case-id substring: the shard holding it raises (or is killed)
KILL = "FAKE_SHARD_KILL"


def _value(key: str) -> float:
    return float(zlib.crc32(key.encode()) % 100000)


def fake_rows(cases, *, run: str, study: str, arch: str, timed: bool) -> tuple[list, list, list]:
    """(timing rows, counter rows, repeat rows) a single GPU process would write for ``cases``."""
    def row(problem, variant, metric, value, **kw):
        f = case_fields(problem, variant) if variant is not None else case_fields(problem) | dict(
            variant="sdpa-flash", backend="sdpa-flash", order="", schedule="", occupancy=None,
            tile_m=0, tile_n=0)
        return Row(run=run, study=study, arch=arch, metric=metric, value=value, unit="",
                   source="measured", **f, **kw)
    timing, counters, repeats, problems = [], [], [], {}
    for c in cases:
        problems.setdefault(c.problem, []).append(c)
    for problem, group in problems.items():
        for c in group:
            timing.append(row(problem, c.variant, "registers", _value(c.id + "reg")))
            counters.append(row(problem, c.variant, "lts__t_sectors_srcunit_tex_lookup_miss.sum",
                                _value(c.id), stat="median", lo=_value(c.id) - 1,
                                hi=_value(c.id) + 1))
            repeats += [row(problem, c.variant, "lts__t_sectors_srcunit_tex_lookup_miss.sum",
                            _value(c.id) + i - 1, sample=i) for i in range(3)]
        if timed:      # the peers are timed with the group: only one process may hold it
            for i in range(3):
                timing.append(row(problem, None, "kernel_time_ms",
                                  _value(f"{problem}{i}") / 1e4, sample=i, note="l2=cold"))
    return timing, counters, repeats


def fake_measure(job: shard.ShardJob, work: Path) -> dict:
    """The injected measure function (module level: the worker process imports it)."""
    for var in (KILL, FAIL):
        hit = os.environ.get(var)
        if hit and any(hit in c.id for c in job.cases):
            if var == KILL:
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"fake failure of shard {job.index}")
    tmp = Path(os.environ["TMPDIR"])                   # where ncu would put its lock file
    assert tmp.is_dir() and tmp.name.startswith(f"sawtooth-shard{job.index}-"), tmp
    study = get_study(job.study)
    timing, counters, repeats = fake_rows(job.cases, run=job.run, study=job.study,
                                          arch=job.arch, timed=study.timed)
    write_csv(work / study.rows_file, timing)
    write_csv(work / "counters.csv", counters)
    write_csv(work / "counters_repeats.csv", repeats)
    (work / "ncu_raw.csv").write_text("ID,metric\n0,1\n")     # not a Row file: stays per shard
    return {"source": "measured", "seed": job.args.seed, "failed": {},
            "device": {"gpu": "NVIDIA H200", "uuid": f"fake-{os.environ['CUDA_VISIBLE_DEVICES']}"},
            "consistency_failures": [f"shard {job.index}"],
            "profiling": {"groups": job.args.groups}}


@pytest.fixture
def fake_host(monkeypatch):
    """Three H200s, the fake measure function, measure mode."""
    monkeypatch.setattr(shard, "host_gpus", lambda: list(H200))
    monkeypatch.setattr(shard, "measure_on_this_gpu", fake_measure)
    monkeypatch.setattr(cli, "_has_cuda_gpu", lambda: True)
    monkeypatch.setattr(shard, "POLL_S", 0.05)
    monkeypatch.chdir(ROOT)          # the workers import this module from the repo root
    monkeypatch.delenv(FAIL, raising=False)
    monkeypatch.delenv(KILL, raising=False)


def _key(r: dict) -> tuple:
    return tuple((k, v) for k, v in r.items() if k != "run")


def _single_process(study: str, tmp: Path) -> dict[str, Counter]:
    """What one process measuring every case writes (the reference of the merge)."""
    s, arch = get_study(study), get_arch("h200")
    timing, counters, repeats = fake_rows(s.plan(arch), run="ref", study=study, arch="h200",
                                          timed=s.timed)
    tmp.mkdir()
    write_csv(tmp / s.rows_file, timing)
    write_csv(tmp / "counters.csv", counters)
    write_csv(tmp / "counters_repeats.csv", repeats)
    return {f: Counter(map(_key, read_csv(tmp / f)))
            for f in (s.rows_file, "counters.csv", "counters_repeats.csv")}


def _run(*args: str) -> int:
    return cli.main([*args, "--no-figures"])


# -- pure parts ------------------------------------------------------------------------------------

def test_lpt_balances_a_skewed_list_where_round_robin_does_not():
    from spec import Backend, CtaSchedule, Problem, ScanOrder, Tiles, Variant
    from spec.case import Case
    v = Variant(Backend.CUDA, ScanOrder.linear(), CtaSchedule.persistent(132), Tiles(80, 80))
    cost = {}
    cases = []
    for i, c in enumerate([100, 90, 60, 50, 40, 30, 20, 10, 5, 5]):
        case = Case(Problem(1, 1, 1024 * (i + 1), 64), v, 132, "p")
        cost[case] = c
        cases.append(case)
    shards = shard.shard_plan(cases, 3, timed=False, cost=cost.__getitem__)
    loads = sorted(sum(cost[c] for c in s) for s in shards)
    assert Counter(c for s in shards for c in s) == Counter(cases)
    assert loads == [135, 135, 140]              # total 410: within one small case of 410/3
    rr = sorted(sum(cost[c] for c in cases[k::3]) for k in range(3))
    assert rr[-1] - rr[0] > 3 * (loads[-1] - loads[0])
    order = {c: i for i, c in enumerate(cases)}
    assert all([order[c] for c in s] == sorted(order[c] for c in s) for s in shards)


def test_cost_counts_concurrency_so_l1l2_splits_evenly_over_two_gpus():
    """l1l2: same tiles at P = 1 .. 132 CTAs; the P=1 case alone is about half the time."""
    cases = get_study("l1l2").plan(get_arch("h200"))
    shards = shard.shard_plan(cases, 2, timed=False)
    loads = [sum(map(shard.estimated_cost, s)) for s in shards]
    assert len(shards) == 2 and max(loads) / sum(loads) < 0.55
    one = min(cases, key=lambda c: c.resident)
    assert shard.estimated_cost(one) > 50 * min(map(shard.estimated_cost, cases))


def test_timed_study_keeps_each_problem_on_one_shard():
    cases = get_study("sawtooth").plan(get_arch("h200"))
    shards = shard.shard_plan(cases, 4, timed=True)
    where = {}
    for k, s in enumerate(shards):
        for c in s:
            assert where.setdefault(c.problem, k) == k
    assert len(shards) == 4 and sum(map(len, shards)) == len(cases)


def test_merge_params_keeps_agreement_and_joins_the_rest():
    a = {"seed": 0, "failed": {"x": "nan"}, "consistency_failures": ["v1 m"],
         "device": {"gpu": "NVIDIA H200", "uuid": "u0"}, "profiling": {"groups": "a"}}
    b = {"seed": 0, "failed": {"y": "err"}, "consistency_failures": [],
         "device": {"gpu": "NVIDIA H200", "uuid": "u1"}, "profiling": "failed: ncu crashed"}
    assert shard.merge_params([a, b]) == {
        "seed": 0, "failed": {"x": "nan", "y": "err"}, "consistency_failures": ["v1 m"],
        "device": {"gpu": "NVIDIA H200"},
        "profiling": {"per_shard": [{"groups": "a"}, "failed: ncu crashed"]}}


# -- through the CLI and submitit's LocalExecutor --------------------------------------------------

@pytest.mark.parametrize("study, gpus", [("l1l2", "2"), ("sawtooth", "all")])
def test_merged_run_equals_the_single_process_run(fake_host, tmp_path, study, gpus):
    out = tmp_path / "run"
    assert _run(study, "--arch", "h200", "--gpus", gpus, "--out", str(out)) == 0
    ref = _single_process(study, tmp_path / "ref")
    s = get_study(study)
    assert sorted(p.name for p in out.glob("*.csv")) == sorted(ref)
    for f in ref:
        rows = read_csv(out / f)
        assert {r["run"] for r in rows} == {"run"}
        assert Counter(map(_key, rows)) == ref[f], f
    m = json.loads((out / "manifest.json").read_text())
    p = m["parameters"]
    cases = s.plan(get_arch("h200"))
    assert p["complete"] is True and p["executor"] == "local"
    assert set(p["placement"]) == {c.id for c in cases}
    n = 2 if gpus == "2" else 3
    assert sorted(set(p["placement"].values())) == list(range(n))
    pins = {d["shard"]: d["cuda_visible_devices"] for d in p["devices"]}
    assert {sh["shard"]: sh["cuda_visible_devices"] for sh in p["shards"]} == pins
    assert {sh["shard"]: str(sh["gpu_index"]) for sh in p["shards"]} == pins
    assert {d["uuid"] for d in p["devices"]} == {f"fake-{i}" for i in range(n)}
    assert all((out / sh["stdout"]).exists() for sh in p["shards"])
    locks = [d["ncu_lock"] for d in p["devices"]]       # each shard's ncu has its own lock file
    assert len(set(locks)) == n and all("sawtooth-shard" in x for x in locks)
    assert p["device"] == {"gpu": "NVIDIA H200"}
    assert sorted(p["consistency_failures"]) == [f"shard {k}" for k in range(n)]
    if s.timed:                      # peers beside their cases: one GPU per problem
        by_problem = {}
        for c in cases:
            assert by_problem.setdefault(c.problem, p["placement"][c.id]) == p["placement"][c.id]


@pytest.mark.parametrize("how", [FAIL, pytest.param(KILL, marks=pytest.mark.slow)])
def test_failed_shard_leaves_an_incomplete_run_and_resume_completes_it(fake_host, tmp_path,
                                                                      monkeypatch, capsys, how):
    out = tmp_path / "run"
    monkeypatch.setenv(how, "static1.m80n80d64 b1h1s327680")   # the longest case
    assert _run("l1l2", "--arch", "h200", "--gpus", "2", "--out", str(out)) == 1
    err = capsys.readouterr().err
    inc = tmp_path / "run-incomplete"
    assert not out.exists() and inc.is_dir()
    assert f"--resume {inc}" in err and "INCOMPLETE" in err and "log " in err
    m = json.loads((inc / "manifest.json").read_text())
    p = m["parameters"]
    assert p["complete"] is False
    failed = [sh for sh in p["shards"] if sh["state"] == "failed"]
    assert failed and all((inc / sh["stderr"]).exists() for sh in failed)
    assert failed[0]["error"] == ("RuntimeError: fake failure of shard 0" if how == FAIL else
                                  "the job ended without a result (killed, out of memory or "
                                  "out of time)")
    missing = set(p["missing"])
    assert "cuda.linear.static1.m80n80d64 b1h1s327680d64.fp16.full" in missing
    assert len(missing) == sum(sh["cases"] for sh in failed) < len(p["cases"])
    kept = read_csv(inc / "counters.csv")
    assert kept and {r["run"] for r in kept} == {out.name}     # the name it is published as
    assert (inc / "INCOMPLETE").read_text().strip().endswith(f"--resume {inc}")
    assert len(p["placement"]) + len(missing) == len(p["cases"])

    monkeypatch.delenv(how)
    assert _run("--resume", str(inc), "--gpus", "2") == 0
    assert out.is_dir() and not inc.exists()
    ref = _single_process("l1l2", tmp_path / "ref")
    for f in ref:
        rows = read_csv(out / f)
        assert Counter(map(_key, rows)) == ref[f]
        assert {r["run"] for r in rows} == {"run"}
    p2 = json.loads((out / "manifest.json").read_text())["parameters"]
    assert p2["complete"] is True and p2["attempts"] == 2 and "missing" not in p2
    rerun = {cid for cid, k in p2["placement"].items() if k >= 2}
    assert rerun == missing                           # only the missing cases ran again
    assert all(p2["placement"][c] == p["placement"][c] for c in p["placement"])


def test_gpus_named_by_uuid_are_pinned_by_uuid(fake_host, tmp_path, monkeypatch):
    """CUDA_VISIBLE_DEVICES may list UUIDs; submitit pins indices only, so the job's setup
    exports the UUID."""
    monkeypatch.setattr(shard, "host_gpus", lambda: [
        shard.Gpu(k, "NVIDIA H200", f"GPU-{k}", "h200", pin=f"GPU-{k}abc") for k in range(2)])
    out = tmp_path / "run"
    assert _run("l1l2", "--arch", "h200", "--gpus", "2", "--out", str(out)) == 0
    p = json.loads((out / "manifest.json").read_text())["parameters"]
    assert sorted(d["cuda_visible_devices"] for d in p["devices"]) == ["GPU-0abc", "GPU-1abc"]


@pytest.mark.parametrize("extra", [[], ["--seq", "4096", "--reps", "3", "--no-profile"]])
def test_a_shard_runs_the_plain_command_on_exactly_its_cases(extra):
    """The real measure function runs ``experiments.run`` with a --filter that selects the
    shard's cases and nothing else, and the run's own measure options."""
    study, arch = get_study("sawtooth"), get_arch("h200")
    args = cli.build_parser().parse_args(["sawtooth", "--arch", "h200", "--gpus", "3", *extra])
    cases = cli._plan(args, study, arch)
    for k, part in enumerate(shard.shard_plan(cases, 3, timed=True)):
        job = shard.ShardJob(k, tuple(part), args, "sawtooth", "h200", "x", "/tmp/x")
        inner = cli.build_parser().parse_args(shard.single_gpu_argv(job, Path("/tmp/x/run")))
        assert cli._plan(inner, study, arch) == part
        assert (inner.seq, inner.reps, inner.no_profile, inner.gpus, inner.mode) == \
            (args.seq, args.reps, args.no_profile, None, "measure")


def test_the_real_shard_reports_the_single_gpu_error(tmp_path, monkeypatch, capsys):
    """No fake: the shard runs ``python -m experiments.run ... --mode measure`` on this CPU
    machine, which refuses (no GPU); the run is left incomplete with that line as the cause."""
    monkeypatch.setattr(shard, "host_gpus", lambda: H200[:1])
    monkeypatch.setattr(cli, "_has_cuda_gpu", lambda: True)
    monkeypatch.setattr(shard, "POLL_S", 0.05)
    monkeypatch.chdir(ROOT)
    out = tmp_path / "run"
    assert _run("traffic", "--arch", "h200", "--gpus", "1", "--filter", "s2048d64",
                "--out", str(out)) == 1
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "INCOMPLETE" in err
    p = json.loads((tmp_path / "run-incomplete" / "manifest.json").read_text())["parameters"]
    assert p["shards"][0]["state"] == "failed"
    assert "experiments.run exited 2: error: --mode measure needs a CUDA GPU" in \
        p["shards"][0]["error"]


def test_resume_refuses_a_complete_run_and_case_options(fake_host, tmp_path, capsys):
    out = tmp_path / "run"
    assert _run("l1l2", "--arch", "h200", "--gpus", "1", "--out", str(out)) == 0
    assert _run("--resume", str(out)) == 2
    assert "not an incomplete run" in capsys.readouterr().err
    assert _run("--resume", str(tmp_path / "nothing")) == 2
    assert "no manifest.json there" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--gpus", "0"], "--gpus 0: pass a positive number of GPUs or all"),
    (["--gpus", "foo"], "--gpus foo: pass a positive number"),
    (["--gpus", "9"], "--gpus 9: this host has 3 GPUs; pass --gpus 3 or all"),
    (["--gpus", "2", "--partition", "gpu"], "--partition is a Slurm option"),
    (["--gpus", "2", "--time", "0"], "--time 0 must be a positive number of minutes"),
    (["--gpus", "2", "--reps", "0"], "--reps 0 must be at least 1"),
    (["--gpus", "all", "--executor", "slurm"], None),
])
def test_bad_sharding_input_is_one_line_exit_2_and_no_output(fake_host, tmp_path, capsys, args,
                                                              message):
    out = tmp_path / "run"
    assert _run("l1l2", "--arch", "h200", *args, "--out", str(out)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    if message:
        assert message in err
    assert list(tmp_path.iterdir()) == []


def test_mixed_host_is_refused_before_any_work(fake_host, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(shard, "host_gpus", lambda: H200[:1] + [
        shard.Gpu(1, "NVIDIA H100 80GB HBM3", "GPU-x", "h100")])
    out = tmp_path / "run"
    assert _run("l1l2", "--arch", "h200", "--gpus", "2", "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert "not h200; a study's GPUs must all be the arch it names" in err
    assert list(tmp_path.iterdir()) == []


def test_simulate_mode_refuses_gpus(tmp_path, capsys):
    assert _run("l1l2", "--arch", "h200", "--gpus", "2", "--mode", "simulate",
                "--out", str(tmp_path / "r")) == 2
    assert "simulate mode runs on this CPU" in capsys.readouterr().err


def test_an_interrupted_sharded_run_keeps_its_shards_and_resume_runs_none_again(
        fake_host, tmp_path, monkeypatch, capsys):
    """SIGTERM reaches the coordinator after its shards finished, before the merge is published:
    the finished shards stay in <name>-incomplete and --resume publishes the run from them."""
    real_wait = shard.wait
    submitted = []

    def wait_then_sigterm(subs, console):
        real_wait(subs, console)
        submitted.extend(subs)
        os.kill(os.getpid(), signal.SIGTERM)         # the handler raises Terminated here

    monkeypatch.setattr(shard, "wait", wait_then_sigterm)
    out, inc = tmp_path / "run", tmp_path / "run-incomplete"
    assert _run("l1l2", "--arch", "h200", "--gpus", "2", "--out", str(out)) == 143
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"--resume {inc}" in err and inc.is_dir() and not out.exists()
    assert len(list((inc / shard.SHARDS).glob(f"shard-*/{shard.DONE}"))) == len(submitted) == 2
    monkeypatch.setattr(shard, "wait", real_wait)
    monkeypatch.setattr(shard, "submit", lambda *a, **k: pytest.fail("a shard ran again"))
    assert _run("--resume", str(inc), "--gpus", "2") == 0
    assert out.is_dir() and not inc.exists()
    ref = _single_process("l1l2", tmp_path / "ref")
    for f in ref:
        assert Counter(map(_key, read_csv(out / f))) == ref[f]

"""A measured run stopped mid-phase keeps its finished work and ``--resume`` finishes it.

Measure mode on the CPU: an H100 "present", the GPU steps replaced by a fake measurer whose rows
are a function of the case, the sample and the ncu session only (so an interrupted-and-resumed
run must equal an uninterrupted one row for row). The fake sits at the lowest level that needs a
GPU: ``experiments.measurement.measure.precompile`` and ``check_and_time``, and for ncu the tool
itself (``profiles.ncu.profile`` writes a report, ``read_kernels`` reads it back), so the journal,
the atomic session reports of ``profiles.collect`` and the run directory's life are the real code. A
fault injected into the fake sends the process SIGTERM (the signal path a scheduler takes) or
raises (a crash) in the middle of a phase.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path

import pytest

from spec import get_arch
from spec.records import Metric

ARGS = ["sawtooth", "--arch", "h100", "--mode", "measure", "--no-figures", "--filter", "cuda",
        "--full-protocol"]                              # five ncu sessions


def _value(*key) -> float:
    """A deterministic 'measurement' of ``key``."""
    return int(hashlib.sha256(repr(key).encode()).hexdigest()[:8], 16) / 2**20


class Fake:
    """The GPU steps of a measured run; ``fault = (what, n, how)`` stops the n-th call (from 1)
    of ``what`` (``check`` or ``ncu``): ``how`` is ``"sigterm"`` or ``"crash"``."""

    def __init__(self):
        self.calls = {"precompile": 0, "check": [], "ncu": []}
        self.fault: tuple[str, int, str] | None = None

    def _maybe_stop(self, what: str) -> None:
        if self.fault and self.fault[0] == what and len(self.calls[what]) == self.fault[1]:
            if self.fault[2] == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)   # its handler raises Terminated here
            raise RuntimeError("injected crash")

    def install(self, monkeypatch):
        from experiments import run as run_mod
        from experiments.measurement import measure
        from profiles import collect, ncu
        from profiles.ingest import KernelResult
        monkeypatch.setattr(run_mod, "detect", lambda: get_arch("h100"))
        monkeypatch.setattr(measure, "device_facts", lambda: {"gpu": "fake H100"})

        def precompile(cases):
            self.calls["precompile"] += 1
            return []

        def check_and_time(cases, arch, *, run, study, reps, seed, timed=True, progress=None,
                           families=None):
            self.calls["check"].append([c.id for c in cases])
            self._maybe_stop("check")
            res = measure.Outcome(passed=list(cases))
            for c in cases:
                res.rows.append(measure.case_row(c, c.problem, Metric.MAX_ABS_ERR,
                                                 _value(c.id, "err"), run=run, study=study,
                                                 arch=arch.name))
                for i in range(reps):
                    res.rows.append(measure.case_row(c, c.problem, Metric.KERNEL_TIME_MS,
                                                     _value(c.id, i), run=run, study=study,
                                                     arch=arch.name, sample=i, note="l2=cold"))
            if progress is not None:
                progress(len(cases))
            return res

        def profile(tool, target, report, metrics, *, nvtx_ranges, log=None, **kw):
            assert not report.exists()
            launches = json.loads(Path(target[-1]).read_text())["launches"]
            self.calls["ncu"].append(report.name)
            report.write_text("half a report")          # what a stopped ncu leaves
            self._maybe_stop("ncu")
            report.write_text(json.dumps({"cases": list(nvtx_ranges), "launches": launches,
                                          "metrics": list(metrics), "name": report.name}))
            return ""

        def read_kernels(path, metrics, **kw):
            rep = json.loads(Path(path).read_text())
            session = rep["name"].replace(".partial", "")
            out = []
            for r in range(rep["launches"]):
                for c in rep["cases"]:
                    out.append(KernelResult(len(out), "fake_fmha", c,
                                            {m: (_value(c, session, r, m), "") for m in metrics}))
            return out, "fake"

        monkeypatch.setattr(measure, "precompile", precompile)
        monkeypatch.setattr(measure, "check_and_time", check_and_time)
        monkeypatch.setattr(ncu, "find", lambda: ncu.Ncu(Path("/fake/ncu"), (2025, 3, 1)))
        monkeypatch.setattr(ncu, "profile", profile)
        monkeypatch.setattr(collect, "read_kernels", read_kernels)
        return self


@pytest.fixture
def fake(monkeypatch):
    return Fake().install(monkeypatch)


def _main(*args) -> int:
    from experiments import run as run_mod
    return run_mod.main(list(args))


def _tables(run: Path) -> dict[str, list[str]]:
    """The rows of the run's CSVs, as written (NaN compares equal as text)."""
    return {f: (run / f).read_text().splitlines()
            for f in ("timing.csv", "counters.csv", "counters_repeats.csv")}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, list[str]]:
    """The uninterrupted run's tables."""
    mp = pytest.MonkeyPatch()
    try:
        Fake().install(mp)
        out = tmp_path_factory.mktemp("ref") / "run"
        assert _main(*ARGS, "--out", str(out)) == 0
        return _tables(out)
    finally:
        mp.undo()


@pytest.mark.parametrize("phase, n, how", [("check", 2, "sigterm"), ("ncu", 3, "sigterm"),
                                           ("ncu", 1, "crash")])
def test_a_stopped_run_keeps_its_finished_work_and_resume_finishes_it(fake, reference, tmp_path,
                                                                      capsys, phase, n, how):
    out = tmp_path / "run"
    inc = tmp_path / "run-incomplete"
    fake.fault = (phase, n, how)
    assert _main(*ARGS, "--out", str(out)) == (143 if how == "sigterm" else 1)
    err = capsys.readouterr().err
    line = f"python -m experiments.run --resume {inc}"
    assert line in err.splitlines()[-1]                   # the last line says how to finish it
    assert not out.exists() and inc.is_dir()
    assert not list(tmp_path.glob(".*"))                  # the lock is gone
    assert (inc / "INCOMPLETE").read_text().strip().endswith(line)
    m = json.loads((inc / "manifest.json").read_text())
    assert m["parameters"]["complete"] is False and m["resume"] == line
    from analysis.data import DatasetError, read_run
    with pytest.raises(DatasetError, match="finish it with python -m experiments.run --resume"):
        read_run(inc)                                     # never read as a result
    journal = sorted(p.name for p in (inc / "journal").glob("*.json"))
    problems = len(fake.calls["check"]) if phase == "ncu" else None
    if phase == "check":       # the builds and the first problem are kept; the second is not
        assert journal == ["check-0000.json", "compile.json"]
    else:                      # every problem is kept, and the ncu sessions before the n-th
        assert len(journal) == 1 + problems
        whole = sorted(p.name for p in (inc / "ncu").glob("*.ncu-rep") if ".partial" not in p.name)
        assert len(whole) == n - 1
        assert len(list((inc / "ncu").glob("*.partial.ncu-rep"))) == 1
    first = {k: (list(v) if isinstance(v, list) else v) for k, v in fake.calls.items()}

    fake.fault = None
    fake.calls = {"precompile": 0, "check": [], "ncu": []}
    assert _main("--resume", str(inc)) == 0
    assert out.is_dir() and not inc.exists()
    assert not (out / "journal").exists() and not (out / "INCOMPLETE").exists()
    # nothing finished was measured again
    assert fake.calls["precompile"] == 0
    if phase == "check":
        # the stopped problem and the rest, never the finished first one
        assert fake.calls["check"][0] == first["check"][1]
        assert first["check"][0] not in fake.calls["check"] and len(fake.calls["check"]) == 3
        assert len(fake.calls["ncu"]) == 5
    else:
        assert fake.calls["check"] == []
        # the stopped session and the rest, none that finished
        assert fake.calls["ncu"][0] == first["ncu"][-1] and len(fake.calls["ncu"]) == 5 - n + 1
        assert not set(first["ncu"][:-1]) & set(fake.calls["ncu"])
    got = _tables(out)
    for f, rows in reference.items():                     # row for row
        assert len(got[f]) == len(rows), f
        assert len(rows) > 1
        for a, b in zip(got[f], rows):
            assert a == b, f
    p = json.loads((out / "manifest.json").read_text())["parameters"]
    assert "complete" not in p or p["complete"] is True
    assert p["resumed"]["kept"][0] == "compile"
    assert set(p["phase_seconds"]) == {"compile", "check_and_time", "ncu", "ncu_sessions"}
    assert set(p["estimate_phase_seconds"]) == set(p["phase_seconds"])
    from analysis.data import read_run
    assert read_run(out)


def test_a_run_stopped_before_any_work_finished_leaves_nothing(fake, tmp_path, capsys,
                                                               monkeypatch):
    from experiments.measurement import measure
    monkeypatch.setattr(measure, "precompile",
                        lambda cases: os.kill(os.getpid(), signal.SIGTERM) or [])
    assert _main(*ARGS, "--out", str(tmp_path / "run")) == 143
    assert "no run directory was written" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_new_run_refuses_the_name_of_an_interrupted_one(fake, tmp_path, capsys):
    fake.fault = ("ncu", 1, "sigterm")
    assert _main(*ARGS, "--out", str(tmp_path / "run")) == 143
    capsys.readouterr()
    fake.fault = None
    assert _main(*ARGS, "--out", str(tmp_path / "run")) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "an interrupted run of that name" in err and "--resume" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run-incomplete"]


def test_a_killed_runs_stale_lock_does_not_block_its_resume(fake, tmp_path, capsys):
    """SIGKILL runs no cleanup: the lock stays beside the incomplete directory, naming a process
    that is gone; the resume takes it over."""
    import socket
    import subprocess
    import sys
    fake.fault = ("ncu", 2, "sigterm")
    assert _main(*ARGS, "--out", str(tmp_path / "run")) == 143
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    (tmp_path / ".run.lock").write_text(f"{socket.gethostname()} {dead}\n")
    fake.fault = None
    assert _main("--resume", str(tmp_path / "run-incomplete")) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_journal_refuses_an_entry_recorded_for_other_cases(tmp_path):
    """``Journal.get`` with the piece's case ids: the same ids give the entry back, other ids
    (the plan changed) are a ``JournalMismatch`` naming the entry, no ids skip the check."""
    from experiments.rundirs.journal import Journal, JournalMismatch
    j = Journal(tmp_path)
    j.put("check-0000", {"cases": ["a", "b"], "passed": 2})
    assert j.get("check-0000", ["a", "b"])[0]["passed"] == 2
    for other in (["a"], ["b", "a"], ["a", "b", "c"], []):
        with pytest.raises(JournalMismatch, match="check-0000.json: recorded for cases"):
            j.get("check-0000", other)
    assert j.get("check-0000")[0]["cases"] == ["a", "b"]
    assert j.get("check-0001", ["a"]) is None


def test_resume_after_the_plan_changed_is_refused(fake, tmp_path, capsys):
    """A journal entry whose cases are not the piece's any more (the plan changed between the
    stop and the resume) stops the resume before anything is measured or published: the pieces
    of two plans are never merged."""
    out, inc = tmp_path / "run", tmp_path / "run-incomplete"
    fake.fault = ("check", 2, "sigterm")
    assert _main(*ARGS, "--out", str(out)) == 143
    entry = inc / "journal" / "check-0000.json"
    rec = json.loads(entry.read_text())
    assert rec["cases"]
    rec["cases"] = rec["cases"][:-1] + ["cuda.some.other.case"]
    entry.write_text(json.dumps(rec))
    capsys.readouterr()
    fake.fault = None
    fake.calls = {"precompile": 0, "check": [], "ncu": []}
    assert _main("--resume", str(inc)) == 1
    err = capsys.readouterr().err
    assert "JournalMismatch" in err and "check-0000.json: recorded for cases" in err
    assert fake.calls["check"] == [] and fake.calls["ncu"] == []
    assert not out.exists() and inc.is_dir()

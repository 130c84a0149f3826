"""A real measured run killed in its ncu phase keeps its finished pieces and \
``--resume`` finishes it.

The run is the main study shrunk by ``--filter`` (one problem, its linear and sawtooth cases:
about 80 s on an H100, 70 of them in five ncu sessions). It is sent SIGTERM a few seconds after
its first ncu session's report is whole, so inside the second; then the kept pieces are checked
on disk, the run is resumed, and the resumed run must have measured only what was missing.

As a test (``pytest -m gpu tests/gpu/test_kill_resume.py``) it asserts; as a script it also
writes a log of every step (commands, exit codes, what was on disk, both attempts' phase times)::

    python -m tests.gpu.test_kill_resume --log profiles/<arch>/<name>/kill-resume.log
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILTER = "b1h1s"              # the main study's B=1 problem: its two CUDA cases
GRACE_S = 3.0                 # after the first whole ncu report: inside the second session

pytestmark = pytest.mark.gpu


def _whole_reports(run: Path) -> list[str]:
    return sorted(p.name for p in (run / "ncu").glob("*.ncu-rep") if ".partial" not in p.name)


def kill_and_resume(out: Path, say=print) -> dict:
    """Run, SIGTERM in the ncu phase, check, resume; returns what was found (``say`` logs)."""
    from spec import detect
    arch = detect()
    assert arch is not None, "needs a CUDA GPU"
    inc = out.with_name(out.name + "-incomplete")
    cmd = [sys.executable, "-m", "experiments.run", "sawtooth", "--arch", arch.name,
           "--mode", "measure", "--no-figures", "--filter", FILTER, "--out", str(out)]
    say(f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M:%S} UTC on {arch.marketing_name}")
    say("+ " + " ".join(cmd))
    t0 = time.monotonic()
    with open(out.parent / "first.stdout", "w") as so, open(out.parent / "first.stderr", "w") as se:
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=so, stderr=se,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        while not (inc / "ncu").is_dir() or not _whole_reports(inc):
            assert p.poll() is None, f"the run ended before its first ncu session finished " \
                                     f"(exit {p.returncode})"
            assert time.monotonic() - t0 < 900, "no ncu report within 15 minutes"
            time.sleep(0.2)
        time.sleep(GRACE_S)
        before = _whole_reports(inc)
        say(f"{time.monotonic() - t0:.1f} s: whole ncu reports {before}; sending SIGTERM")
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=300)
    err = (out.parent / "first.stderr").read_text()
    say(f"exit {rc}; last line of stderr: {err.strip().splitlines()[-1]}")
    assert rc in (143, -signal.SIGTERM), err[-2000:]
    assert inc.is_dir() and not out.exists()
    kept_reports = _whole_reports(inc)
    journal = sorted(p.stem for p in (inc / "journal").glob("*.json"))
    partial = sorted(p.name for p in (inc / "ncu").glob("*.partial.ncu-rep"))
    manifest = json.loads((inc / "manifest.json").read_text())
    say(f"kept in {inc.name}: journal {journal}; whole ncu reports {kept_reports}; "
        f"partial {partial}; INCOMPLETE: {(inc / 'INCOMPLETE').read_text().strip()}")
    assert manifest["parameters"]["complete"] is False
    assert "compile" in journal and any(k.startswith("check-") for k in journal)
    assert kept_reports and kept_reports == before
    assert f"--resume {inc}" in err.strip().splitlines()[-1]

    resume = [sys.executable, "-m", "experiments.run", "--resume", str(inc)]
    say("+ " + " ".join(resume))
    t1 = time.monotonic()
    r = subprocess.run(resume, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    say(f"exit {r.returncode} after {time.monotonic() - t1:.1f} s")
    (out.parent / "resume.stdout").write_text(r.stdout)
    (out.parent / "resume.stderr").write_text(r.stderr)
    assert r.returncode == 0, r.stderr[-2000:]
    assert out.is_dir() and not inc.exists()
    params = json.loads((out / "manifest.json").read_text())["parameters"]
    kept = params["resumed"]["kept"]
    say(f"published {out.name}; kept from the first attempt: {kept}")
    say(f"phase seconds (the pieces' own times): {json.dumps(params['phase_seconds'])}")
    say(f"estimates: {json.dumps(params['estimate_phase_seconds'])}")
    assert "compile" in kept and [k for k in kept if k.startswith("check-")]
    assert len([k for k in kept if k.startswith("ncu ")]) == len(kept_reports)
    assert params["profiling"]["sessions_failed"] == 0
    from analysis.data import read_run
    tables = read_run(out)
    say(f"rows: {', '.join(f'{f} {len(rows)}' for f, rows in sorted(tables.items()))}")
    return {"kept": kept, "reports_before_kill": before, "journal": journal}


def test_a_run_killed_in_its_ncu_phase_resumes(tmp_path):
    kill_and_resume(tmp_path / "run")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", type=Path, required=True, help="the log file to write")
    ap.add_argument("--work", type=Path, help="where the run goes (default: beside the log)")
    a = ap.parse_args(argv)
    work = a.work or a.log.parent / "kill-resume-run"
    work.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)
    try:
        kill_and_resume(work / "run", say)
        say("PASS")
        return 0
    except AssertionError as e:
        say(f"FAIL: {e}")
        return 1
    finally:
        a.log.parent.mkdir(parents=True, exist_ok=True)
        a.log.write_text("\n".join(lines) + "\n")
        os.sync()


if __name__ == "__main__":
    sys.exit(main())

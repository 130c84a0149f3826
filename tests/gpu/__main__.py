"""Run the whole GPU suite on one machine: ``python -m tests.gpu`` (from the repository root).

1. **Warm**: one pytest process collects the suite (``tests/gpu`` and the CPU modules that need
   torch, ``EXTRA``) with ``--gpu-warm-only`` (tests/gpu/conftest.py): it writes the collected test
   ids and compiles every build they launch in parallel worker processes on every core, into one
   cuTile cache (``$CUDA_TILE_CACHE_DIR``) and one CuPy cache (``$CUPY_CACHE_DIR``) shared by
   all the processes below; it runs no test.
2. **Shards**: the ids are dealt to ``--shards`` pytest processes by cost (tests/gpu/plan.py:
   measured seconds from a ``costs.json`` beside it where known, else estimates); they run side by
   side on the one GPU with ``SAWTOOTH_GPU_WARMED=1`` (every launch loads its build from the
   caches).
3. **Log**: ``<log-dir>/gpu-suite.log`` holds the plan, the warm step's output, each shard's
   output with its wall time and exit code, and a summary; ``durations.json`` the seconds of
   every test and ``function-costs.json`` the mean seconds per case of each test function (copy
   that to ``costs.json`` in this directory to plan the next run with them);
   ``junit-*.xml``.

The exit code is non-zero when the warm step or any shard failed, a shard collected nothing
(pytest's 5), the shards together did not report exactly the collected tests, or no test
passed (every one skipped: no GPU).

    python -m tests.gpu [--shards N] [--log-dir DIR] [--timeout S] [--targets PATH...]
                        [-- PYTEST-ARGS...]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tests.gpu.plan import function_costs, junit_results, load_costs, plan, split_id

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ["tests/gpu"]
EXTRA = ["tests/cpu/kernels/test_backward_wiring.py"]   # CPU tests that need torch
COSTS = ROOT / "tests" / "gpu" / "costs.json"


def _args(argv):
    p = argparse.ArgumentParser(prog="python -m tests.gpu", description=__doc__.split("\n")[0])
    p.add_argument("--shards", type=int, default=min(8, max(1, (os.cpu_count() or 2) // 2)),
                   help="pytest processes side by side (default: half the cores, at most 8)")
    p.add_argument("--log-dir", type=Path, default=None,
                   help="where the combined log goes (default build/gpu-tests/<UTC time>)")
    p.add_argument("--cache-dir", type=Path, default=ROOT / "build" / "gpu-tests" / "cache",
                   help="the shared compile caches, unless CUDA_TILE_CACHE_DIR / CUPY_CACHE_DIR "
                        "are set")
    p.add_argument("--timeout", type=float, default=900.0,
                   help="seconds after which a step is stopped and counted as failed")
    p.add_argument("--costs", type=Path, default=COSTS, help="measured seconds per test id")
    p.add_argument("--plan-only", action="store_true", help="collect, print the plan, stop")
    p.add_argument("--targets", nargs="+", default=TARGETS + EXTRA,
                   help="test paths (default: tests/gpu and the CPU modules that need torch)")
    p.add_argument("pytest_args", nargs="*", help="after --: passed to every pytest process")
    return p.parse_args(argv)


@dataclass
class Step:
    """One pytest process of the run: its output goes to ``log``; ``rc`` and ``wall`` (seconds
    from its start to its own end, not to when the runner looked) once it ended."""
    log: Path
    proc: subprocess.Popen
    out: IO
    began: float
    rc: int | None = None
    wall: float = 0.0


def _start(cmd, env, log: Path) -> Step:
    """Start ``cmd`` in its own process group (so a stop takes its workers too)."""
    f = open(log, "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                            start_new_session=True)
    return Step(log, proc, f, time.perf_counter())


def _wait(steps: list[Step], timeout: float) -> None:
    """Wait for every step, noting each one's end as it happens; a step still running
    ``timeout`` seconds after the first began is stopped with its group (exit code 124)."""
    if not steps:
        return
    deadline = min(s.began for s in steps) + timeout
    while any(s.rc is None for s in steps):
        for s in steps:
            if s.rc is None and s.proc.poll() is not None:
                s.rc, s.wall = s.proc.returncode, time.perf_counter() - s.began
        if any(s.rc is None for s in steps) and time.perf_counter() > deadline:
            for s in steps:
                if s.rc is None:
                    os.killpg(s.proc.pid, signal.SIGKILL)
                    s.proc.wait()
                    s.rc, s.wall = 124, time.perf_counter() - s.began
                    s.out.write(f"\n(stopped after {timeout:.0f} s)\n")
        time.sleep(0.2)
    for s in steps:
        s.out.close()


def main(argv=None) -> int:
    a = _args(sys.argv[1:] if argv is None else argv)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    logdir = (a.log_dir or ROOT / "build" / "gpu-tests" / stamp).resolve()
    logdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("CUDA_TILE_CACHE_DIR", str((a.cache_dir / "cutile").resolve()))
    env.setdefault("CUPY_CACHE_DIR", str((a.cache_dir / "cupy").resolve()))
    for k in ("CUDA_TILE_CACHE_DIR", "CUPY_CACHE_DIR"):
        Path(env[k]).mkdir(parents=True, exist_ok=True)
    env.pop("SAWTOOTH_GPU_WARMED", None)
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *a.pytest_args]
    lines: list[str] = []

    def say(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    t_all = time.perf_counter()
    say(f"GPU suite: {' '.join(a.targets)}; caches {env['CUDA_TILE_CACHE_DIR']}, "
        f"{env['CUPY_CACHE_DIR']}; log {logdir}")
    ids_file = logdir / "collected.txt"
    warm_cmd = [*pytest, *a.targets, "--gpu-warm-only", f"--gpu-nodeids={ids_file}"]
    if a.plan_only:
        warm_cmd = [*pytest, *a.targets, "--collect-only"]
    warm = _start(warm_cmd, env, logdir / "warm.log")
    _wait([warm], a.timeout)
    rc_warm, t_warm = warm.rc, warm.wall
    warm_text = (logdir / "warm.log").read_text(errors="replace")
    if a.plan_only:
        ids = [ln for ln in warm_text.splitlines() if "::" in ln and not ln.startswith(" ")]
        ids_file.write_text("".join(i + "\n" for i in ids))
    ids = [ln for ln in ids_file.read_text().splitlines() if ln] if ids_file.exists() else []
    say(f"warm: exit {rc_warm}, {t_warm:.0f} s, {len(ids)} tests collected")
    costs = load_costs(a.costs)
    shards = plan(ids, costs, a.shards)
    known = sum(1 for i in ids if i in costs or "::".join(split_id(i)) in costs)
    say(f"plan: {len(shards)} shards, costs measured for {known} of {len(ids)} tests "
        f"({a.costs.name if known else 'estimates only'})")
    for s in shards:
        say(f"  shard {s.index}{' (alone, last)' if s.alone else ''}: {len(s.nodeids):4d} tests, "
            f"predicted {s.cost:6.0f} s: "
            + ", ".join(sorted({Path(u.path).stem for u in s.units})))
    if a.plan_only or rc_warm != 0 or not ids:
        if rc_warm != 0 or not ids:
            say("FAILED: the warm step failed or collected nothing; see warm.log:")
            say(warm_text[-4000:])
        (logdir / "gpu-suite.log").write_text("\n".join(lines) + "\n")
        return 0 if a.plan_only and ids else 1

    env["SAWTOOTH_GPU_WARMED"] = "1"
    t0 = time.perf_counter()

    def start(s) -> Step:
        (logdir / f"shard-{s.index}.args").write_text("".join(x + "\n" for x in s.args))
        return _start([*pytest, f"--junitxml={logdir / f'junit-{s.index}.xml'}", *s.args], env,
                      logdir / f"shard-{s.index}.log")

    steps = {s.index: start(s) for s in shards if not s.alone}
    _wait(list(steps.values()), a.timeout)                # side by side on the GPU
    for s in shards:
        if s.alone:                                       # then each by itself
            steps[s.index] = start(s)
            _wait([steps[s.index]], a.timeout)
    results = {i: (st.rc, st.wall) for i, st in steps.items()}

    outcomes: dict[str, tuple[str, float]] = {}
    say()
    say("== warm step (warm.log) ==")
    say(warm_text.rstrip()[-6000:])
    failed_shards = []
    for s in shards:
        rc, wall = results[s.index]
        xml = logdir / f"junit-{s.index}.xml"
        got = junit_results(xml.read_text()) if xml.exists() else {}
        outcomes.update(got)
        text = (logdir / f"shard-{s.index}.log").read_text(errors="replace")
        say()
        say(f"== shard {s.index}: exit {rc}, {wall:.0f} s wall (predicted {s.cost:.0f} s), "
            f"{len(got)} of {len(s.nodeids)} tests reported ==")
        say(text.rstrip())
        if rc != 0 or len(got) != len(s.nodeids):
            failed_shards.append(s.index)
    durations = {k: round(v[1], 2) for k, v in sorted(outcomes.items())}
    (logdir / "durations.json").write_text(json.dumps(durations, indent=0) + "\n")
    (logdir / "function-costs.json").write_text(json.dumps(function_costs(durations),
                                                           indent=0) + "\n")
    counts = {o: sum(1 for v in outcomes.values() if v[0] == o)
              for o in ("passed", "failed", "error", "skipped")}
    missing = sorted(set(ids) - set(outcomes))
    say()
    say("== summary ==")
    for s in shards:
        rc, wall = results[s.index]
        say(f"shard {s.index}: exit {rc}, {wall:5.0f} s, {len(s.nodeids)} tests")
    say(f"warm {t_warm:.0f} s; shards {time.perf_counter() - t0:.0f} s; total "
        f"{time.perf_counter() - t_all:.0f} s")
    say(f"{counts['passed']} passed, {counts['failed']} failed, {counts['error']} errors, "
        f"{counts['skipped']} skipped of {len(ids)} collected")
    if missing:
        say(f"not reported by any shard ({len(missing)}): " + ", ".join(missing[:20]))
    if not counts["passed"]:
        say("no test passed: every test skipped (no GPU?) or none ran")
    ok = (not failed_shards and not missing and counts["failed"] == counts["error"] == 0
          and counts["passed"] > 0)
    say("GPU suite: " + ("PASSED" if ok else f"FAILED (shards {failed_shards or 'ok'})"))
    (logdir / "gpu-suite.log").write_text("\n".join(lines) + "\n")
    print(f"log: {logdir / 'gpu-suite.log'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

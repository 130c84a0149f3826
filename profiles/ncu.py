"""Running Nsight Compute: find it, check it can read counters, profile a target, export CSV.

Clock control defaults to ``none``: the lent GPUs' clocks are not ours to lock, and the setting is
recorded with every run. Cache control defaults to ``all`` (ncu flushes the caches before each
replay pass), so every variant starts from a cold L2 and the counters of one launch are comparable.

Two kinds of failure. :class:`NcuError` is a setup problem that no retry fixes (ncu missing or
too old, no permission to read counters, a metric this GPU or ncu does not have): its message is
one line naming the fix, and the CLI turns it into exit code 2. :class:`NcuRunFailed` (a subclass)
is one profiling session that failed (the target crashed, ncu timed out): the repeated collector
records it as a failed repeat and goes on.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

MIN_VERSION = (2023, 1)
PERMISSION_HELP = (
    "ncu cannot read GPU performance counters (ERR_NVGPUCTRPERM). Run as root, or allow "
    "profiling for all users: add 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' to "
    "/etc/modprobe.d/ and reload the driver (https://developer.nvidia.com/ERR_NVGPUCTRPERM)")


class NcuError(RuntimeError):
    """ncu is missing, too old, not permitted to read counters, or failed; the message says how
    to fix it."""


class NcuRunFailed(NcuError):
    """One ncu session failed (target error, crash, timeout): recorded, not fatal, when repeated."""


UNKNOWN_METRIC = (re.compile(r"Failed to find metrics?(?: regex)?:?\s+'?([\w.]+)"),
                  re.compile(r"[Mm]etric '?([\w.]+?)'? (?:was )?(?:not found|could not be found|"
                             r"is not (?:available|supported|valid)|does not exist)"))


@dataclass(frozen=True)
class Ncu:
    path: Path
    version: tuple[int, ...]
    clock_control: str = "none"
    cache_control: str = "all"

    @property
    def version_str(self) -> str:
        return ".".join(map(str, self.version))

    def settings(self) -> dict:
        return {"ncu": str(self.path), "ncu_version": self.version_str,
                "clock_control": self.clock_control, "cache_control": self.cache_control}


def _candidates() -> list[str]:
    found = [os.environ.get("NCU", ""), shutil.which("ncu") or ""]
    found += sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)
    found += ["/usr/local/cuda/bin/ncu"]
    return [c for c in found if c and os.access(c, os.X_OK)]


def parse_version(text: str) -> tuple[int, ...]:
    m = re.search(r"Version (\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        raise NcuError(f"could not read the ncu version from {text.strip()[:200]!r}")
    return tuple(int(g) for g in m.groups() if g is not None)


def find(clock_control: str = "none", cache_control: str = "all") -> Ncu:
    cands = _candidates()
    if not cands:
        raise NcuError("ncu (Nsight Compute) was not found on PATH, in /opt/nvidia/nsight-compute "
                       "or /usr/local/cuda/bin; install Nsight Compute >= "
                       f"{MIN_VERSION[0]}.{MIN_VERSION[1]} or set NCU=/path/to/ncu")
    path = Path(cands[0])
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
    version = parse_version(out.stdout + out.stderr)
    if version[:2] < MIN_VERSION:
        raise NcuError(f"{path} is Nsight Compute {'.'.join(map(str, version))}; the metric names "
                       f"used here need >= {MIN_VERSION[0]}.{MIN_VERSION[1]}: install a newer one "
                       "or point NCU at it")
    return Ncu(path, version, clock_control, cache_control)


def check_output(text: str) -> None:
    """Raise for the failures ncu reports in its output rather than its exit code: NcuError for
    setup problems (permission, unknown metric), NcuRunFailed for any other ``==ERROR==``."""
    if "ERR_NVGPUCTRPERM" in text:
        raise NcuError(PERMISSION_HELP)
    for pattern in UNKNOWN_METRIC:
        m = pattern.search(text)
        if m:
            raise NcuError(f"ncu does not know metric {m.group(1)} on this GPU: check "
                           f"`ncu --query-metrics --chip <chip> | grep {m.group(1).split('.')[0]}` "
                           "and drop or rename it in profiles/metrics.py")
    m = re.search(r"==ERROR== (.*)", text)
    if m and "No kernels were profiled" not in m.group(1):
        raise NcuRunFailed(f"ncu failed: {m.group(1).strip()}")


def command(ncu: Ncu, target: list[str], report: Path, metrics: tuple[str, ...], *,
            nvtx_ranges: list[str], replay_mode: str = "kernel",
            extra: tuple[str, ...] = ()) -> list[str]:
    """The ncu command line (application replay matches kernels by name and grid size)."""
    if replay_mode not in ("kernel", "application"):
        raise ValueError(f"replay mode {replay_mode!r}: use kernel or application")
    replay = ["--replay-mode", replay_mode]
    if replay_mode == "application":
        replay += ["--app-replay-match", "grid"]
    return [str(ncu.path), "--clock-control", ncu.clock_control,
            "--cache-control", ncu.cache_control, *replay, "--metrics", ",".join(metrics),
            "--nvtx", *[a for r in nvtx_ranges for a in ("--nvtx-include", f"{r}/")],
            *extra, "--export", str(report.with_suffix("")), *target]


def profile(ncu: Ncu, target: list[str], report: Path, metrics: tuple[str, ...], *,
            nvtx_ranges: list[str], log: Path | None = None, env: dict | None = None,
            timeout: int = 3600, replay_mode: str = "kernel",
            extra: tuple[str, ...] = ()) -> str:
    """Profile the kernels ``target`` launches inside the NVTX push/pop ranges ``nvtx_ranges``;
    writes ``report`` (.ncu-rep, never overwritten) and returns ncu's console output."""
    if report.exists():
        raise NcuError(f"report {report} exists; reports are never overwritten")
    cmd = command(ncu, target, report, metrics, nvtx_ranges=nvtx_ranges,
                  replay_mode=replay_mode, extra=extra)
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                             env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired as e:
        text = _text(e.stdout) + _text(e.stderr)
        if log is not None:
            log.write_text(text[-50000:])
        raise NcuRunFailed(f"ncu did not finish within {timeout} s") from None
    text = run.stdout + run.stderr
    if log is not None:
        log.write_text(text[-50000:])
    check_output(text)
    if run.returncode != 0:
        raise NcuRunFailed(f"ncu exited with {run.returncode}; last output: {text[-300:]!r}")
    return text


def _text(b: bytes | str | None) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def export_raw_csv(ncu: Ncu, report: Path) -> str:
    """The report's raw page as CSV with base units (sectors, bytes), parsed by column name."""
    run = subprocess.run([str(ncu.path), "--import", str(report), "--csv", "--page", "raw",
                          "--print-units", "base"], capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise NcuError(f"ncu --import {report} failed: {(run.stdout + run.stderr)[-1000:]}")
    return run.stdout

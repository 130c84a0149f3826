"""Running Nsight Compute: find it, check it can read counters, profile a target, export CSV.

Clock control defaults to ``none``: the lent GPUs' clocks are not ours to lock, and the setting is
recorded with every run. Cache control defaults to ``all`` (ncu flushes the caches before each
replay pass), so every variant starts from a cold L2 and the counters of one launch are comparable.
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
    """Raise NcuError for the failures ncu reports in its output rather than its exit code."""
    if "ERR_NVGPUCTRPERM" in text:
        raise NcuError(PERMISSION_HELP)
    m = re.search(r"==ERROR== (.*)", text)
    if m and "No kernels were profiled" not in m.group(1):
        raise NcuError(f"ncu failed: {m.group(1).strip()}")


def profile(ncu: Ncu, target: list[str], report: Path, metrics: tuple[str, ...], *,
            nvtx_ranges: list[str], log: Path | None = None, env: dict | None = None,
            timeout: int = 3600) -> str:
    """Profile the kernels ``target`` launches inside the NVTX push/pop ranges ``nvtx_ranges``;
    writes ``report`` (.ncu-rep, never overwritten) and returns ncu's console output."""
    if report.exists():
        raise NcuError(f"report {report} exists; reports are never overwritten")
    cmd = [str(ncu.path), "--clock-control", ncu.clock_control,
           "--cache-control", ncu.cache_control, "--metrics", ",".join(metrics),
           "--nvtx", *[a for r in nvtx_ranges for a in ("--nvtx-include", f"{r}/")],
           "--export", str(report.with_suffix("")), *target]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **(env or {})})
    text = run.stdout + run.stderr
    if log is not None:
        log.write_text(text[-50000:])
    check_output(text)
    if run.returncode != 0:
        raise NcuError(f"ncu exited with {run.returncode}; last output:\n{text[-2000:]}")
    return text


def export_raw_csv(ncu: Ncu, report: Path) -> str:
    """The report's raw page as CSV with base units (sectors, bytes), parsed by column name."""
    run = subprocess.run([str(ncu.path), "--import", str(report), "--csv", "--page", "raw",
                          "--print-units", "base"], capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise NcuError(f"ncu --import {report} failed: {(run.stdout + run.stderr)[-1000:]}")
    return run.stdout

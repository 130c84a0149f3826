"""What the ncu tests share: the committed raw-page export of one H100 run and the cases it
measured, a fake ``ncu`` executable that prints ncu's messages, and the lookup of one row."""
from __future__ import annotations

import stat
from pathlib import Path

from profiles import ncu
from spec import Backend, CtaSchedule, Problem, ScanOrder, Tiles, Variant
from spec.case import Case
from spec.records import read_bytes
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures"
RAW_CSV = FIXTURES / "ncu_raw_h100.csv.xz"      # stored compressed (spec.records.read_bytes)


def fixture_cases():
    """The four cases the fixture's kernels ran, as the plan of that run named them."""
    prob = Problem(B=8, H=1, S_q=16384, D=64)
    p132 = CtaSchedule.persistent(132)
    return [Case(prob, Variant(backend, order, p132, tiles), 132, "fixture")
            for backend, tiles in ((Backend.CUTILE, Tiles(64, 64)), (Backend.CUDA, Tiles(80, 80)))
            for order in (ScanOrder.linear(), ScanOrder.sawtooth())]


def pick(rows, case, metric, group=None, stat="median", sample=None):
    got = [r for r in rows if r.variant == case.variant.id(case.problem) and r.metric == metric
           and (group is None or r.group == group) and r.stat == stat
           and (sample is None or r.sample == sample)]
    assert len(got) == 1, (metric, group, stat, sample, len(got))
    return got[0]


def fake_ncu(tmp_path: Path, body: str) -> ncu.Ncu:
    """An executable named ncu: ``--import`` prints the committed raw export; a profiling call
    runs ``body`` (shell), then creates the --export report file unless body exited."""
    exe = tmp_path / "bin" / "ncu"
    exe.parent.mkdir(exist_ok=True)
    raw = tmp_path / "bin" / "raw.csv"
    raw.write_bytes(read_bytes(RAW_CSV))
    exe.write_text(f"""#!/bin/sh
if [ "$1" = "--version" ]; then echo "Version 2025.3.1.0 (build 1)"; exit 0; fi
if [ "$1" = "--import" ]; then cat "{raw}"; exit 0; fi
n=$(cat "{tmp_path}/calls" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "{tmp_path}/calls"
{body}
while [ $# -gt 0 ]; do if [ "$1" = "--export" ]; then touch "$2.ncu-rep"; fi; shift; done
echo "==PROF== Disconnected"
""")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return ncu.Ncu(exe, (2025, 3, 1))

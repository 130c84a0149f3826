"""The misscost study on the CPU: its plan (cases, unique ids, linear / sawtooth twins identical
but for the order, every depth at every S x causal, S below and above the L2), the streamer's
dry-run text and bad-input exit, and (with nvcc) the streamer kernel compiling for sm_90."""
from __future__ import annotations

import subprocess
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from cuda_baseline.source import nvcc_path
from experiments.streamer import LEVELS, STREAM_SOURCE, main, misscost_ctas, plan_lines
from experiments.studies import MISSCOST_STAGES, get_study, kv_bytes_per_head, misscost_plan
from spec import get_arch
from spec.orders import OrderKind
from spec.variant import Backend
from tests.conftest import require_toolchain

H100 = get_arch("h100")


def test_plan_cases_and_unique_ids():
    cases = misscost_plan(H100)
    assert len(cases) == len(MISSCOST_STAGES) * 2 * 2 * 2        # depth x S x causal x order
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids)
    assert {c.variant.pipeline_stages for c in cases} == {1, 2, 3}
    assert sum(c.id.split()[0].endswith(".st1") for c in cases) == 8
    assert not any(".st2" in i for i in ids)                       # the default stays unnamed
    assert all(c.variant.backend == Backend.CUDA and c.variant.schedule.num_ctas == 96
               and c.resident == 96 for c in cases)
    assert misscost_ctas(H100) == 96 and misscost_ctas(get_arch("gb10")) == 32
    kv = sorted({kv_bytes_per_head(c.problem) / H100.l2_bytes for c in cases})
    assert len(kv) == 2 and kv[0] < 1 < kv[1]                       # below and above the L2


def test_twins_identical_but_for_the_order():
    cases = misscost_plan(H100)
    by_key = Counter()
    for c in cases:
        if c.variant.order.kind == OrderKind.SAWTOOTH:
            twin = replace(c, variant=replace(c.variant, order=type(c.variant.order)()))
            assert twin in cases, f"no linear twin for {c.id}"
        by_key[(c.problem, c.variant.pipeline_stages, c.panel)] += 1
    assert set(by_key.values()) == {2}


def test_study_registered_with_its_hook():
    s = get_study("misscost")
    assert s.plan is misscost_plan and s.measure is not None and s.reps >= 3


def test_streamer_dry_run_explains_the_plan(capsys):
    lines = plan_lines(H100, 96)
    assert "96 SMs" in lines[0] and "36" in lines[0]
    assert sum(line.strip().startswith("level") for line in lines) == len(LEVELS)
    assert main(["--arch", "h100"]) == 0
    assert "streamer" in capsys.readouterr().out
    assert main(["--arch", "nope"]) == 2


@pytest.mark.compile
def test_streamer_kernel_compiles_for_sm90():
    nvcc = nvcc_path()
    require_toolchain(nvcc is not None, "nvcc (CUDA 13.0)")
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / "stream.cu"
        cu.write_text(STREAM_SOURCE)
        r = subprocess.run([nvcc, "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o",
                            str(Path(tmp) / "s.cubin"), str(cu)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 bytes spill stores" in r.stdout + r.stderr

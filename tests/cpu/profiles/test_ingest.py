"""ncu export ingestion on a committed fixture: a real raw-page export from one H100 run of
``python -m experiments.run sawtooth --arch h100 --seq 16384 --filter "static|cuda"`` (2026-11-21),
trimmed to its first four kernels."""
from __future__ import annotations

import math

import pytest

from profiles import metrics, ncu
from profiles.ingest import IngestError, innermost_range, parse_raw_csv, to_rows
from spec.records import read_bytes
from tests.cpu.profiles.ncu_helpers import RAW_CSV, fixture_cases

FIXTURE = RAW_CSV


def test_parses_kernels_metrics_units_and_nvtx_ranges():
    ks = parse_raw_csv(read_bytes(FIXTURE).decode(), metrics.HOPPER)
    assert [k.index for k in ks] == [0, 1, 2, 3]
    assert ks[0].kernel.startswith("fmha_fwd") and "flash_fwd" in ks[2].kernel
    assert ks[2].nvtx_range == "cuda.linear.static132.m80n80d64 b8h1s16384d64.fp16.full"
    for k in ks:
        assert set(k.values) == set(metrics.HOPPER)
        assert all(not math.isnan(v) for v, _ in k.values.values())
        v, unit = k.values["lts__t_sectors_srcunit_tex_lookup_miss.sum"]
        assert unit == "sector" and v > 0
        hits = k.values["lts__t_sectors_srcunit_tex_lookup_hit.sum"][0]
        # lookups cover most, not all, tex sectors (measured: 96% for the CUDA kernel)
        assert hits + v == pytest.approx(k.values["lts__t_sectors_srcunit_tex.sum"][0], rel=0.1)
    # cuTile loads through TMA on Hopper: L1 sees nothing; the CUDA kernel's loads go through L1
    assert ks[0].values["l1tex__t_sectors.sum"][0] == 0
    assert ks[2].values["l1tex__t_sectors.sum"][0] > 0


def test_rows_pair_kernels_with_cases_by_nvtx_range_not_position():
    ks = parse_raw_csv(read_bytes(FIXTURE).decode(), metrics.HOPPER)
    cases = fixture_cases()
    rows = to_rows(list(reversed(ks)), cases, run="r", study="sawtooth", arch="h100")
    assert len(rows) == 4 * len(metrics.HOPPER) and {r.source for r in rows} == {"measured"}
    miss = {r.variant + str(r.B): r.value for r in rows
            if r.metric == "lts__t_sectors_srcunit_tex_lookup_miss.sum"}
    assert miss["cuda.linear.static132.m80n80d64" + "8"] == ks[2].values[
        "lts__t_sectors_srcunit_tex_lookup_miss.sum"][0]


def test_mismatches_are_errors_that_say_what_happened():
    ks = parse_raw_csv(read_bytes(FIXTURE).decode(), metrics.HOPPER)
    cases = fixture_cases()
    with pytest.raises(IngestError, match="no profiled kernel for 1 case"):
        to_rows(ks[:3], cases, run="r", study="s", arch="h100")
    with pytest.raises(IngestError, match="not a case of this plan"):
        to_rows(ks, cases[:3], run="r", study="s", arch="h100")
    with pytest.raises(IngestError, match="lacks metric column"):
        parse_raw_csv(read_bytes(FIXTURE).decode(), ("lts__no_such_metric.sum",))
    with pytest.raises(IngestError, match="not an ncu raw-page CSV"):
        parse_raw_csv("a,b\n1,2\n", metrics.PAPER)


def test_innermost_range():
    ranges = '7  "<default domain>:outer:none" "<default domain>:inner:none"'
    assert innermost_range(ranges) == "inner"
    assert innermost_range("") is None


def test_ncu_errors_name_the_fix(tmp_path, monkeypatch):
    with pytest.raises(ncu.NcuError, match="ERR_NVGPUCTRPERM"):
        ncu.check_output("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission")
    with pytest.raises(ncu.NcuError, match="does not know metric lts__x.sum.*--query-metrics"):
        ncu.check_output("==ERROR== Failed to find metric lts__x.sum")
    with pytest.raises(ncu.NcuRunFailed, match="returned an error code"):
        ncu.check_output("==ERROR== The application returned an error code (1).")
    assert ncu.parse_version("NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.1.0 "
                             "(build 36398880)") == (2025, 3, 1)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ncu, "_candidates", lambda: [])
    with pytest.raises(ncu.NcuError, match="was not found .* set NCU="):
        ncu.find()
    old = tmp_path / "ncu"
    old.write_text("#!/bin/sh\necho 'Version 2019.5.0 (build 1)'\n")
    old.chmod(0o755)
    monkeypatch.setattr(ncu, "_candidates", lambda: [str(old)])
    with pytest.raises(ncu.NcuError, match="Nsight Compute 2019.5.0.*>= 2023.1"):
        ncu.find()
    rep = tmp_path / "r.ncu-rep"
    rep.write_text("x")
    with pytest.raises(ncu.NcuError, match="never overwritten"):
        ncu.profile(ncu.Ncu(old, (2025, 3)), ["true"], rep, metrics.PAPER, nvtx_ranges=["a"])

"""The ``ncu_report`` reader: on the committed real H100 report (the same values as its CSV
export, the multipass and fill-estimate flags of its rows, the isolated reader), on a fake
module walking the documented ranges and actions, the module found beside the ``ncu`` on
PATH, and the CSV fallback without it."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from profiles import counters, metrics, report
from profiles.counters import Observation
from profiles.ingest import IngestError, parse_raw_csv
from spec import Backend, CtaSchedule, Problem, ScanOrder, Tiles, Variant
from spec.case import Case
from spec.records import Metric, read_bytes
from tests.cpu.profiles.ncu_helpers import FIXTURES, RAW_CSV, pick

SMALL = FIXTURES / "ncu_small_h100"       # .ncu-rep and its raw-page CSV export (see .md), .xz


@pytest.fixture(scope="module")
def small_rep(tmp_path_factory) -> Path:
    """The committed report decompressed (ncu_report opens a plain .ncu-rep file)."""
    p = tmp_path_factory.mktemp("ncu") / "ncu_small_h100.ncu-rep"
    p.write_bytes(read_bytes(FIXTURES / "ncu_small_h100.ncu-rep.xz"))
    return p


SMALL_METRICS = (Metric.L2_TEX_SECTORS, Metric.L2_TEX_HITS, Metric.L2_TEX_MISSES,
                 Metric.L2_FABRIC_SECTORS, Metric.L2_FABRIC_HITS, Metric.L2_FABRIC_MISSES,
                 Metric.DRAM_READ_BYTES, Metric.REPLAY_PASSES)


def test_both_readers_agree_on_a_real_h100_report(small_rep):
    pytest.importorskip("ncu_report")
    rep = report.read_report(small_rep, SMALL_METRICS)
    exp = parse_raw_csv(read_bytes(FIXTURES / "ncu_small_h100.csv.xz").decode(), SMALL_METRICS)
    assert len(rep) == len(exp) == 2
    for a, b in zip(rep, exp):
        assert (a.index, a.nvtx_range, a.values) == (b.index, b.nvtx_range, b.values)
        assert b.kernel.startswith(f"void {a.kernel}<")     # function name vs full signature
    assert [k.nvtx_range.split(".")[1] for k in rep] == ["linear", "sawtooth"]
    # the values the fixture's note quotes (linear case)
    assert rep[0].values[Metric.L2_TEX_MISSES] == (527808.0, "sector")
    assert rep[0].values[Metric.DRAM_READ_BYTES] == (12602880.0, "byte")
    assert rep[0].values[Metric.REPLAY_PASSES] == (4.0, "pass")


def test_real_report_rows_flag_the_multipass_session_and_the_fill_estimate(small_rep):
    """One session with tex, fabric and DRAM metrics together (4 passes): split into the groups'
    views, the rows carry multipass=4, and the fill estimate (tex misses minus fabric hits) is
    0.70x the DRAM fills of the linear case (fills / estimate 1.42), so its check is flagged
    inconsistent."""
    pytest.importorskip("ncu_report")
    ks = report.read_report(small_rep, SMALL_METRICS)
    prob = Problem(B=1, H=1, S_q=32768, D=64)
    cases = [Case(prob, Variant(Backend.CUDA, o, CtaSchedule.persistent(132), Tiles(80, 80)), 132,
                  "fixture") for o in (ScanOrder.linear(), ScanOrder.sawtooth())]
    assert [c.id for c in cases] == [k.nvtx_range for k in ks]
    groups = metrics.get_groups(("dram", "tex", "fabric"))
    observations = [Observation(k.nvtx_range, g.name, 0,
                                {m: k.values[m] for m in g.collect}, kernel=k.kernel)
                    for k in ks for g in groups]
    rows = counters.rows(observations, cases, groups, repeats=1, run="r", study="s",
                         arch="h100", sector_bytes=32)
    lin = cases[0]
    fills = pick(rows, lin, Metric.DRAM_FILL_SECTORS, "dram").value
    assert fills == 12602880 / 32
    est = pick(rows, lin, Metric.DRAM_FILL_ESTIMATE_SECTORS).value
    assert est == 527808 - ks[0].values[Metric.L2_FABRIC_HITS][0]
    chk = pick(rows, lin, Metric.CHECK_DRAM_PER_ESTIMATE)
    assert chk.value == pytest.approx(fills / est)
    assert est / fills == pytest.approx(0.70, abs=0.005)      # the 0.70x of the docstring
    assert "inconsistent=" in chk.flags                       # off by more than the 2% bound
    assert pick(rows, lin, Metric.L2_TEX_MISSES, "dram").flags.startswith("multipass=4")
    per_miss = pick(rows, lin, Metric.CHECK_DRAM_PER_TEX_MISS, "dram").value
    assert per_miss == pytest.approx(fills / 527808) and per_miss < 1


def test_isolated_reader_matches_the_in_process_reader(small_rep):
    """The subprocess reader (used with an Nsight Compute install's module) returns what the
    in-process reader returns on the committed real report."""
    mod = report.load_module()
    if mod is None:
        pytest.skip("ncu_report (pip package ncu-report) not installed")
    rep = small_rep
    wanted = (Metric.L2_TEX_MISSES, Metric.DRAM_READ_BYTES)
    extras = Path(mod.__file__).parent.parent          # any dir: the module is importable anyway
    assert report.read_isolated(rep, wanted, extras) == report.read_report(rep, wanted, mod)
    assert report.read_isolated(rep, ("no_such.sum",), extras) is None


class FakeMetric:
    def __init__(self, name, value, unit):
        self._n, self._v, self._u = name, value, unit

    def name(self):
        return self._n

    def value(self):
        return self._v

    def unit(self):
        return self._u


class FakeRange:
    def __init__(self, name):
        self._n = name

    def name(self):
        return self._n


class FakeDomain:
    def __init__(self, stack):
        self._s = stack

    def push_pop_ranges(self):
        return tuple(sorted(self._s))          # documented as sorted, not stack order

    def push_pop_range(self, i):
        return FakeRange(self._s[i]) if i < len(self._s) else None


class FakeState:
    def __init__(self, domains):
        self._d = domains

    def domains(self):
        return tuple(range(len(self._d)))

    def domain_by_id(self, i):
        return FakeDomain(self._d[i])


class FakeAction:
    def __init__(self, name, metrics_, domains):
        self._n, self._m, self._d = name, metrics_, domains

    def name(self):
        return self._n

    def metric_by_name(self, name):
        return FakeMetric(name, *self._m[name]) if name in self._m else None

    def nvtx_state(self):
        return FakeState(self._d) if self._d is not None else None


class FakeReportModule:
    """The documented IContext/IRange/IAction walk (PRI), for testing the reader's logic."""
    def __init__(self, ranges):
        self.ranges = ranges

    def load_report(self, path):
        mod = self

        class Ctx:
            def num_ranges(self):
                return len(mod.ranges)

            def range_by_idx(self, i):
                actions = mod.ranges[i]

                class Rng:
                    def num_actions(self):
                        return len(actions)

                    def action_by_idx(self, j):
                        return actions[j]
                return Rng()
        return Ctx()


def test_report_reader_walks_ranges_actions_metrics_and_nvtx(tmp_path):
    rep = tmp_path / "x.ncu-rep"
    rep.write_bytes(b"\0")
    m = {Metric.L2_TEX_MISSES: (123, "sector"), Metric.REPLAY_PASSES: (1, "pass")}
    mod = FakeReportModule([[FakeAction("fmha_fwd", m, [["zz outer", "aa inner"]])],
                            [FakeAction("flash_fwd", m, [[], ["only"]]),
                             FakeAction("other", m, None)]])
    ks = report.read_report(rep, (Metric.L2_TEX_MISSES, Metric.REPLAY_PASSES), mod)
    assert [(k.index, k.kernel, k.nvtx_range) for k in ks] == [
        (0, "fmha_fwd", "aa inner"), (1, "flash_fwd", "only"), (2, "other", None)]
    assert ks[0].values == {Metric.L2_TEX_MISSES: (123.0, "sector"),
                            Metric.REPLAY_PASSES: (1.0, "pass")}
    with pytest.raises(IngestError, match="lacks metric lts__nope.sum"):
        report.read_report(rep, ("lts__nope.sum",), mod)
    with pytest.raises(IngestError, match="no report at"):
        report.read_report(tmp_path / "missing.ncu-rep", ("a",), mod)


def test_ncu_report_module_is_found_beside_the_ncu_on_path(tmp_path, monkeypatch):
    install = tmp_path / "nsight-compute-2025.3.1"
    (install / "extras" / "python").mkdir(parents=True)
    (install / "extras" / "python" / "fake_ncu_report_h5.py").write_text("FOUND = 'extras'\n")
    (install / "ncu").write_text("#!/bin/sh\n")
    (tmp_path / "bin").mkdir()
    os.symlink(install / "ncu", tmp_path / "bin" / "ncu")
    monkeypatch.setattr(report, "MODULE", "fake_ncu_report_h5")
    assert report.extras_dirs(str(tmp_path / "bin" / "ncu")) == [install / "extras/python"]
    wrapper = tmp_path / "cuda" / "bin" / "ncu"      # toolkit layout: bin/ncu beside the install
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text("#!/bin/sh\n")
    os.symlink(install, tmp_path / "cuda" / "nsight-compute-2025.3.1")
    assert report.extras_dirs(str(wrapper)) == [tmp_path / "cuda/nsight-compute-2025.3.1/"
                                                "extras/python"]
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    assert report.load_module(str(tmp_path / "bin" / "ncu")).FOUND == "extras"
    monkeypatch.setattr(report, "MODULE", "fake_ncu_report_absent_h5")
    assert report.load_module(str(tmp_path / "bin" / "ncu")) is None
    assert report.extras_dirs(None) == []


def test_read_kernels_falls_back_to_the_csv_export(tmp_path, csv_reader):
    ks, reader = report.read_kernels(tmp_path / "r.ncu-rep", (Metric.L2_TEX_MISSES,),
                                     export_csv=lambda p: read_bytes(RAW_CSV).decode())
    assert reader == "csv" and len(ks) == 4
    with pytest.raises(IngestError, match="pip install ncu-report"):
        report.read_kernels(tmp_path / "r.ncu-rep", (Metric.L2_TEX_MISSES,))

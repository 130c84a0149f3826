"""The misscost study on the CPU: its plan (cases, unique ids, linear / sawtooth twins identical
but for the order, every depth at every S x causal, S below and above the L2), the streamer's
dry-run text and bad-input exit, and (with nvcc) the streamer kernel compiling for sm_90."""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from experiments.instruments.streamer import LEVELS, STREAM_SOURCE, main, misscost_ctas, plan_lines
from experiments.registry.lengths import kv_bytes_per_head
from experiments.registry.plans import MISSCOST_STAGES, misscost_plan
from experiments.registry.studies import get_study
from spec import get_arch
from spec.orders import OrderKind
from spec.variant import Backend
from tests.conftest import nvcc_sm90

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
    rc, log = nvcc_sm90(STREAM_SOURCE)
    assert rc == 0, log
    assert "0 bytes spill stores" in log


# -- section 10 of the findings (analysis.findings.misscost) on hand-made runs -----------------

def _mc_row(metric, value, *, order, stages, x=0.0, sample=0, note="l2=cold stream=off"):
    variant = f"cuda.{order}.static2.m80n80d64" + (f".st{stages}" if stages != 2 else "")
    return dict(run="r", study="misscost", arch="h100", variant=variant, backend="cuda",
                order=order, schedule="static2", tile_m=80, tile_n=80, occupancy=None, B=1, H=1,
                H_kv=1, S_q=320, S_kv=320, D=64, dtype="fp16", causal=False, metric=metric,
                value=float(value), unit="", source="measured", sample=sample, note=note, x=x,
                group="", stat="median", lo=None, hi=None, flags="")


def _mc_run(scale: float = 1.0):
    """S=320 (4 K/V tiles of 80), P=2: each CTA runs 2 work items x 4 steps = 8 steps; the two
    waves stream 2 x 4 tiles x 20480 B = 163840 B. Linear reads all of it from DRAM (f = 1),
    sawtooth half (f = 0.5). Times: linear 8 us at depth 2 (t_c = 1 us per step); ``scale``
    stretches the depth-1 times (a second run that differs a little)."""
    from spec.records import Metric
    counters, timing = [], []
    for st in (1, 2):
        for order, dram in (("linear", 163840), ("sawtooth", 81920)):
            counters.append(_mc_row(Metric.DRAM_READ_BYTES, dram, order=order, stages=st))
            counters.append(_mc_row(Metric.L2_TEX_MISSES, dram / 32, order=order, stages=st))
            ms = {(1, "linear"): 0.012, (1, "sawtooth"): 0.0106, (2, "linear"): 0.008,
                  (2, "sawtooth"): 0.0082}[(st, order)] * (scale if st == 1 else 1.0)
            for lvl, x in (("off", 0.0), ("high", 1024.0)):
                for i, d in enumerate((-0.0001, 0.0, 0.0001)):
                    timing.append(_mc_row(Metric.KERNEL_TIME_MS, ms + d * ms, order=order,
                                          stages=st, x=x, sample=i, note=f"stream={lvl}"))
                    if x:
                        timing.append(_mc_row(Metric.STREAMER_GBPS, 3000.0, order=order,
                                              stages=st, x=x, sample=i, note=f"stream={lvl}"))
    return counters, timing


def test_misscost_table_by_hand():
    from analysis.findings.misscost import misscost_table, stages_of
    from analysis.models.timemodel import MemoryFacts
    FACTS = MemoryFacts("h100", 132, 3.35e12, 0.15e-6, 0.50e-6, "hand-made")
    assert [stages_of(v) for v in ("cuda.linear.static96.m80n80d64.st1",
                                   "cuda.linear.static96.m80n80d64")] == [1, 2]
    runs = [("r1", *_mc_run()), ("r2", *_mc_run(1.001))]
    t = {(r["stages"], r["level"]): r for r in misscost_table(runs, FACTS)}
    assert set(t) == {(1, "off"), (1, "high"), (2, "off"), (2, "high")}
    st1, st2 = t[(1, "off")], t[(2, "off")]
    assert st1["t_c_us"] == pytest.approx(1.0)
    # depth 1: period = t_c + L(f); linear 1 + 0.50, sawtooth 1 + 0.15 + 0.5 x 0.35 = 1.325 us
    assert st1["predicted_pct"] == pytest.approx(100 * (1.325 / 1.5 - 1))
    assert st1["regime"] == "latency" and st2["regime"] == "compute"
    assert st2["predicted_pct"] == pytest.approx(0.0)            # 0.5 us hidden behind 1 us
    assert st1["f_linear"] == pytest.approx(1.0) and st1["f_sawtooth"] == pytest.approx(0.5)
    assert st1["edge_GBps"] == pytest.approx(163840 / (8 * 1.5e-6) / 1e9)
    assert st1["r1_pct"] == pytest.approx(100 * (0.0106 / 0.012 - 1))
    assert st1["verdict"] == "sawtooth faster" and st2["verdict"] == "sawtooth slower"
    assert t[(1, "high")]["available_GBps"] == pytest.approx(350.0)
    assert t[(1, "high")]["streamer_GBps"] == 3000.0 and st1["available_GBps"] == 3350.0
    # one run alone: the repeat rule needs two, so no difference is claimed
    assert all(r["verdict"] == "no difference" for r in misscost_table(runs[:1], FACTS))

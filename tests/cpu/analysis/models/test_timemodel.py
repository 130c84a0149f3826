"""analysis.models.timemodel: hand-computed cases of the three bounds, the step and byte counts from
the spec, and the worked example of the module docstring."""
from __future__ import annotations

import pytest

from analysis.models.timemodel import (
    GB10,
    H100,
    MemoryFacts,
    bandwidth_edge,
    critical_steps,
    dram_fraction,
    load_latency,
    predict,
    predicted_change,
    wave_kv_bytes,
)
from spec import CtaSchedule, Problem, Tiles

# round numbers: hit 100 ns, DRAM 500 ns, 1 TB/s, 10 SMs
F = MemoryFacts("toy", 10, 1e12, 100e-9, 500e-9, "test")


def test_load_latency_interpolates_between_hit_and_dram():
    assert load_latency(0.0, F) == pytest.approx(100e-9)
    assert load_latency(1.0, F) == pytest.approx(500e-9)
    assert load_latency(0.25, F) == pytest.approx(200e-9)
    with pytest.raises(ValueError, match="0..1"):
        load_latency(1.5, F)


def test_one_stage_pays_every_load_in_full():
    # t_c = 1 us, f = 1: period = 1 + 0.5 = 1.5 us; 1000 steps = 1.5 ms; bytes negligible
    p = predict(steps=1000, t_c=1e-6, stages=1, f=1.0, dram_bytes=1e6, bw_available=1e12,
                facts=F)
    assert p.period_s == pytest.approx(1.5e-6) and p.seconds == pytest.approx(1.5e-3)
    assert p.exposed_s == pytest.approx(0.5e-6) and p.regime == "latency"
    assert p.compute_s == pytest.approx(1e-3)


def test_two_stages_hide_a_load_shorter_than_a_step():
    p = predict(steps=1000, t_c=1e-6, stages=2, f=1.0, dram_bytes=1e6, bw_available=1e12,
                facts=F)
    assert p.exposed_s == 0 and p.seconds == pytest.approx(1e-3) and p.regime == "compute"
    # a step of 0.2 us hides only 0.2 of the 0.5 us: 0.3 exposed; three stages hide 0.4
    p2 = predict(steps=10, t_c=0.2e-6, stages=2, f=1.0, dram_bytes=0, bw_available=1e12,
                 facts=F)
    p3 = predict(steps=10, t_c=0.2e-6, stages=3, f=1.0, dram_bytes=0, bw_available=1e12,
                 facts=F)
    assert p2.exposed_s == pytest.approx(0.3e-6) and p3.exposed_s == pytest.approx(0.1e-6)


def test_bandwidth_binds_when_bytes_over_bandwidth_exceed_the_latency_path():
    # 1000 steps of 1 us = 1 ms; 2 GB at 1 TB/s = 2 ms
    p = predict(steps=1000, t_c=1e-6, stages=2, f=1.0, dram_bytes=2e9, bw_available=1e12,
                facts=F)
    assert p.seconds == pytest.approx(2e-3) and p.regime == "bandwidth"
    assert bandwidth_edge(steps=1000, t_c=1e-6, stages=2, f=1.0, dram_bytes=2e9,
                          facts=F) == pytest.approx(2e12)
    with pytest.raises(ValueError, match="stages >= 1"):
        predict(steps=1, t_c=1e-6, stages=0, f=0, dram_bytes=0, bw_available=1, facts=F)


def test_predicted_change_of_fewer_misses():
    # one stage: linear f = 1 -> 1.5 us; sawtooth f = 0.25 -> 1.2 us: -20 %
    lin = predict(steps=100, t_c=1e-6, stages=1, f=1.0, dram_bytes=0, bw_available=1e12, facts=F)
    saw = predict(steps=100, t_c=1e-6, stages=1, f=0.25, dram_bytes=0, bw_available=1e12,
                  facts=F)
    assert predicted_change(lin, saw) == pytest.approx(1.2 / 1.5 - 1)
    # bandwidth-bound: the change is the byte ratio
    lin = predict(steps=100, t_c=1e-6, stages=2, f=1.0, dram_bytes=4e9, bw_available=1e12,
                  facts=F)
    saw = predict(steps=100, t_c=1e-6, stages=2, f=0.5, dram_bytes=2e9, bw_available=1e12,
                  facts=F)
    assert predicted_change(lin, saw) == pytest.approx(-0.5)


def test_critical_steps_and_wave_bytes_from_the_schedule():
    # S = 800, 80x80 tiles: 10 Q tiles, 10 K/V tiles; P = 4 CTAs: items 3, 3, 2, 2
    pr = Problem(B=1, H=1, S_q=800, D=64)
    t = Tiles(80, 80)
    assert critical_steps(pr, t, CtaSchedule.persistent(4)) == 3 * 10
    # 3 waves, each streams the head's 10 tiles of 2 x 80 x 64 x 2 B once
    assert wave_kv_bytes(pr, t, CtaSchedule.persistent(4)) == 3 * 10 * 20480
    # causal: Q tile q reads q + 1 tiles; CTA 0 has q = 0, 4, 8: 1 + 5 + 9 = 15 steps; CTA 1
    # q = 1, 5, 9: 2 + 6 + 10 = 18, the most; waves reach tiles 4, 8, 10 (items 0-3, 4-7, 8-9)
    pc = Problem(B=1, H=1, S_q=800, D=64, causal=True)
    assert critical_steps(pc, t, CtaSchedule.persistent(4)) == 18
    assert wave_kv_bytes(pc, t, CtaSchedule.persistent(4)) == (4 + 8 + 10) * 20480
    assert dram_fraction(15, 10) == 1.0 and dram_fraction(5, 10) == 0.5


def test_worked_example_of_the_docstring():
    pr = Problem(B=1, H=1, S_q=262144, D=64)
    sched, t = CtaSchedule.persistent(132), Tiles(80, 80)
    steps = critical_steps(pr, t, sched)
    assert steps == 25 * 3277
    t_c = 103.4e-3 / steps
    kv = wave_kv_bytes(pr, t, sched)
    assert kv == 25 * 3277 * 20480
    lin2 = predict(steps=steps, t_c=t_c, stages=2, f=1.0, dram_bytes=kv, bw_available=3.35e12,
                   facts=H100)
    assert lin2.regime == "compute"
    f_saw = 1 - 50 / 64
    lin1 = predict(steps=steps, t_c=t_c, stages=1, f=1.0, dram_bytes=kv, bw_available=3.35e12,
                   facts=H100)
    saw1 = predict(steps=steps, t_c=t_c, stages=1, f=f_saw, dram_bytes=f_saw * kv,
                   bw_available=3.35e12, facts=H100)
    # linear: t_c + L_dram; sawtooth: t_c + L_hit + f (L_dram - L_hit),
    # the H100's measured latencies
    us = t_c * 1e6
    assert predicted_change(lin1, saw1) == pytest.approx(
        (us + 0.1434 + f_saw * (0.3487 - 0.1434)) / (us + 0.3487) - 1, rel=1e-3)
    edge = bandwidth_edge(steps=steps, t_c=t_c, stages=2, f=1.0, dram_bytes=kv, facts=H100)
    assert edge == pytest.approx(kv / 103.4e-3)
    assert GB10.bytes_per_s_per_sm == pytest.approx(273e9 / 48)
    assert H100.bytes_per_s_per_sm > 4 * GB10.bytes_per_s_per_sm

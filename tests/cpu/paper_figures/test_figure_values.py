"""What is drawn equals the data read: the tests read the fixture CSV rows themselves (not
through a figure's load()) and compare them with the artists of the drawn Axes: bar heights
per legend label and x tick, line data per legend label. A figure that draws the wrong row,
the wrong unit or the wrong statistic fails. The H100 drift and longseq figures are checked
against their rows the same way, and the T2 table's model errors against the measured L1 and L2
sectors."""
from __future__ import annotations

from pathlib import Path

import pytest

from paper_figures import load_rows
from tests.cpu.paper_figures.figure_helpers import FIX


def _bars(fig) -> dict[str, dict[str, float]]:
    """{legend label: {x tick label: bar height}} of every bar series of every Axes."""
    from matplotlib.container import BarContainer
    out: dict[str, dict[str, float]] = {}
    for ax in fig.axes:
        ticks = [(t, lab.get_text()) for t, lab in zip(ax.get_xticks(), ax.get_xticklabels())]
        for c in ax.containers:
            if not isinstance(c, BarContainer):
                continue
            got = out.setdefault(c.get_label(), {})
            for patch in c.patches:
                x = patch.get_x() + patch.get_width() / 2
                tick = min(ticks, key=lambda t: abs(t[0] - x))[1]
                assert tick not in got, f"two bars of {c.get_label()!r} over {tick!r}"
                got[tick] = patch.get_height()
    return out


def _lines(fig) -> dict[str, list[tuple[list[float], list[float]]]]:
    """{legend label: [(x, y), ...]} of every labelled line of every Axes."""
    out: dict[str, list] = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if not line.get_label().startswith("_"):
                out.setdefault(line.get_label(), []).append(
                    (list(map(float, line.get_xdata())), list(map(float, line.get_ydata()))))
    return out


def _raw(path: Path, **where) -> list[dict]:
    """The fixture's rows (analysis.data' reader: the committed CSV as typed rows) that match
    ``where`` exactly."""
    return [r for r in load_rows([path]) if all(r[k] == v for k, v in where.items())]


def _draw(module, path: Path, arch: str):
    return module.plot(module.load(load_rows([path])), arch)


def _label(order: str) -> str:
    from paper_figures.style import series_label
    return series_label(order, "measured")


MISSES = "lts__t_sectors_srcunit_tex_lookup_miss.sum"


@pytest.mark.parametrize("path", [FIX / "h200-sawtooth",
                                  FIX / "h100-repeats" / "sawtooth-20261121"],
                         ids=["h200", "h100-run1"])
def test_f8a_bars_are_the_cuda_miss_counts(path):
    from paper_figures import f08_cuda_batch
    rows = _raw(path, study="sawtooth", backend="cuda", metric=MISSES, source="measured")
    want: dict[str, dict[str, float]] = {}
    for r in rows:
        cell = want.setdefault(_label(r["order"]), {})
        assert f"B={r['B']}" not in cell, "one row per case in the fixture"
        cell[f"B={r['B']}"] = r["value"] / 1e6
    got = _bars(_draw(f08_cuda_batch, path, "h100"))
    assert set(want) == {"Linear (cyclic)", "Sawtooth (alternating)"} and len(rows) == 8
    for label, cells in want.items():
        assert got[label] == pytest.approx(cells, rel=1e-12)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_f9a_f10a_bars_are_the_cutile_miss_counts(causal):
    from paper_figures import f09_cutile_noncausal, f10_cutile_causal
    path = FIX / "h200-sawtooth"
    rows = _raw(path, study="sawtooth", backend="cutile", metric=MISSES, causal=causal)
    want: dict[str, dict[str, float]] = {}
    for r in rows:
        want.setdefault(_label(r["order"]), {})[r["schedule"]] = r["value"] / 1e6
    got = _bars(_draw(f10_cutile_causal if causal else f09_cutile_noncausal, path, "h200"))
    assert len(rows) == 4
    for label, cells in want.items():
        # tick labels read "Static (persistent)\nstatic132": the schedule is the last line
        drawn = {tick.split("\n")[-1]: h for tick, h in got[label].items()}
        assert drawn == pytest.approx(cells, rel=1e-12)


def test_f8c_bars_are_the_median_kernel_times():
    from statistics import median

    from paper_figures import f08c_cuda_time
    path = FIX / "h200-sawtooth"
    samples: dict[tuple, list[float]] = {}
    for r in _raw(path, study="sawtooth", backend="cuda", metric="kernel_time_ms"):
        samples.setdefault((_label(r["order"]), f"B={r['B']}"), []).append(r["value"])
    assert samples and all(len(v) > 1 for v in samples.values())
    got = _bars(_draw(f08c_cuda_time, path, "h200"))
    for (label, tick), ms in samples.items():
        assert got[label][tick] == pytest.approx(median(ms), rel=1e-12)


def test_f5_lines_are_the_divergence_misses_per_length():
    from paper_figures import f05_divergence
    path = FIX / "h200-divergence"
    got = _lines(_draw(f05_divergence, path, "h200"))
    for order in ("linear", "sawtooth"):
        rows = _raw(path, study="divergence", order=order, metric=MISSES)
        want = sorted((r["S_q"] / 1024, r["value"] / 1e6) for r in rows)
        (x, y), = got[_label(order)]
        assert len(want) == 7 and x == [w[0] for w in want]
        assert y == pytest.approx([w[1] for w in want], rel=1e-12)


def test_f1_lines_are_the_l1_and_l2_sectors_per_cta_count():
    from paper_figures import f01_l1l2_short
    path = FIX / "h200-l1l2"
    got = _lines(_draw(f01_l1l2_short, path, "h200"))
    S = min(r["S_q"] for r in _raw(path, study="l1l2"))
    for metric, label in (("l1tex__t_sectors.sum", "L1 sectors"),
                          ("lts__t_sectors.sum", "L2 sectors (all)")):
        rows = _raw(path, study="l1l2", metric=metric, S_q=S)
        want = sorted((int(r["schedule"][len("static"):]), r["value"] / 1e6) for r in rows)
        (x, y), = got[label]
        assert len(want) == 11 and x == [w[0] for w in want]
        assert y == pytest.approx([w[1] for w in want], rel=1e-12)


def test_f6_hit_rate_is_hits_over_lookups_of_the_simulated_rows():
    from paper_figures import f06_active_sms
    path = FIX / "sim-active-sms"
    got = _lines(_draw(f06_active_sms, path, "gb10"))["L2 hit rate (right axis), simulated"]
    counts: dict[tuple, dict[str, float]] = {}
    for r in _raw(path, study="active-sms", source="simulated"):
        counts.setdefault((r["order"], int(r["schedule"][len("static"):])), {})[r["metric"]] = \
            r["value"]
    want = {}
    for (order, p), c in counts.items():
        hits, miss = c["lts__t_sectors_srcunit_tex_lookup_hit.sum"], c[MISSES]
        want.setdefault(order, []).append((p, 100 * hits / (hits + miss)))
    # one hit-rate line per order panel, panels sorted by order (f06_active_sms.plot)
    assert len(got) == len(want) == 2
    for (x, y), order in zip(got, sorted(want)):
        pts = sorted(want[order])
        assert x == [p for p, _ in pts] and y == pytest.approx([h for _, h in pts], rel=1e-12)


def test_traffic_model_error_table_on_measured_h200(tmp_path):
    """T2 on the cut-down H200 traffic run: the exact model matches the L1 sectors (the loads)
    within a few percent; the L2 counters of the lock-step non-causal kernel sit far below."""
    from paper_figures import t2_model_error
    data = t2_model_error.load(load_rows([FIX / "h200-traffic"]))
    got = {(r[0], r[1], r[3]): float(r[4]) for r in data["rows"]}
    assert got[("non-causal", "l1tex__t_sectors.sum", "exact")] < 1.0
    assert got[("causal", "l1tex__t_sectors.sum", "exact")] < 2.0
    assert got[("non-causal", "lts__t_sectors.sum", "exact")] > 50


# -- the H100 drift and longseq figures ------------------------------------------------------------


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def test_drift_draws_every_case_and_the_l2_line():
    from paper_figures import drift
    from spec import get_arch
    from spec.records import read_csv
    rows = read_csv(FIX / "h100-drift" / "drift.csv.gz")
    cases = {(r["variant"], r["B"], r["causal"]) for r in rows if r["metric"] == "median_step_ns"}
    step = {k: r["value"] for r in rows if r["metric"] == "median_step_ns"
            for k in [(r["variant"], r["B"], r["causal"])]}
    fig = drift.plot(drift.load(load_rows([FIX / "h100-drift"])), "h100")
    lines = [ln for ax in fig.axes for ln in ax.get_lines()
             if (ln.get_gid() or "").startswith("case:")]
    assert len(cases) == 8 and len(lines) == len(cases)
    # one panel per (B, causal), each with the L2 line at L2 / (K+V bytes of one 80x80, D=64 step)
    kv = 2 * 80 * 64 * 2
    l2 = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_gid() == "l2"]
    assert len(l2) == len({(b, c) for _, b, c in cases}) == 4
    for ln in l2:
        assert ln.get_ydata()[0] == pytest.approx(get_arch("h100").l2_bytes / kv)   # 2560 steps
    # the right axis reads steps as MiB of K/V (20 KiB a step); the line says so
    for ln in l2:
        (sec,) = ln.axes.child_axes
        assert "MiB" in sec.get_ylabel()
        assert ln.get_label() == "L2 (50 MiB) = 2560 steps of 20 KiB K/V"
    # y is the spread in steps: the last sample of each case over that case's median step
    for ln in lines:
        order = ln.get_gid().split(":")[1]
        ax = ln.axes
        B = int(ax.get_title().split(",")[0].split("=")[1])
        causal = "non-causal" not in ax.get_title()
        pts = sorted((r["x"], r["value"]) for r in rows if r["metric"] == "cta_start_spread_ns"
                     and r["order"] == order and r["B"] == B and r["causal"] == causal)
        k = next(k for k in cases if k[1] == B and k[2] == causal and f".{order}." in k[0])
        assert ln.get_ydata()[-1] == pytest.approx(pts[-1][1] / step[k])
    title = fig._suptitle.get_text()
    assert "measured on NVIDIA H100 80GB HBM3" in title and "cuda_baseline/drift.py" in title


def test_longseq_bars_peers_and_title():
    from paper_figures import longseq
    from spec import Problem
    from spec.records import read_csv
    rows = read_csv(FIX / "h100-longseq" / "timing.csv.gz")
    fig = longseq.plot(longseq.load(load_rows([FIX / "h100-longseq"])), "h100")
    panels = [ax for ax in fig.axes if ax.patches]
    assert len(panels) == 4                                   # D in {64, 128} x causal
    for ax in panels:
        D = int(ax.get_title().split(",")[0].split("=")[1])
        causal = "non-causal" not in ax.get_title()
        kernels = {r["variant"] for r in rows if r["D"] == D and r["causal"] == causal
                   and r["backend"] in ("cutile", "cuda")}
        assert len(ax.patches) == len(kernels) == 12          # 2 backends x 3 schedules x 2 orders
        peers = {ln.get_label().split(":")[0]: ln.get_ydata()[0] for ln in ax.get_lines()
                 if ln.get_label().startswith("PyTorch SDPA")}
        assert set(peers) == {"PyTorch SDPA (cuDNN)", "PyTorch SDPA (flash)"}
        ms = [r["value"] for r in rows if r["backend"] == "sdpa-cudnn" and r["D"] == D
              and r["causal"] == causal]
        flops = Problem(1, 16, 131072, D, causal=causal).flops
        assert peers["PyTorch SDPA (cuDNN)"] == pytest.approx(
            _median([flops / (t * 1e-3) / 1e12 for t in ms]))
    title = fig._suptitle.get_text()
    assert "measured on NVIDIA H100 80GB HBM3" in title and "run.py longseq --arch h100" in title

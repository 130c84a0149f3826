"""Section 9, DRAM: how far from the DRAM bandwidth limit the kernels run (9a: the profiled
longseq cases; 9c: the sawtooth-study kernels), the bandwidth bound on what reading fewer bytes
could save, and (9b) the for-loop spill artifact against the fixed build."""
from __future__ import annotations

from analysis.data.rows import (
    as_case,
    config_label,
    flops,
    median,
    pct_change,
    pivot,
    times_by_case,
    twin_key,
)
from spec.records import Metric


def dram_bound(counter_rows: list[dict], timing_rows: list[dict],
               peak_bytes_per_s: float) -> list[dict]:
    """Section 9a/9c, per profiled case: misses, ``dram__bytes_read.sum``, the median kernel time of
    the timing samples of the same run, the achieved DRAM read bandwidth and its share of the peak.
    On each sawtooth row: the measured time change vs its linear twin, and an upper bound on what
    the sawtooth order could save by reading less from DRAM,
    ``(linear bytes − sawtooth bytes) / peak`` as % of the linear time. The bound assumes the bytes
    saved would otherwise stream at the peak bandwidth on the critical path; it is a bandwidth
    bound, not a latency bound (a kernel stalled on DRAM latency at a small share of the peak could
    save more per byte; the measured change beside it says whether it did)."""
    piv = pivot(counter_rows)
    times = times_by_case(timing_rows)
    pairs: dict[tuple, dict[str, tuple]] = {}
    for k in piv:
        pairs.setdefault(twin_key(k), {})[as_case(k)["order"]] = k
    out = []
    for k, m in sorted(piv.items(), key=lambda kv: (config_label(as_case(kv[0])), kv[0][2])):
        c = as_case(k)
        if Metric.DRAM_READ_BYTES not in m:
            continue
        t = times.get(k, [])
        ms = median(t) if t else float("nan")
        dram = m[Metric.DRAM_READ_BYTES]
        row = dict(config=config_label(c), D=c["D"], order=c["order"],
                   misses=m.get(Metric.L2_TEX_MISSES, float("nan")), dram_GB=dram / 1e9, ms=ms,
                   dram_GBps=dram / (ms * 1e-3) / 1e9,
                   dram_peak_pct=100.0 * dram / (ms * 1e-3) / peak_bytes_per_s,
                   time_change_pct=float("nan"), saving_bound_pct=float("nan"))
        lin = pairs.get(twin_key(k), {}).get("linear")
        if c["order"] != "linear" and lin is not None and Metric.DRAM_READ_BYTES in piv[lin] \
                and times.get(lin):
            ms_lin = median(times[lin])
            row["time_change_pct"] = pct_change(ms, ms_lin)
            row["saving_bound_pct"] = 100.0 * (piv[lin][Metric.DRAM_READ_BYTES] - dram) \
                / peak_bytes_per_s / (ms_lin * 1e-3)
        out.append(row)
    return out


def spill_artifact(forloop: tuple[list[dict], list[dict]],
                   fixed: tuple[list[dict], list[dict]]) -> list[dict]:
    """Section 9b: the same profiled cases built with the ``for`` loop over work items (the linear
    persistent and tile-X builds spilled) and with the ``while`` loop (no spill): misses, DRAM bytes
    read, ``l1tex__t_sectors.sum`` and median TFLOPS, per schedule and order. A cuTile build loads
    K/V through TMA, which bypasses L1, so any L1 sectors there are local-memory (spill) traffic.
    ``forloop``/``fixed``: (counter rows, timing rows) of each run."""
    sides = {}
    for name, (cnt, tim) in (("forloop", forloop), ("fixed", fixed)):
        times = times_by_case(tim)
        sides[name] = {(as_case(k)["schedule"], as_case(k)["order"], as_case(k)["D"],
                        as_case(k)["causal"]): (k, m, times.get(k, []))
                       for k, m in pivot(cnt).items()}
    columns = (("misses", lambda k, m, t: m.get(Metric.L2_TEX_MISSES, float("nan"))),
               ("dram_GB", lambda k, m, t: m.get(Metric.DRAM_READ_BYTES, float("nan")) / 1e9),
               ("l1_sectors", lambda k, m, t: m.get(Metric.L1_SECTORS, float("nan"))),
               ("tflops", lambda k, m, t: flops(as_case(k)) / (median(t) * 1e-3) / 1e12
                if t else float("nan")))
    out = []
    for key in sorted(set(sides["forloop"]) & set(sides["fixed"]),
                      key=lambda x: (x[2], x[3], x[0] != "grid", x[0], x[1] != "linear")):
        sched, o, D, causal = key
        row = dict(schedule=sched, order=o, D=D, causal=causal)
        for col, get in columns:
            for name in ("forloop", "fixed"):
                row[f"{col}_{name}"] = get(*sides[name][key])
        out.append(row)
    return out


"""Section 8, best configuration at long S (longseq run): per (D, causal) the best study kernel by
median TFLOPS, the best sawtooth-order and the best linear one, beside cuDNN and flash from the
same run, and whether the two bests differ by more than the sample spread."""
from __future__ import annotations

from analysis.data.rows import as_case, flops, median, pct_change, time_verdict, times_by_case


def _ratio(kt, tf, denom: float) -> float:
    return tf(*kt) / denom if kt else float("nan")


def longseq_best(timing_rows: list[dict]) -> list[dict]:
    """Section 8, per (D, causal): the study kernel (cuTile or CUDA, any schedule and order) with
    the highest median TFLOPS, the best sawtooth-order one and the best linear one, the SDPA peers
    (cuDNN, flash) timed in the same run, the ratios to them, the sawtooth-vs-linear change of the
    two bests' median times and ``time_verdict`` on their samples. A best of several noisy
    candidates is biased upwards (each pick is the luckiest of its set), which is one more reason
    to read a difference within the spread as none."""
    times = times_by_case(timing_rows)
    groups: dict[tuple, dict[str, list]] = {}
    for k, t in times.items():
        c = as_case(k)
        g = groups.setdefault((c["D"], c["causal"], c["B"], c["H"], c["S_q"]), {})
        g.setdefault("peer" if c["backend"].startswith("sdpa") else c["order"], []).append((k, t))
    out = []
    for (D, causal, B, H, S), g in sorted(groups.items()):
        def tf(k, t):
            return flops(as_case(k)) / (median(t) * 1e-3) / 1e12

        def best(cands):
            return max(cands, key=lambda kt: tf(*kt)) if cands else None

        def label(k):
            c = as_case(k)
            return f"{c['backend']} {c['order']} {c['schedule']} {c['tile_m']}x{c['tile_n']}"
        ours = g.get("linear", []) + g.get("sawtooth", [])
        b, bs, bl = best(ours), best(g.get("sawtooth", [])), best(g.get("linear", []))
        if b is None:
            continue
        peer = {as_case(k)["backend"]: tf(k, t) for k, t in g.get("peer", [])}
        cudnn, flash = peer.get("sdpa-cudnn", float("nan")), peer.get("sdpa-flash", float("nan"))
        row = dict(D=D, causal=causal, B=B, H=H, S=S, best=label(b[0]), best_tflops=tf(*b))
        row.update(best_saw=label(bs[0]) if bs else "", saw_tflops=tf(*bs) if bs else float("nan"),
                   best_lin=label(bl[0]) if bl else "", lin_tflops=tf(*bl) if bl else float("nan"),
                   cudnn_tflops=cudnn, flash_tflops=flash,
                   best_over_cudnn=tf(*b) / cudnn, best_over_flash=tf(*b) / flash,
                   saw_over_cudnn=_ratio(bs, tf, cudnn), lin_over_cudnn=_ratio(bl, tf, cudnn))
        if bs and bl:
            row.update(saw_vs_lin_time_pct=pct_change(median(bs[1]), median(bl[1])),
                       saw_vs_lin=time_verdict(bl[1], bs[1]))
        out.append(row)
    return out


"""longseq: TFLOP/s of cuTile and CUDA, linear vs sawtooth, per CTA schedule, at a long sequence
(B=1, H=16), one panel per (D, causal), with the SDPA cuDNN and flash peers of the same run.

Data: ``timing.csv`` of ``python -m experiments.run longseq --arch h100`` (the registered
longseq dataset the selector picks, ``analysis.data.select``; its manifest names the command, the
GPU and 5 cold-L2 samples per variant), measured. Bars: the median TFLOP/s of the samples (FLOPs
from ``spec.Problem.flops`` over each sample's kernel time), error bars the slowest..fastest sample;
peers: horizontal lines at their median. One run of the study only (``data.one_run``): the
registered ncu session of the longseq study (dataset ``longseq-profile``, a cuTile D=128 subset) is
a separate run and is not mixed in.
"""
from __future__ import annotations

import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .bars import grouped_bars  # noqa: E402
from .data import Skip, manifest, manifest_command, manifest_device, one_run, tflops_stats  # noqa: E402
from .style import BACKEND_STYLE, gpu_name, seq_label, title_suffix  # noqa: E402

FIGURE = "longseq"
STUDIES: tuple[str, ...] = ("longseq",)
KERNELS = ("cutile", "cuda")
PEERS = ("sdpa-cudnn", "sdpa-flash")
ORDERS = ("linear", "sawtooth")


def _schedule_key(s: str) -> tuple:
    return (0 if s == "grid" else 1 if s.startswith("tile") else 2, s)


def load(rows: list[dict]) -> dict:
    rows, run = one_run(rows, "longseq")
    stats = [s for s in tflops_stats(rows, "longseq").values() if not math.isnan(s["ms"])]
    kern = [s for s in stats if s["backend"] in KERNELS and s["order"] in ORDERS]
    if not kern:
        raise Skip("no rows of the longseq study (kernel_time_ms samples of cutile / cuda; "
                   "python -m experiments.run longseq)")
    groups = sorted({(s["backend"], s["schedule"]) for s in kern},
                    key=lambda g: (KERNELS.index(g[0]), _schedule_key(g[1])))
    tiles = {b: sorted({(r["tile_m"], r["tile_n"]) for r in rows
                        if r["study"] == "longseq" and r["backend"] == b}) for b in KERNELS}
    panels = {}
    for key in sorted({(s["D"], s["causal"]) for s in kern}, key=lambda k: (k[0], k[1])):
        ks = [s for s in kern if (s["D"], s["causal"]) == key]
        series, errors = {}, {}
        for s in ks:
            k = (s["order"], s["source"])
            i = groups.index((s["backend"], s["schedule"]))
            vals = series.setdefault(k, [math.nan] * len(groups))
            lo, hi = errors.setdefault(k, ([math.nan] * len(groups), [math.nan] * len(groups)))
            vals[i], lo[i], hi[i] = s["tflops"], s["tflops_lo"], s["tflops_hi"]
        series = dict(sorted(series.items(), key=lambda kv: ORDERS.index(kv[0][0])))
        ref = ks[0]
        peers = {(s["backend"], s["source"]): s["tflops"] for s in stats
                 if s["backend"] in PEERS and (s["B"], s["H"], s["S_q"], s["D"], s["causal"])
                 == (ref["B"], ref["H"], ref["S_q"], ref["D"], ref["causal"])}
        peers = dict(sorted(peers.items(), key=lambda kv: PEERS.index(kv[0][0])))
        panels[key] = {"series": series, "errors": errors, "peers": peers,
                       "n": sorted({s["n"] for s in ks}), "B": ref["B"], "H": ref["H"],
                       "S": ref["S_q"]}
    m = manifest([r for r in rows if r["study"] == "longseq"])
    return {"groups": groups, "panels": panels, "tiles": tiles, "run": run,
            "device": manifest_device(m), "command": manifest_command(m),
            "sources": {s["source"] for s in kern}}


def _group_label(backend: str, schedule: str) -> str:
    return f"{BACKEND_STYLE.get(backend, {}).get('label', backend).split(' ')[0]}\n{schedule}"


def plot(data: dict, arch: str | None = None):
    keys = list(data["panels"])
    Ds = sorted({d for d, _ in keys})
    modes = sorted({c for _, c in keys})
    fig, axes = plt.subplots(len(Ds), len(modes), figsize=(6.4 * len(modes), 3.9 * len(Ds)),
                             squeeze=False, constrained_layout=True)
    labels = [_group_label(*g) for g in data["groups"]]
    for key, p in data["panels"].items():
        D, causal = key
        ax = axes[Ds.index(D)][modes.index(causal)]
        grouped_bars(labels, p["series"], errors=p["errors"], peers=p["peers"], ax=ax,
                     ylabel="TFLOP/s (median; bars: sample min..max)",
                     title=f"D={D}, {'causal' if causal else 'non-causal'} "
                           f"({'/'.join(map(str, p['n']))} samples per bar)")
        ax.legend(fontsize=7, loc="lower left", ncol=2, framealpha=0.9)
        ax.set_ylim(0, ax.get_ylim()[1])
    p0 = next(iter(data["panels"].values()))
    tiles = ", ".join(f"{BACKEND_STYLE[b]['label'].split(' ')[0]} "
                      + "/".join(f"{m}×{n}" for m, n in data["tiles"][b])
                      for b in KERNELS if data["tiles"].get(b))
    measured = "measured" if data["sources"] == {"measured"} else "drawn"
    head = (f"longseq: TFLOP/s at B={p0['B']}, H={p0['H']}, S={seq_label(p0['S'])} "
            f"(tiles: {tiles}); "
            f"numbers over bars: sawtooth vs linear" + title_suffix(data["sources"]))
    where = f"{measured} on {data['device'] or gpu_name(arch)}"
    if data.get("command"):
        where += f" by: {data['command']}"
    fig.suptitle(head + "\n" + where, fontsize=9)
    return fig


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

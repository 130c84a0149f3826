"""misscost_regimes: the regime map of the miss-cost study. Where sawtooth is faster, slower or no
different from linear (the verdict rule of section 5c over the runs), by K/V pipeline depth and
the DRAM bandwidth left to each attention SM, one panel per (S, causal); the time model's
boundary and the GB10 point placed on it as a prediction.

Data: the table of ``paper_figures.misscost`` (``analysis.findings.misscost``, every loaded run of
the misscost study; measured). x: the bandwidth left per attention SM = (DRAM peak - the streamer's
median achieved bandwidth) / attention SMs, at least 1% of the peak (``MIN_AVAILABLE``: the
streamer's rate can read at the peak); y: the pipeline depth. Each cell is coloured by the verdict
and labelled with the mean change over the runs. The shaded band left of the model's bandwidth edge
(``timemodel.bandwidth_edge`` of the linear build, per SM; the largest over the panel's depths) is
where the model says DRAM bandwidth binds; right of it, only exposed latency (depth 1) or nothing.
The star is GB10 (273 GB/s over 48 SMs, the paper's GPU) at the default depth: a prediction
of the model, not a measurement (this project has no GB10 run).
"""
from __future__ import annotations

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from analysis.models.timemodel import GB10  # noqa: E402
from spec.variant import DEFAULT_STAGES  # noqa: E402

from . import misscost  # noqa: E402
from .style import gpu_name, seq_label  # noqa: E402

FIGURE = "misscost_regimes"
STUDIES: tuple[str, ...] = ("misscost",)
VERDICT_COLOR = {"sawtooth faster": "#55A868", "sawtooth slower": "#C44E52",
                 "no difference": "#BBBBBB"}


def load(rows: list[dict]) -> dict:
    return misscost.load(rows)


def per_sm(r: dict, key: str) -> float:
    return r[key] / r["attention_sms"]


def plot(data: dict, arch: str | None = None):
    table, keys = data["table"], misscost.panels(data["table"])
    gb10 = GB10.bytes_per_s_per_sm / 1e9
    fig, axes = plt.subplots(1, len(keys), figsize=(4.1 * len(keys), 3.4), sharey=True,
                             constrained_layout=True, squeeze=False)
    for ax, (S, causal) in zip(axes[0], keys):
        rows = [r for r in table if (r["S"], r["causal"]) == (S, causal)]
        edge = max(per_sm(r, "edge_GBps") for r in rows)
        xs = [per_sm(r, "available_GBps") for r in rows]
        lo = min(min(xs), edge, gb10) / 3
        ax.axvspan(lo, edge, color="#DD8452", alpha=0.15, lw=0)
        ax.axvline(edge, color="#DD8452", lw=1)
        ax.annotate("model: bandwidth-bound", (edge, 3.35), xytext=(-3, 0),
                    textcoords="offset points", ha="right", fontsize=6.5, color="#A0522D")
        for i, (r, x) in enumerate(sorted(zip(rows, xs), key=lambda rx: (rx[0]["stages"], rx[1]))):
            ax.scatter(x, r["stages"], s=130, marker="s", color=VERDICT_COLOR[r["verdict"]],
                       edgecolor="black", linewidth=0.4, zorder=3)
            ax.annotate(f"{r['mean_pct']:+.1f}", (x, r["stages"]),
                        xytext=(0, 9 if i % 2 else -14),   # alternate: no overlap
                        textcoords="offset points", ha="center", fontsize=6)
        ax.scatter(gb10, DEFAULT_STAGES, s=150, marker="*", color="gold", edgecolor="black",
                   zorder=4)
        ax.annotate("GB10\n(prediction)", (gb10, DEFAULT_STAGES), xytext=(0, -20),
                    textcoords="offset points", ha="center", fontsize=6.5)
        ax.set_xscale("log")
        ax.set_xlim(lo, max(xs) * 2)
        ax.set_ylim(0.5, 3.6)
        ax.set_yticks([1, 2, 3])
        ax.set_title(f"S={seq_label(S)} {'causal' if causal else 'non-causal'}", fontsize=9)
        ax.set_xlabel("DRAM bandwidth left per attention SM (GB/s)", fontsize=8)
        ax.grid(True, lw=0.3, alpha=0.6)
    axes[0][0].set_ylabel("K/V pipeline stages", fontsize=8)
    handles = [plt.Line2D([], [], marker="s", ls="", color=c, mec="black", label=v)
               for v, c in VERDICT_COLOR.items()]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=7, frameon=False)
    dev = data["device"] or gpu_name(arch)
    fig.suptitle(f"Regime map of the miss cost: {dev}, runs {', '.join(data['runs'])} "
                 f"(cells: measured, mean change %; band and star: model)", fontsize=9)
    return fig


def main(argv=None) -> int:
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

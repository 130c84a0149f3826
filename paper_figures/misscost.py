"""misscost: where a miss costs time. Sawtooth vs linear change of kernel time against the DRAM
bandwidth a co-running streamer takes, one line per K/V pipeline depth, one panel per (S, causal),
with the time model's prediction dashed.

Data: every run of the misscost study that is loaded, never pooled: on the H100 the three committed
runs of ``python -m experiments.run misscost --arch h100`` (a run and its repeats ``<run>-r2``,
``-r3``, registered as datasets; CUDA 80x80 D=64, B=H=1, persistent on 96 SMs, the streamer on the
other 36; 5 cold-L2 samples per case, order and streamer level), measured. The table is
``analysis.findings.misscost`` (section 10 of the findings): markers at the mean change over the
runs, bars the run-to-run min..max, x the median of the streamer's own achieved bandwidth; filled
markers where the verdict rule of section 5c finds a difference, hollow where it does not. Dashed:
``analysis.models.timemodel``'s prediction from the measured DRAM bytes, the step count, ``t_c`` and
the documented (partly assumed) latencies: a model line, not a measurement.
"""
from __future__ import annotations

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from analysis.findings.misscost import misscost_table  # noqa: E402
from analysis.models.timemodel import FACTS  # noqa: E402

from .data import Skip, manifest, manifest_device, run_name, runs_of  # noqa: E402
from .style import gpu_name, seq_label  # noqa: E402

FIGURE = "misscost"
STUDIES: tuple[str, ...] = ("misscost",)
STAGE_COLOR = {1: "#C44E52", 2: "#4C72B0", 3: "#55A868"}


def load(rows: list[dict]) -> dict:
    runs = runs_of(rows, "misscost")
    if not runs:
        raise Skip("no rows of the misscost study "
                   "(python -m experiments.run misscost --arch <arch>)")
    arch = next(iter(runs.values()))[0]["arch"]
    facts = FACTS.get(arch)
    if facts is None:
        raise Skip(f"analysis.models.timemodel has no memory facts for {arch} (it knows "
                   f"{', '.join(FACTS)})")
    # a run's rows hold its counters and its timing; misscost_table takes what it needs of each
    table = misscost_table([(run_name(k), rr, rr) for k, rr in runs.items()], facts)
    if not table:
        raise Skip("the misscost runs hold no configuration timed with both orders")
    devices = {manifest_device(manifest(rr)) for rr in runs.values()}
    return {"table": table, "runs": [run_name(k) for k in runs], "facts": facts,
            "device": devices.pop() if len(devices) == 1 else None}


def panels(table: list[dict]) -> list[tuple]:
    """(S, causal) of every panel: non-causal first, small S first."""
    return sorted({(r["S"], r["causal"]) for r in table}, key=lambda k: (k[1], k[0]))


def plot(data: dict, arch: str | None = None, columns: int | None = None):
    """One panel per (S, causal), in a row, or in ``columns`` columns."""
    table, keys = data["table"], panels(data["table"])
    ncols = min(len(keys), columns or len(keys))
    nrows = -(-len(keys) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.1 * ncols, 3.9 * nrows), sharey=True,
                             constrained_layout=True, squeeze=False)
    for ax, (S, causal) in zip(axes.flat, keys):
        rows = [r for r in table if (r["S"], r["causal"]) == (S, causal)]
        for st in sorted({r["stages"] for r in rows}):
            pts = sorted((r for r in rows if r["stages"] == st), key=lambda r: r["streamer_GBps"])
            x = [r["streamer_GBps"] for r in pts]
            y = [r["mean_pct"] for r in pts]
            err = [[r["mean_pct"] - r["min_pct"] for r in pts],
                   [r["max_pct"] - r["mean_pct"] for r in pts]]
            c = STAGE_COLOR.get(st, "#777777")
            ax.errorbar(x, y, yerr=err, color=c, lw=1.2, capsize=2, zorder=3,
                        label=f"{st} stage{'s' if st > 1 else ''} (measured)")
            for xi, yi, r in zip(x, y, pts):
                ax.plot(xi, yi, "o", ms=5.5, color=c, zorder=4,
                        mfc=c if r["verdict"] != "no difference" else "white")
            ax.plot(x, [r["predicted_pct"] for r in pts], ls="--", color=c, lw=1, zorder=2,
                    label=f"{st} stage{'s' if st > 1 else ''} (model)")
        ax.axhline(0, color="black", lw=0.8)
        ax.axvline(data["facts"].dram_bytes_per_s / 1e9, color="grey", lw=0.8, ls=":")
        kv = rows[0]
        ax.set_title(f"S={seq_label(S)} {'causal' if causal else 'non-causal'}; misses "
                     f"{kv['misses_change_pct']:+.0f}% (st{min(r['stages'] for r in rows)})",
                     fontsize=9)
        ax.set_xlabel("DRAM bandwidth taken by the streamer (GB/s, measured)", fontsize=8)
        ax.grid(True, lw=0.3, alpha=0.6)
    for ax in axes[:, 0]:
        ax.set_ylabel("sawtooth vs linear, kernel time (%)\n(below 0: sawtooth faster)",
                      fontsize=8)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    h, lab = axes[0][0].get_legend_handles_labels()
    fig.legend(h, lab, loc="outside lower center", ncol=min(6, max(1, int(4.1 * ncols / 2.1))),
               fontsize=7, frameon=False)
    dev = data["device"] or gpu_name(arch)
    fig.suptitle(f"Where a miss costs time: {dev}, runs {', '.join(data['runs'])} (filled: "
                 f"a difference by the repeat rule; hollow: none; dotted line: DRAM peak)",
                 fontsize=9)
    return fig


def main(argv=None) -> int:
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

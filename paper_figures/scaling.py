"""scaling: TFLOPS vs S per backend (cuTile, raw CUDA, SDPA flash, SDPA cuDNN), one panel per
head dim and causal mode (scaling study); markers: the median of the timed samples, error bars
their min..max."""
from __future__ import annotations

import sys

from . import lines
from .data import Skip, sources, tflops_stats
from .style import gpu_name

FIGURE = "scaling"
STUDIES: tuple[str, ...] = ("scaling",)
BACKENDS = ("cutile", "cuda", "sdpa-flash", "sdpa-cudnn")


def load(rows: list[dict]) -> dict:
    stats = [s for s in tflops_stats(rows, "scaling").values() if s["backend"] in BACKENDS]
    if not stats:
        raise Skip("no rows of the scaling study (kernel_time_ms or tflops of cutile, cuda, "
                   "sdpa-flash, sdpa-cudnn)")
    panels: dict[tuple, dict] = {}
    for s in stats:
        panels.setdefault((s["D"], s["causal"], s["B"], s["H"]), {}).setdefault(
            (s["backend"], s["source"]), []).append(s)
    return {"panels": dict(sorted(panels.items())), "sources": sources(stats)}


def plot(data: dict, arch: str | None = None):
    keys = list(data["panels"])
    fig, axes = lines.panels(len(keys), 2, width=5.6, height=3.8)
    for ax, key in zip(axes, keys):
        D, causal, B, H = key
        for (backend, source), pts in sorted(data["panels"][key].items(),
                                             key=lambda kv: BACKENDS.index(kv[0][0])):
            pts = sorted(pts, key=lambda s: s["S_q"])
            lines.series(ax, [s["S_q"] for s in pts], [s["tflops"] for s in pts], backend, source,
                         yerr=([s["tflops_lo"] for s in pts], [s["tflops_hi"] for s in pts]))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length S (tokens, log2)")
        ax.set_ylabel("TFLOP/s")
        ax.set_ylim(bottom=0)
        ax.set_title(f"D={D}, {'causal' if causal else 'non-causal'}, B={B}, H={H}", fontsize=9)
        lines.legend(ax, loc="lower right")
    lines.title(fig, f"scaling: attention forward TFLOP/s vs S, {gpu_name(arch)}",
                data["sources"])
    return fig


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

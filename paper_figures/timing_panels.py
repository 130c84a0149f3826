"""Throughput and time figures of the sawtooth study (F8b, F8c, F9b, F10b): grouped bars of the
median over the timed samples, error bars from the slowest to the fastest sample, and the SDPA
peers measured in the same run for the same problem.

Data: one run of the sawtooth study (``python -m experiments.run sawtooth --arch <arch>``): samples
of several loaded runs are never pooled; the original is drawn and its repeats (-r2, -r3) are left
to the ``repeats`` figure (``data.one_run``), which the title says when it happens."""
from __future__ import annotations

import math

from analysis.data.published import schedule_kind

from .bars import grouped_bars
from .cutile_panels import _schedule_name
from .data import Skip, one_run, sources, tflops_stats
from .modules import figure_module
from .published import paper_panel, with_paper
from .style import gpu_name, seq_label

PEERS = ("sdpa-flash", "sdpa-cudnn")
QUANTITY = {"tflops": ("TFLOP/s (median; bars: sample min..max)", "tflops"),
            "ms": ("kernel time (ms, median; bars: sample min..max)", "ms")}


def _bars(stats: list[dict], group_of, groups: list, quantity: str):
    series, errors = {}, {}
    for s in stats:
        key = (s["order"], s["source"])
        vals = series.setdefault(key, [math.nan] * len(groups))
        lo, hi = errors.setdefault(key, ([math.nan] * len(groups), [math.nan] * len(groups)))
        i = groups.index(group_of(s))
        vals[i], lo[i], hi[i] = s[quantity], s[f"{quantity}_lo"], s[f"{quantity}_hi"]
    return series, errors


def _note(data: dict) -> str:
    return f"\n{data['run']['note']}" if data.get("run", {}).get("note") else ""


def load_cuda_batch(rows: list[dict], quantity: str) -> dict:
    rows, run = one_run(rows, "sawtooth")
    stats = tflops_stats(rows, "sawtooth", causal=False)
    cuda = [s for s in stats.values() if s["backend"] == "cuda"]
    if quantity == "ms":
        cuda = [s for s in cuda if not math.isnan(s["ms"])]
    if not cuda:
        raise Skip("no CUDA timing rows of the sawtooth study (kernel_time_ms / tflops)")
    batches = sorted({s["B"] for s in cuda})
    S = cuda[0]["S_q"]
    series, errors = _bars(cuda, lambda s: s["B"], batches, quantity)
    peers = {}
    for s in stats.values():
        if s["backend"] in PEERS and s["S_q"] == S and s["B"] in batches \
                and s["D"] == cuda[0]["D"] and not math.isnan(s[quantity]):
            vals = peers.setdefault((s["backend"], s["source"]), [math.nan] * len(batches))
            vals[batches.index(s["B"])] = s[quantity]
    return {"groups": [f"B={b}" for b in batches], "series": series, "errors": errors,
            "peers": peers, "S": S, "sources": sources(cuda), "run": run,
            "paper": paper_panel("cuda", False, batches, "tflops") if quantity == "tflops"
            else None}


def plot_cuda_batch(data: dict, figure: str, quantity: str, arch: str | None):
    what = "throughput" if quantity == "tflops" else "kernel time"
    return with_paper(lambda ax: grouped_bars(
        data["groups"], data["series"], ylabel=QUANTITY[quantity][0], ax=ax,
        errors=data["errors"], peers=data["peers"],
        title=f"{figure}: CUDA split-Q {what}, S={seq_label(data['S'])}, 80×80 tiles, "
              f"non-causal\n{gpu_name(arch)}" + _note(data)), data)


def load_cutile(rows: list[dict], causal: bool) -> dict:
    rows, run = one_run(rows, "sawtooth")
    stats = tflops_stats(rows, "sawtooth", causal=causal)
    ct = [s for s in stats.values() if s["backend"] == "cutile"]
    if not ct:
        raise Skip(f"no cuTile {'causal' if causal else 'non-causal'} timing rows of the sawtooth "
                   "study (kernel_time_ms / tflops)")
    schedules = sorted({s["schedule"] for s in ct})
    ref = ct[0]
    series, errors = _bars(ct, lambda s: s["schedule"], schedules, "tflops")
    peers = {(s["backend"], s["source"]): s["tflops"] for s in stats.values()
             if s["backend"] in PEERS and (s["B"], s["H"], s["S_q"], s["D"])
             == (ref["B"], ref["H"], ref["S_q"], ref["D"])}
    return {"groups": [_schedule_name(s) for s in schedules], "series": series, "errors": errors,
            "peers": peers, "S": ref["S_q"], "B": ref["B"], "sources": sources(ct), "run": run,
            "paper": paper_panel("cutile", causal, [schedule_kind(s) for s in schedules],
                                 "tflops")}


def plot_cutile(data: dict, figure: str, causal: bool, arch: str | None):
    mode = "causal" if causal else "non-causal"
    return with_paper(lambda ax: grouped_bars(
        data["groups"], data["series"], ylabel=QUANTITY["tflops"][0], ax=ax,
        errors=data["errors"], peers=data["peers"],
        title=f"{figure}: cuTile {mode} throughput, B={data['B']}, S={seq_label(data['S'])}, "
              f"64×64 tiles\n{gpu_name(arch)}" + _note(data)), data)


def cuda_batch_module(name: str, figure: str, quantity: str) -> tuple:
    """``(ROWS, load, plot, main)`` of F8b (``quantity`` "tflops") or F8c ("ms")."""
    return figure_module(name, {"backend": "cuda", "causal": False},
                         lambda rows: load_cuda_batch(rows, quantity),
                         lambda data, arch=None: plot_cuda_batch(data, figure, quantity, arch))


def cutile_module(name: str, figure: str, causal: bool) -> tuple:
    """``(ROWS, load, plot, main)`` of F9b (``causal`` False) or F10b (True)."""
    return figure_module(name, {"backend": "cutile", "causal": causal},
                         lambda rows: load_cutile(rows, causal=causal),
                         lambda data, arch=None: plot_cutile(data, figure, causal, arch))

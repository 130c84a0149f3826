"""Drawing figure modules into a new output directory: PNG and PDF per figure, tables also as
CSV and markdown, ``figures.json`` (per figure its files and the runs it drew, or why it was not
drawn), and the one-line summary of a render. Imports no figure module, so a figure's own
``main()`` can use it without an import cycle."""
from __future__ import annotations

import csv
import json
import textwrap
from pathlib import Path

from analysis.datasets import new_directory, run_of

from .data import Skip, primary_run, run_name, runs_of

STUDIES = {"F1": ("l1l2",), "F2": ("l1l2",), "T1": ("l1l2",), "F3": ("traffic",),
           "F4": ("traffic",), "T2": ("traffic",), "F5": ("divergence",),
           "F6": ("active-sms", "l1l2"), "F7": (), "F8a": ("sawtooth",), "F8b": ("sawtooth",),
           "F8c": ("sawtooth",), "F9a": ("sawtooth",), "F9b": ("sawtooth",), "F10a": ("sawtooth",),
           "F10b": ("sawtooth",), "repeats": ("sawtooth",), "ladder": ("ladder",),
           "scaling": ("scaling",), "longseq": ("longseq",), "drift": ("drift",),
           "reuse": ("reuse",), "misscost": ("misscost",), "misscost_regimes": ("misscost",)}
"""The studies each figure reads (F6 reads the first of its two that has rows); ``repeats`` and
the two misscost figures draw every run of their study (``ALL_RUNS``), every other figure one
(``data.one_run``)."""
ALL_RUNS = ("repeats", "misscost", "misscost_regimes")


def write_table(columns: list[str], rows: list[list], stem: Path) -> list[str]:
    """``<stem>.csv`` and a print-friendly ``<stem>.md``; returns the file names."""
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        w.writerows(rows)
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(str(c)), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    fmt = lambda r: "| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    md = [fmt([str(c) for c in columns]), "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"]
    md += [fmt(r) for r in cells]
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    return [stem.with_suffix(".csv").name, stem.with_suffix(".md").name]


def runs_drawn(rows: list[dict], figure: str) -> list[str]:
    """The runs a figure drew from ``rows``: every loaded run of its study for ``ALL_RUNS``, else
    the primary run of the first of its studies that has rows (names as ``data.run_name``)."""
    for study in STUDIES[figure]:
        runs = runs_of(rows, study)
        if runs:
            return [run_name(r) for r in runs] if figure in ALL_RUNS \
                else [run_name(primary_run(rows, study))]
    return []


def simulated_params(rows: list[dict], figure: str, drawn: list[str] | None = None) -> str:
    """What the simulated rows a figure drew assumed: the words of their notes that every one of
    them has, in order (the simulator and its parameters, ``timesim capacity=24.00MiB
    partitions=1 miss_ratio=1 ... params gb10: f=1 r=1 (defaults, not fitted)``, or the lock-step
    capacity; a per-case value such as a SHARDS rate drops out), so that a figure names the
    parameters its simulated numbers came from; '' when it drew none. ``drawn``: the figure's
    ``runs_drawn``, when the caller has them."""
    drawn = set(runs_drawn(rows, figure) if drawn is None else drawn)
    notes = sorted({r["note"] for r in rows if r.get("source") == "simulated" and r.get("note")
                    and r["study"] in STUDIES[figure] and run_name(run_of(r)) in drawn})
    if not notes:
        return ""
    shared = set.intersection(*(set(n.split()) for n in notes))
    return " ".join(w for w in notes[0].split() if w in shared)


def render(rows: list[dict], arch: str, out_dir: Path, modules, console=None,
           each: bool = True, names: dict[str, str] | None = None) -> list[dict]:
    """Draw the figure ``modules`` into the new directory ``out_dir`` as PNG and PDF,
    tables also as CSV and markdown, and ``figures.json``; returns one record per figure. With
    ``each``, ``console`` gets one line per figure (drawn or skipped, with the reason); otherwise
    the caller prints ``summary(report, out_dir)``. Nothing is written when no figure is drawn.
    ``out_dir`` must not exist (or be empty): ``FileExistsError`` otherwise."""
    import matplotlib.pyplot as plt
    report = []
    with new_directory(out_dir) as tmp:
        for mod in modules:
            try:
                data = mod.load(rows)
                fig = mod.plot(data, arch)
            except Skip as why:
                report.append({"figure": mod.FIGURE, "skipped": str(why)})
                if console is not None and each:
                    console.print(f"  {mod.FIGURE}: skipped ({why})")
                continue
            drawn = runs_drawn(rows, mod.FIGURE)
            if drawn:
                fig.text(0.002, 0.998, "data: " + ", ".join(drawn), fontsize=6, color="#555555",
                         ha="left", va="top")
            sim = simulated_params(rows, mod.FIGURE, drawn)
            if sim:
                fig.text(0.002, 0.002, "\n".join(textwrap.wrap(f"simulated: {sim}", 160)),
                         fontsize=5, color="#555555", ha="left", va="bottom")
            paths = []
            for ext in ("png", "pdf"):
                fig.savefig(tmp / f"{mod.FIGURE}.{ext}", dpi=150)
                paths.append(f"{mod.FIGURE}.{ext}")
            plt.close(fig)
            if hasattr(mod, "table"):
                paths += write_table(*mod.table(data, arch), tmp / mod.FIGURE)
            report.append({"figure": mod.FIGURE, "files": paths, "runs": drawn})
            if console is not None and each:
                console.print(f"  {mod.FIGURE}: {', '.join(paths)}"
                              + (f" ({', '.join(drawn)})" if drawn else ""))
        if any("files" in r for r in report):
            (tmp / "figures.json").write_text(json.dumps({"arch": arch, "figures": report},
                                                         indent=1) + "\n")
    return report


def summary(report: list[dict], out_dir: Path) -> str:
    """One line for a render: 'drew N figures in DIR; M not applicable to this run'."""
    drawn = sum("files" in r for r in report)
    return (f"drew {drawn} figure(s) in {out_dir}; {len(report) - drawn} not applicable to this "
            f"run" if drawn else f"no figure applies to this run ({len(report)} skipped)")

"""Drawing figure modules into a new output directory: PNG and PDF per figure, tables also as
CSV and markdown, ``figures.json`` (per figure its files and the runs it drew, or why it was not
drawn), and the one-line summary of a render. Imports no figure module, so a figure's own
``main()`` can use it without an import cycle."""
from __future__ import annotations

import csv
import functools
import json
import re
import textwrap
from pathlib import Path

from analysis.data import RUN_DIR, DatasetError, new_directory, read_manifest, run_of

from .catalogue import figure_studies
from .data import Skip, primary_run, run_name, runs_of
from .style import CHAR_EM, gpu_name, wrap_to

ALL_RUNS = ("repeats", "misscost", "misscost_regimes")
"""The figures that draw every run of their study (the others draw one, ``data.one_run``)."""


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
    for study in figure_studies()[figure]:
        runs = runs_of(rows, study)
        if runs:
            return [run_name(r) for r in runs] if figure in ALL_RUNS \
                else [run_name(primary_run(rows, study))]
    return []


def _simulated(rows: list[dict], figure: str, drawn: list[str], select: dict | None) -> list:
    """The simulated rows a figure drew: of its studies, in its runs, and matching ``select``
    (the figure module's ``ROWS``: e.g. only the causal cuTile rows of F10a)."""
    studies = figure_studies()[figure]
    return [r for r in rows if r.get("source") == "simulated" and r["study"] in studies
            and run_name(run_of(r)) in drawn
            and all(r.get(k) == v for k, v in (select or {}).items())]


_PARAMS = re.compile(r"params \S+?(?::[^;(]*\([^)]*\))?(?=;|$)")


def simulated_params(rows: list[dict], figure: str, drawn: list[str] | None = None,
                     select: dict | None = None) -> str:
    """What the simulated rows a figure drew assumed, written for those rows: whether they are
    causal, the simulator's settings every one of them shares (the ``key=value`` head of their
    notes, ``timesim model=... partitions=1 ...``: a per-case value such as a SHARDS rate, a step
    time or a capacity drops out) and their parameter set (``params gb10: f=1 r=1 (defaults,
    not fitted)``); '' when it drew none. The prose of a note (where a step time was measured,
    on which problem) is per case and stays in the run's CSV: intersecting it word by word
    made a salad. ``drawn``: the figure's ``runs_drawn``; ``select``: its ``ROWS``."""
    drawn = runs_drawn(rows, figure) if drawn is None else drawn
    sim = _simulated(rows, figure, drawn, select)
    notes = sorted({r["note"] for r in sim if r.get("note")})
    if not notes:
        return ""
    heads = [n.split(" pipeline(")[0].split(";")[0].split() for n in notes]
    shared = set.intersection(*(set(h) for h in heads))
    words = [w for w in heads[0] if w in shared]
    params = {m.group(0) for n in notes for m in _PARAMS.finditer(n)}
    words += sorted(params) if len(params) == 1 else []
    causal = {bool(r["causal"]) for r in sim if r.get("causal") is not None}
    setting = ({True: "causal rows: ", False: "non-causal rows: "}[causal.pop()]
               if len(causal) == 1 else "causal and non-causal rows: " if causal else "")
    return setting + " ".join(words)


FOOTER_PT = 6
_CAPACITY = re.compile(r"capacity=([\d.]+)MiB")
_STACKS = re.compile(r"stacks [^:;]*: ([\d.]+) MiB in L2")


def context(rows: list[dict], figure: str, arch: str | None, drawn: list[str],
            select: dict | None = None) -> str:
    """The GPU and its L2 for a title, and the simulated capacity when the figure drew simulated
    rows ('NVIDIA GB10 (gb10), L2 24 MiB; simulated L2 20 MiB'). A capacity below the arch's L2
    says why when the rows' notes do: a build whose register stacks spill keeps them in L2, and
    the simulator gives the K/V tiles only the rest ('simulated L2 21.98 MiB usable of 24 MiB:
    2.0 MiB holds a build's spilled stacks')."""
    text = gpu_name(arch)
    l2 = None
    try:
        from spec import get_arch
        l2 = get_arch(arch).l2_bytes / 2**20
        text += f", L2 {l2:g} MiB"
    except Exception:       # noqa: BLE001 - an arch outside the registry: its name alone
        pass
    caps: dict[float, set[str]] = {}
    for r in _simulated(rows, figure, drawn, select):
        if m := _CAPACITY.search(r.get("note") or ""):
            st = _STACKS.search(r["note"])
            caps.setdefault(float(m.group(1)), set()).update([st.group(1)] if st else [])
    parts = []
    for cap, stacks in sorted(caps.items(), reverse=True):
        if stacks and l2 is not None and cap < l2:
            parts.append(f"{cap:g} MiB usable of {l2:g} MiB ({' / '.join(sorted(stacks))} MiB "
                         "holds a build's spilled stacks)")
        else:
            parts.append(f"{cap:g} MiB")
    if parts:
        text += "; simulated L2 " + ", ".join(parts)
    return text


def _stamp_title(fig, ctx: str, arch: str | None) -> None:
    """Put ``ctx`` in the figure's title: in place of the GPU's name where the title names it,
    else as its last line (the suptitle, or the first panel's title)."""
    sup = getattr(fig, "_suptitle", None)
    target = sup if sup is not None and sup.get_text() else (fig.axes[0].title if fig.axes
                                                             else None)
    if target is None or not target.get_text():
        fig.suptitle(ctx, fontsize=9)
        return
    text, name = target.get_text(), gpu_name(arch)
    text = text.replace(name, ctx, 1) if name in text else f"{text}\n{ctx}"
    width = fig.get_size_inches()[0]
    if target is not sup:                # a panel's title: as wide as its panel
        width *= target.axes.get_position().width
    target.set_text(wrap_to(text, 0.97 * width, target.get_fontsize()))


def _footer(fig, lines: list[str], pt: float = FOOTER_PT) -> None:
    """``lines`` at the foot of the figure in ``pt`` points, wrapped to its width, in a band the
    figure grows by (the panels keep their size and never overlap it)."""
    w_in, h_in = fig.get_size_inches()
    chars = max(30, int(w_in * 72 / (pt * CHAR_EM)))
    wrapped = [w for line in lines for w in textwrap.wrap(line, chars, break_on_hyphens=False)]
    band = (len(wrapped) * pt * 1.3 + 6) / 72
    fig.set_size_inches(w_in, h_in + band)
    frac = band / (h_in + band)
    engine = fig.get_layout_engine()
    if engine is not None and hasattr(engine, "set") and "rect" in engine.get():
        engine.set(rect=(0, frac, 1, 1 - frac))
        # an "outside lower" legend gets its margin inside the rect but is anchored to the
        # figure's own bottom, where the band is: anchor it to the rect instead (without
        # set_bbox_to_anchor, which would make the layout stop reserving its margin)
        from matplotlib.transforms import Bbox, TransformedBbox
        area = TransformedBbox(Bbox([[0, frac], [1, 1]]), fig.transFigure)
        for leg in fig.legends:
            if getattr(leg, "_outside_loc", None) and leg._bbox_to_anchor is None:
                leg.get_bbox_to_anchor = lambda area=area: area
    else:
        fig.subplots_adjust(bottom=frac + 0.08 * (1 - frac))
    fig.text(0.004, 3 / 72 / (h_in + band), "\n".join(wrapped), fontsize=pt,
             color="#555555", ha="left", va="bottom", linespacing=1.2, gid="footer")


@functools.lru_cache(maxsize=None)
def _dirty(run_dir: str) -> str | None:
    """The commit of a run whose manifest records a tree with uncommitted changes (short, or
    "unknown"), None for a clean or unknown tree (read once per run)."""
    try:
        g = read_manifest(Path(run_dir)).get("git") or {}
    except DatasetError:
        return None
    if not (isinstance(g, dict) and g.get("dirty")):
        return None
    return str(g.get("commit") or "unknown")[:7]


def _dirty_runs(rows: list[dict]) -> dict[str, str]:
    """The runs (by name) whose manifest records a tree with uncommitted changes, with the
    commit they were made from."""
    dirs = {run_name(run_of(r)): run_of(r) for r in rows if r.get(RUN_DIR)}
    return {name: c for name, d in dirs.items() if (c := _dirty(d))}


def finish(fig, rows: list[dict], figure: str, arch: str | None, drawn: list[str],
           shown: list[str] | None = None, select: dict | None = None,
           footer_pt: float = FOOTER_PT) -> None:
    """What every drawn figure carries: the GPU, its L2 and any simulated capacity in the title
    (a figure of data);
    at its foot, the runs it drew (``shown``: their names as the reader should see them) and the
    parameters of its simulated rows. ``select``: the figure module's ``ROWS`` (the title and
    the foot speak of those rows only)."""
    if figure_studies().get(figure):              # a figure of data (F7 is a diagram of the orders)
        _stamp_title(fig, context(rows, figure, arch, drawn, select), arch)
    dirty = _dirty_runs(rows)
    names = shown if shown is not None else drawn
    names = [f"{n} (commit {dirty[d]} + uncommitted edits)" if d in dirty else n
             for n, d in zip(names, drawn)]
    lines = [f"data: {', '.join(names)}"] if drawn else []
    sim = simulated_params(rows, figure, drawn, select)
    if sim:
        lines.append(f"simulated: {sim}")
    if lines:
        _footer(fig, lines, footer_pt)


def render(rows: list[dict], arch: str, out_dir: Path, modules, console=None,
           each: bool = True, names: dict[str, str] | None = None) -> list[dict]:
    """Draw the figure ``modules`` into the new directory ``out_dir`` as PNG and PDF,
    tables also as CSV and markdown, and ``figures.json``; returns one record per figure. With
    ``each``, ``console`` gets one line per figure (drawn or skipped, with the reason); otherwise
    the caller prints ``summary(report, out_dir)``. Nothing is written when no figure is drawn.
    ``out_dir`` must not exist (or be empty): ``FileExistsError`` otherwise. ``names`` maps a
    run directory to the name figures show for it (a run drawn while it is written lives in a
    temporary directory: its figures name the run it becomes)."""
    import matplotlib.pyplot as plt
    report = []
    display = {run_name(k): v for k, v in (names or {}).items()}
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
            shown = [display.get(d, d) for d in drawn]
            finish(fig, rows, mod.FIGURE, arch, drawn, shown, getattr(mod, "ROWS", None))
            paths = []
            for ext in ("png", "pdf"):
                fig.savefig(tmp / f"{mod.FIGURE}.{ext}", dpi=150)
                paths.append(f"{mod.FIGURE}.{ext}")
            plt.close(fig)
            if hasattr(mod, "table"):
                paths += write_table(*mod.table(data, arch), tmp / mod.FIGURE)
            report.append({"figure": mod.FIGURE, "files": paths, "runs": shown})
            if console is not None and each:
                console.print(f"  {mod.FIGURE}: {', '.join(paths)}"
                              + (f" ({', '.join(shown)})" if shown else ""))
        if any("files" in r for r in report):
            (tmp / "figures.json").write_text(json.dumps({"arch": arch, "figures": report},
                                                         indent=1) + "\n")
    return report


def summary(report: list[dict], out_dir: Path) -> str:
    """One line for a render: 'drew N figures in DIR; M not applicable to this run'."""
    drawn = sum("files" in r for r in report)
    return (f"drew {drawn} figure(s) in {out_dir}; {len(report) - drawn} not applicable to this "
            f"run" if drawn else f"no figure applies to this run ({len(report)} skipped)")

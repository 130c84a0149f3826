"""What a user reads: the plan table of ``--dry-run`` and the results table at the end of a run
(both fit the terminal: every variant id whole, whole columns left out from the right when it is
narrow, ``fit_table``), the notes, the figures line. The full results are always the run's CSV."""
from __future__ import annotations

import statistics

from spec.arch import MiB
from spec.case import Case

from ..registry.lengths import kv_bytes_per_head


def si_count(x: float) -> str:
    """Counts with an SI suffix (the full values are in the CSV)."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.1f}{suffix}"
    return f"{x:.0f}"


def panels(cases: list[Case]) -> tuple[dict[str, list[Case]], set[str]]:
    """Cases by panel, and which of B, S and the problem label vary inside a panel (those are
    columns; the rest goes into the panel's heading line)."""
    out: dict[str, list[Case]] = {}
    for c in cases:
        out.setdefault(c.panel, []).append(c)
    varies = {k for k, f in (("B", lambda c: c.problem.B), ("S", lambda c: c.problem.S_q))
              if any(len({f(c) for c in group}) > 1 for group in out.values())}
    # problems that differ in more than B and S (heads, dtype, S_kv: the shapes study) are named
    # by their label, or two rows of one variant would look alike
    if any(len({(c.variant.id(c.problem), c.problem.B, c.problem.S_q) for c in g})
           < len({(c.variant.id(c.problem), c.problem) for c in g}) for g in out.values()):
        varies = {"problem"}
    return out, varies


def heading(panel: str, group: list[Case], varies: set[str]) -> str:
    head = panel
    if "problem" not in varies:
        if "B" not in varies:
            head += f"  B={group[0].problem.B}"
        if "S" not in varies:
            head += f" S={group[0].problem.S_q}"
    return head


def case_cells(c: Case) -> dict:
    return {"variant": c.variant.id(c.problem), "B": c.problem.B, "S": c.problem.S_q,
            "problem": c.problem.label}


SHAPE_COLUMNS = (("variant", "variant", str), ("problem", "problem", str), ("B", "B", str),
                 ("S", "S", str))


def fit_table(cells: list, cols: list, width: int, title: str | None = None):
    """A rich Table of ``cells`` (str: a bold heading row; dict: a row keyed like ``cols``, a
    list of (key, header, format)) no wider than ``width``: the first column is never cut and
    columns are left out from the right until it fits. Returns (table, headers left out)."""
    from rich import box
    from rich.table import Table
    data = [d for d in cells if isinstance(d, dict)]
    text = lambda d, k, f: "" if d.get(k) is None else f(d[k])    # noqa: E731
    cols = list(cols)

    def widths(cols):
        w = [max([len(h)] + [len(text(d, k, f)) for d in data]) for k, h, f in cols]
        w[0] = max(w[0], *(len(c) for c in cells if isinstance(c, str)))
        return sum(w) + 3 * (len(cols) - 1)     # pad, rule, pad between columns

    left_out = []
    while len(cols) > 1 and widths(cols) > width:
        left_out.append(cols.pop()[1])
    t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=False,
              title_justify="left")
    for i, (k, h, f) in enumerate(cols):
        t.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
    for c in cells:
        if isinstance(c, str):
            t.add_row(f"[bold]{c}[/]", *[""] * (len(cols) - 1))
        else:
            t.add_row(*(text(c, k, f) for k, h, f in cols))
    return t, left_out[::-1]


def shape_columns(varies: set[str]) -> list:
    return [(k, h, f) for k, h, f in SHAPE_COLUMNS if k == "variant" or k in varies]


# (key, header, format) of the results, left out from the right when the table is too wide: the
# paper's count and the error against it come right after the misses, so that they stay at 80
# columns (GB10's main study: the variant id, B, Δ, the misses and these two: 80)
_RESULTS = (("d_miss", "Δ miss", "{:+.1f}%".format), ("miss", "misses", si_count),
            ("pub", "paper", si_count), ("err", "err", "{:+.0f}%".format),
            ("d_ms", "Δ time", "{:+.1f}%".format), ("ms", "time ms", "{:.3f}".format),
            ("d_nc", "Δ non-comp.", "{:+.1f}%".format), ("nc", "non-comp.", si_count),
            ("tf", "TFLOPS", "{:.1f}".format))


def published_misses(arch: str) -> dict:
    """{paper case key: (published misses, S, D)} of the paper's GB10 reference
    (``analysis.data.published``) when ``arch`` is GB10, else {}: the numbers a GB10 run is
    compared with, never fitted to."""
    if arch != "gb10":
        return {}
    from analysis.data.published import read_published
    return {c.key: (c.misses, c.S, c.D) for c in read_published()}


def paper_key(c: Case) -> tuple | None:
    """The paper's case this one stands for; None for a backward pass (the paper measured the
    forward only)."""
    from analysis.data.published import key_of_row
    v, p = c.variant, c.problem
    if v.bwd is not None:
        return None
    return key_of_row({"backend": v.backend.value, "schedule": v.schedule.label,
                       "causal": p.causal, "B": p.B, "order": v.order.label})


def summary_table(cases: list[Case], rows: list, title: str, width: int,
                  published: dict | None = None):
    """The results as a rich Table that fits ``width`` columns, and the headers left out.

    One row per case under a heading line per panel (its B and S when the panel has one of
    each): misses, non-compulsory misses, time, TFLOPS and the change against the case's linear
    twin (same panel, problem, schedule and tiles); with ``published`` (``published_misses``),
    the paper's count of the case at the paper's S and D and the error against it."""
    from spec.records import PROBLEM_COLUMNS as shape
    from spec.records import Metric, case_fields

    values: dict = {}
    for r in rows:
        values.setdefault((r.variant, *(getattr(r, k) for k in shape), r.metric),
                          []).append(r.value)

    def get(c: Case, metric: str):
        p = case_fields(c.problem)
        v = values.get((c.variant.id(c.problem), *(p[k] for k in shape), metric))
        return statistics.median(v) if v else None

    def twin(c: Case) -> Case | None:
        return next((t for t in cases if t.panel == c.panel and t.problem == c.problem
                     and t.variant.schedule == c.variant.schedule
                     and t.variant.tiles == c.variant.tiles
                     and t.variant.order.label == "linear"), None)

    def change(mine, theirs):
        return None if mine is None or not theirs else 100 * (mine / theirs - 1)

    metric = {"miss": Metric.L2_TEX_MISSES, "nc": Metric.NONCOMPULSORY_MISSES,
              "ms": Metric.KERNEL_TIME_MS, "tf": Metric.TFLOPS}
    groups, varies = panels(cases)
    cells: list[dict | str] = []
    for panel, group in groups.items():
        cells.append(heading(panel, group, varies))
        for c in group:
            base = twin(c)
            base = None if base is c else base
            d = case_cells(c) | {k: get(c, m) for k, m in metric.items()}
            pub = (published or {}).get(paper_key(c))
            if pub and (c.problem.S_q, c.problem.D) == pub[1:]:
                d["pub"] = pub[0]
                d["err"] = change(d["miss"], pub[0])
            if base is not None:
                for key, src in (("d_miss", "miss"), ("d_nc", "nc"), ("d_ms", "ms")):
                    d[key] = change(d[src], get(base, metric[src]))
            cells.append(d)
    data = [d for d in cells if isinstance(d, dict)]
    cols = shape_columns(varies) + [(k, h, f) for k, h, f in _RESULTS
                                    if any(d.get(k) is not None for d in data)]
    return fit_table(cells, cols, width, title)


def model_label(params: dict) -> str:
    if params["model"] == "lockstep":
        return "lock-step fully associative LRU"
    p = params["params"]
    how = ("SHARDS-sampled: each row's note states its spread over seeds"
           if params.get("sampled") else "exact")
    return (f"timed model, {how}, {p['partitions']} partition(s), r={p['miss_ratio']:g}, "
            f"{'fitted on ' + p['fit_study'] if p['fitted'] else 'default parameters, not fitted'}")


def fits_notes(cases: list[Case], capacity: int) -> list[str]:
    """A line per sequence length whose K+V per head fits in the simulated capacity: there,
    after the first pass over a head, its K/V tiles can all stay cached, whatever the order."""
    out = {}
    for p in sorted({c.problem for c in cases}, key=lambda p: (p.S_kv, p.D)):
        kv = kv_bytes_per_head(p)
        if kv <= capacity and (p.S_kv, kv) not in out:
            s_max = capacity // (2 * p.D * p.dtype.nbytes)
            out[p.S_kv, kv] = (f"note: at S={p.S_kv} K+V per head ({kv / MiB:.3g} MiB) fits in "
                               f"the {capacity / MiB:g} MiB simulated L2, so the K/V order can "
                               f"save few misses; it exceeds it for S > {s_max}, or pass "
                               f"--capacity-mib below {kv / MiB:.3g}")
    return list(out.values())


def render_figures(work, final, arch: str, figures: tuple[str, ...] | None = None) -> list[dict]:
    """The figures (all, or those named) of the run being written in ``work``, titled with its
    final name (not the temporary directory's)."""
    from analysis.data import load_rows
    from paper_figures import FIGURES
    from paper_figures.drawing import render
    mods = [m for m in FIGURES if figures is None or m.FIGURE in figures]
    return render(load_rows([work]), arch, work / "figures", mods, names={str(work): final.name})


def figure_lines(study, report: list[dict], where: str) -> list[str]:
    """The study's figures (drawn, or skipped with the reason) and one line for all others."""
    mine = [r for r in report if r["figure"] in study.figures]
    drawn = [r["figure"] for r in report if "files" in r]
    lines = [f"figures: {', '.join(drawn)} in {where}" if drawn else "figures: none drawn"]
    lines += [f"  {r['figure']}: skipped ({r['skipped']})" for r in mine if "skipped" in r]
    others = [r for r in report if r["figure"] not in study.figures and "skipped" in r]
    if others:
        lines.append(f"  {len(others)} figures of other studies skipped (no rows for them in "
                     "this run)")
    return lines

"""What the user of the experiments CLI reads: the results table at 80 columns, one row per
problem, the figure lines, and the note that the data fit the cache."""
from __future__ import annotations

import pytest

from experiments.registry.studies import get_study
from spec import get_arch
from spec.records import Metric
from tests.cpu.experiments.cli_helpers import cli


def _rows_for(cases, metrics):
    from spec.records import UNITS, Row, case_fields
    rows = []
    for c in cases:
        for m, base in metrics.items():
            value = base * (0.7 if c.variant.order.label == "sawtooth" else 1.0)
            rows.append(Row(run="r", study="s", arch="h100", metric=m, value=value,
                            unit=UNITS.get(m, ""), source="measured",
                            **case_fields(c.problem, c.variant)))
    return rows


@pytest.mark.parametrize("study", ["sawtooth", "longseq"])
def test_results_table_reads_in_80_columns(study):
    from rich.console import Console

    from experiments.run import summary_table
    cases = get_study(study).plan(get_arch("h100"))
    rows = _rows_for(cases, {Metric.L2_TEX_MISSES: 3.7e8, Metric.NONCOMPULSORY_MISSES: 1.2e8,
                             Metric.KERNEL_TIME_MS: 12.345, Metric.TFLOPS: 456.7})
    console = Console(width=80, record=True, color_system=None)
    table, left_out = summary_table(cases, rows, "MEASURED on fake H100", console.width)
    console.print(table)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    for c in cases:                                      # every variant id whole, on one line
        assert c.variant.id(c.problem) in text
    assert "…" not in text
    assert "Δ miss" in text and "-30.0%" in text        # the change against the linear twin
    assert left_out                                     # something had to go at 80 columns ...
    wide = Console(width=200, record=True, color_system=None)
    table, none = summary_table(cases, rows, "t", wide.width)
    wide.print(table)
    assert none == [] and "TFLOPS" in wide.export_text()     # ... and nothing at 200


def test_gb10_main_study_keeps_the_papers_columns_at_80_columns():
    """The main command's table at 80 columns: every variant id whole, and beside the simulated
    misses the paper's published count and the error against it (other columns go first)."""
    from rich.console import Console

    from experiments.run import published_misses, summary_table
    cases = get_study("sawtooth").plan(get_arch("gb10"))
    rows = _rows_for(cases, {Metric.L2_TEX_MISSES: 3.7e8, Metric.NONCOMPULSORY_MISSES: 1.2e8})
    console = Console(width=80, record=True, color_system=None)
    table, left_out = summary_table(cases, rows, "SIMULATED", console.width,
                                    published_misses("gb10"))
    console.print(table)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    header = next(ln for ln in text.splitlines() if ln.startswith("variant"))
    assert header.split()[-2:] == ["paper", "err"], header
    assert "paper" not in left_out and "err" not in left_out and "non-comp." in left_out
    for c in cases:
        assert c.variant.id(c.problem) in text


def test_main_command_footer_names_the_stored_published_file(tmp_path):
    """At COLUMNS=80 (a narrow terminal or log) the run prints its table at 80 columns, and the
    footer names the published dataset by its registered name and its stored file (.xz)."""
    import os
    r = cli("sawtooth", "--arch", "gb10", "--filter", r"cuda\..*b1h1", "--no-figures",
            "--out", str(tmp_path / "r"), env=os.environ | {"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert max(len(line) for line in out.splitlines()         # the next: hint is one command
               if not line.startswith(("simulate:", "next: "))) <= 80   # to copy: never wrapped
    assert sum(line.startswith("next: python -m paper_figures") for line in out.splitlines()) == 1
    flat = " ".join(out.split())
    assert "registered dataset profiles/gb10/paper-2601.16032, file published.csv.xz" in flat
    assert "paper-2601.16032/published.csv " not in flat and " err " in out


def test_results_table_names_problems_that_differ_beyond_b_and_s():
    """The shapes study runs one variant id on problems that differ only in heads or dtype: each
    row shows its own problem and its own time, never a median pooled over problems."""
    from rich.console import Console

    from experiments.run import summary_table
    from spec.records import UNITS, Metric, Row, case_fields
    cases = [c for c in get_study("shapes").plan(get_arch("h100"))
             if c.panel == "shapes-uneven" and c.problem.S_q == 1000]
    assert len({c.variant.id(c.problem) for c in cases}) < len(cases)   # ids repeat
    rows = [Row(run="r", study="shapes", arch="h100", metric=Metric.KERNEL_TIME_MS,
                value=0.001 * (i + 1), unit=UNITS[Metric.KERNEL_TIME_MS], source="measured",
                **case_fields(c.problem, c.variant)) for i, c in enumerate(cases)]
    console = Console(width=160, record=True, color_system=None)
    table, _ = summary_table(cases, rows, "t", console.width)
    console.print(table)
    text = console.export_text()
    for i, c in enumerate(cases):
        line = next(ln for ln in text.splitlines() if c.problem.label in ln
                    and c.variant.id(c.problem) in ln)
        assert f"{0.001 * (i + 1):.3f}" in line


def test_figure_lines_collapse_other_studies_skips():
    from experiments.run import _figure_lines
    study = get_study("sawtooth")
    report = [{"figure": "F8a", "files": ["F8a.png"]},
              {"figure": "F9a", "skipped": "no cuTile non-causal rows"}]
    report += [{"figure": f"X{i}", "skipped": "no rows"} for i in range(18)]
    lines = _figure_lines(study, report, "/r/figures")
    assert lines == ["figures: F8a in /r/figures", "  F9a: skipped (no cuTile non-causal rows)",
                     "  18 figures of other studies skipped (no rows for them in this run)"]


def test_small_data_says_that_it_fits_the_cache(tmp_path):
    r = cli("sawtooth", "--arch", "gb10", "--seq", "16384", "--filter", "cuda-batch",
            "--no-figures", "--out", str(tmp_path / "fits"))
    assert r.returncode == 0, r.stderr
    flat = " ".join(r.stdout.split())
    assert ("note: at S=16384 K+V per head (4 MiB) fits in the 24 MiB simulated L2" in flat
            and "exceeds it for S > 98304" in flat)
    assert "next: python -m paper_figures --arch gb10 --run" in flat
    r = cli("sawtooth", "--arch", "gb10", "--seq", "16384", "--capacity-mib", "3", "--filter",
            "cuda-batch", "--no-figures", "--out", str(tmp_path / "exceeds"))
    assert r.returncode == 0, r.stderr
    assert "fits in the" not in r.stdout

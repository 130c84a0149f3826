"""The paper's published GB10 numbers as a reference dataset (analysis.data.published) and the
findings section that sets them beside the simulated GB10 run and the H100 measurement."""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.data import DatasetError, catalogue, load_rows, registry, select
from analysis.data.published import PAPER, check_against, key_of_row, read_published
from analysis.findings.paper import case_table, implied_capacity, pair_table, summary
from analysis.models.traffic import MiB
from spec.records import data_path, read_bytes
from tests.conftest import ROOT

SHARED = ROOT.parent / "shared" / "paper-gb10-published.csv"


def test_the_reference_holds_the_16_published_cases_and_says_where_each_comes_from():
    cases = read_published()
    assert len(cases) == 16 and len({c.key for c in cases}) == 16
    assert {c.provenance.split(":")[0] for c in cases if c.backend == "cutile"} == {"exact"}
    assert all("bar chart" in c.provenance for c in cases if c.backend == "cuda")
    e = registry.entry(PAPER)
    assert e.role == "reference" and e.source == "published"
    static_causal = {c.order: c.misses for c in cases
                     if c.key[:3] == ("cutile", "static", True)}
    assert static_causal == {"linear": 629425276.0, "sawtooth": 95344684.0}


@pytest.mark.skipif(not SHARED.is_file(), reason="the shared copy is outside the repository")
def test_the_reference_equals_the_shared_table():
    src = [r for r in csv.DictReader(l for l in SHARED.read_text().splitlines()
                                     if not l.startswith("#"))]
    got = {c.line: c for c in read_published()}
    for i, r in enumerate(src, 2):
        assert got[i].misses == float(r["l2_misses"]) and got[i].tflops == float(r["tflops"])


def test_section_p_recomputes_its_numbers_from_the_committed_runs():
    cases = read_published()
    sim_rows = load_rows([select("gb10", "sawtooth", source="simulated")])
    h100 = load_rows([select("h100", "sawtooth")])
    check_against(cases, sim_rows, "the GB10 simulation")
    rows = case_table(cases, sim_rows, h100, "h100")
    by = {(r["case"], r["order"]): r for r in rows}
    sim = {key_of_row(r): r["value"] for r in sim_rows if r["metric"] ==
           "lts__t_sectors_srcunit_tex_lookup_miss.sum"}
    for c in cases:                                 # the error is simulated vs published
        r = by[(c.label, c.order)]
        assert r["sim_error_pct"] == pytest.approx(100 * (sim[c.key] - c.misses) / c.misses)
        assert r["h100_lo"] <= r["h100_measured"] <= r["h100_hi"]
    s = summary(rows)
    assert s["cases"] == s["simulated"] == 16
    assert s["within_10pct"] == sum(abs(r["sim_error_pct"]) <= 10 for r in rows)
    pairs = {r["case"]: r for r in pair_table(cases, sim_rows, h100, "h100")}
    assert len(pairs) == 8
    assert pairs["cuTile Static causal"]["paper_misses_change_pct"] == pytest.approx(
        100 * (95344684 - 629425276) / 629425276)
    assert {p["h100_verdict_on_misses"] for p in pairs.values()} <= {
        "confirms", "contradicts", "no difference"}


def test_the_implied_capacity_reads_the_published_counts_through_the_wave_model():
    from analysis.models.traffic import Shape
    from analysis.models.wave import wave_misses
    rows = implied_capacity(read_published(), 48, 24 * MiB)
    assert len(rows) == 5                               # the non-causal persistent sawtooth cases
    for r in rows:
        assert 15 < r["implied_c_eff_mib"] < 24
    c = next(c for c in read_published() if c.key == ("cuda", "static", False, 1, "sawtooth"))
    r = next(r for r in rows if r["case"] == c.label)
    back = wave_misses(Shape(S_q=c.S, D=c.D, T_m=c.tile, T_n=c.tile, B=c.B), 48,
                       r["implied_c_eff_mib"] * MiB / 32, "sawtooth")
    assert back == pytest.approx(c.misses, rel=1e-3)


def _broken(tmp_path: Path, line: int, field: str, value: str) -> Path:
    """A copy of the repository's profiles/ whose reference has one value changed, re-registered
    (so that the content check passes and the row check is what speaks)."""
    shutil.copytree(ROOT / "profiles", tmp_path / "profiles",
                    ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    stored = data_path(tmp_path / PAPER, "published.csv")       # committed compressed
    rows = list(csv.reader(read_bytes(stored).decode().splitlines()))
    stored.unlink()
    f = tmp_path / PAPER / "published.csv"
    rows[line - 1][rows[0].index(field)] = value
    with open(f, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    with registry.use_root(tmp_path):
        docs = [dict(vars(e)) for e in registry.entries().values()]
        docs = [d if d["path"] != "gb10/paper-2601.16032" else
                catalogue.entry_fields(d["path"], "reference") for d in docs]
        registry.write(docs)
    return tmp_path


@pytest.mark.parametrize("line, field, value, says", [
    (3, "l2_misses", "", "a value is missing"),
    (5, "tflops", "fast", "tflops 'fast' is not a number"),
    (7, "family", "triton", "is not a case of the sawtooth study"),
    (9, "order", "zigzag", "is not a case of the sawtooth study")])
def test_a_broken_reference_is_one_line_naming_the_row(tmp_path, line, field, value, says):
    root = _broken(tmp_path, line, field, value)
    with registry.use_root(root):
        with pytest.raises(DatasetError) as e:
            read_published()
    msg = str(e.value)
    assert "\n" not in msg and f"published.csv:{line}:" in msg and says in msg


def test_findings_on_a_broken_reference_exit_2_and_write_nothing(tmp_path):
    root = _broken(tmp_path, 4, "l2_misses", "n/a")
    out = tmp_path / "out"
    code = ("import sys; from analysis.data import registry\n"
            "from analysis.findings.__main__ import main\n"
            f"with registry.use_root({str(root)!r}):\n"
            f"    sys.exit(main(['--arch', 'h100', '--no-sim', '--out', {str(out)!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=os.environ | {"PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "published.csv:4:" in r.stderr
    assert not out.exists()


def test_a_case_the_study_does_not_have_is_named():
    cases = read_published()
    sim_rows = [r for r in load_rows([select("gb10", "sawtooth", source="simulated")])
                if r["B"] != 2]
    with pytest.raises(DatasetError, match=r"published.csv:\d+: CUDA B=2 non-causal linear is "
                                           r"not a case of"):
        check_against(cases, sim_rows, "these rows")


FIX = ROOT / "tests" / "fixtures" / "figures"


@pytest.mark.parametrize("module, backend, causal, quantity", [
    ("f08_cuda_batch", "cuda", False, "misses"),
    ("f09_cutile_noncausal", "cutile", False, "misses"),
    ("f10_cutile_causal", "cutile", True, "misses"),
    ("f08b_cuda_tflops", "cuda", False, "tflops"),
    ("f09b_cutile_tflops", "cutile", False, "tflops"),
    ("f10b_cutile_causal_tflops", "cutile", True, "tflops")])
def test_f8_f10_draw_the_published_bars_at_the_reference_values(module, backend, causal, quantity):
    """Each of F8-F10, drawn from a fixture run, carries a panel whose published bars are the
    reference file's values (misses in M sectors, TFLOPS) and whose simulated bars are the
    committed GB10 run's."""
    import importlib

    import matplotlib.pyplot as plt
    mod = importlib.import_module(f"paper_figures.{module}")
    fig = mod.plot(mod.load(load_rows([FIX / "h200-sawtooth"])), "h200")
    bars = {}
    for ax in fig.axes:
        for p in ax.patches:
            if (p.get_gid() or "").split(":")[0] in ("published", "simulated"):
                bars.setdefault(p.get_gid(), []).append(p.get_height())
    cases = [c for c in read_published() if c.backend == backend and c.causal == causal]
    sim = {key_of_row(r): r["value"] for r in
           load_rows([select("gb10", "sawtooth", source="simulated")])
           if r["metric"] == "lts__t_sectors_srcunit_tex_lookup_miss.sum"}
    for order in ("linear", "sawtooth"):
        want = sorted((c.misses / 1e6 if quantity == "misses" else c.tflops)
                      for c in cases if c.order == order)
        assert sorted(bars[f"published:{order}"]) == pytest.approx(want)
        if quantity == "misses":
            assert sorted(bars[f"simulated:{order}"]) == pytest.approx(
                sorted(sim[c.key] / 1e6 for c in cases if c.order == order))
        else:
            assert f"simulated:{order}" not in bars           # the simulator predicts no time
    plt.close(fig)


def test_the_committed_gb10_simulation_is_what_the_code_computes_now():
    """Section P and F8-F10 read the committed simulated GB10 run: recompute the two CUDA B=1
    cases and the cuTile Tile-based linear non-causal case (48 resident CTAs: the authors'
    builds hold one per SM) of the main command with today's code, plan and parameters and find
    the same counts (a change of any of them must regenerate the committed GB10 run)."""
    from experiments.registry.studies import get_study
    from experiments.simulation.simulate import model_params, timed_rows
    from spec import get_arch
    arch = get_arch("gb10")
    committed = {(r["variant"], r["B"], r["causal"]): r["value"]
                 for r in load_rows([select("gb10", "sawtooth", source="simulated")])
                 if r["metric"] == "lts__t_sectors_srcunit_tex_lookup_miss.sum"}
    cases = [c for c in get_study("sawtooth").plan(arch)
             if (c.variant.backend.value == "cuda" and c.problem.B == 1)
             or (c.variant.schedule.kind.name == "TILE_X" and not c.problem.causal
                 and c.variant.order.label == "linear")]
    assert len(cases) == 3
    for c in cases:
        rows = timed_rows(c, arch, model_params(arch), run="check", study="sawtooth")
        (miss,) = [r.value for r in rows
                   if r.metric == "lts__t_sectors_srcunit_tex_lookup_miss.sum"]
        assert miss == committed[(c.variant.id(c.problem), c.problem.B, False)]


@pytest.mark.parametrize("module", ["f08_cuda_batch", "f09_cutile_noncausal", "f10_cutile_causal"])
def test_the_paper_panel_draws_the_users_own_gb10_run(module):
    """A simulated GB10 run of the paper's problem (here the committed run with every count
    halved, as another capacity would give) is drawn in the paper panel in place of the committed
    run, and the panel names it."""
    import importlib

    import matplotlib.pyplot as plt
    mod = importlib.import_module(f"paper_figures.{module}")
    rows = [dict(r, run="my-run", value=r["value"] / 2)
            for r in load_rows([select("gb10", "sawtooth", source="simulated")])]
    data = mod.load(rows)
    fig = mod.plot(data, "gb10")
    mine = {key_of_row(r): r["value"] / 1e6 for r in rows
            if r["metric"] == "lts__t_sectors_srcunit_tex_lookup_miss.sum"}
    drawn = [p.get_height() for ax in fig.axes for p in ax.patches
             if (p.get_gid() or "").startswith("simulated:")]
    paper = data["paper"]
    assert paper["sim_run"] == "my-run" and drawn
    want = [v for o in ("linear", "sawtooth") for v in paper["simulated"][o]]
    assert sorted(drawn) == pytest.approx(sorted(want))
    assert set(round(v, 6) for v in want) <= set(round(v, 6) for v in mine.values())
    plt.close(fig)


@pytest.mark.parametrize("module", ["f08_cuda_batch", "f09_cutile_noncausal", "f10_cutile_causal"])
def test_the_paper_panel_error_labels_say_so_and_overlap_nothing(module):
    """Every label of the paper panel reads as an error against the paper and its box overlaps
    no bar but its own and no other label (drawn at the figure's own size)."""
    import importlib

    import matplotlib.pyplot as plt
    mod = importlib.import_module(f"paper_figures.{module}")
    fig = mod.plot(mod.load(load_rows([select("gb10", "sawtooth", source="simulated")])), "gb10")
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        labels = [t for t in ax.texts if t.get_gid() == "sim-error"]
        if not labels:
            continue
        bars = [p for p in ax.patches if (p.get_gid() or "").split(":")[0]
                in ("published", "simulated")]
        boxes = [t.get_window_extent(r) for t in labels]
        for t, box in zip(labels, boxes):
            assert t.get_text().endswith("% vs paper"), t.get_text()
            x = t.xy[0]
            for p in bars:
                if abs(p.get_x() + p.get_width() / 2 - x) < 1e-9:
                    continue                                 # its own bar
                assert not box.overlaps(p.get_window_extent(r)), (t.get_text(), p.get_gid())
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                assert not boxes[i].overlaps(boxes[j]), (labels[i].get_text(),
                                                         labels[j].get_text())
    plt.close(fig)

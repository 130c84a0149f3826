"""Which runs a figure draws: the repeats figure draws one marker per run of three, the
single-run figures draw the original run alone whatever the load order (and say so), the
rule that picks it, and the drift figure's full launches of a sparse run."""
from __future__ import annotations

import pytest

from paper_figures import load_rows
from tests.conftest import ROOT
from tests.cpu.paper_figures.figure_helpers import FIX, _runs

REPEATS = ("sawtooth-20261121", "sawtooth-20261121-r2", "sawtooth-20261121-r3")


def test_repeats_one_marker_per_run_and_comparison():
    from paper_figures import repeats
    from spec.records import read_csv
    data = repeats.load(load_rows(_runs("h100-repeats")))
    assert data["runs"] == list(REPEATS) and len(data["cases"]) == 8
    fig = repeats.plot(data, "h100")
    for q in ("misses", "time"):
        for run in REPEATS:
            (pc,) = [c for ax in fig.axes for c in ax.collections if c.get_gid() == f"{q}:{run}"]
            assert len(pc.get_offsets()) == len(data["cases"])
    # the original run's CUDA B=1 miss change, recomputed from the fixture
    rows = read_csv(FIX / "h100-repeats" / REPEATS[0] / "counters.csv.gz")
    m = {r["order"]: r["value"] for r in rows if r["backend"] == "cuda" and r["B"] == 1}
    want = 100 * (m["sawtooth"] / m["linear"] - 1)
    case = next(c for c in data["cases"] if c["backend"] == "cuda" and c["B"] == 1)
    assert case["runs"][REPEATS[0]]["misses"] == pytest.approx(want)
    # and the three runs disagree (else the figure would have nothing to show)
    assert len({round(c["runs"][r]["misses"], 3) for c in data["cases"] for r in REPEATS}) > 8


def test_repeats_needs_two_runs():
    from paper_figures import Skip, repeats
    with pytest.raises(Skip, match="^no repeated runs"):
        repeats.load(load_rows([FIX / "h100-repeats" / REPEATS[0]]))


@pytest.mark.parametrize("order", [REPEATS, REPEATS[::-1]])
def test_single_run_figures_never_mix_runs(order):
    """F8a (misses) and F8b/F9b (timing samples) from three loaded runs equal the original run
    alone, whatever the load order; the title says a run was chosen."""
    from paper_figures import f08_cuda_batch, f08b_cuda_tflops, f09b_cutile_tflops
    alone = load_rows([FIX / "h100-repeats" / REPEATS[0]])
    three = load_rows([FIX / "h100-repeats" / r for r in order])
    for mod in (f08_cuda_batch, f08b_cuda_tflops, f09b_cutile_tflops):
        a, b = mod.load(alone), mod.load(three)
        assert a["series"] == b["series"]
        assert b["run"]["run"] == REPEATS[0] and b["run"]["n_runs"] == 3
        assert "not mixed in" in mod.plot(b, "h100").axes[0].get_title()
        assert "not mixed in" not in mod.plot(a, "h100").axes[0].get_title()


def test_primary_run_rule(tmp_path):
    from paper_figures.data import primary_run
    rows = [dict(study="s", run_dir=d, run="x") for d in
            ("a/s-1-r2", "a/s-1", "a/s-1", "b/local")]
    assert primary_run(rows, "s") == "a/s-1"                       # repeats passed over
    rows = [dict(study="s", run_dir=d, run="x") for d in ("a/s-1-r2", "a/s-1-r3")]
    assert primary_run(rows, "s") == "a/s-1-r2"                    # no base loaded: first
    assert primary_run(rows, "other") is None


def test_drift_figure_draws_the_full_launch_and_names_the_few_cta_ones():
    """The committed sparse drift run holds launches of 2-132 CTAs: the figure draws the 132-CTA
    ones (its title's claim) and lists the others instead of sharing their axes."""
    from paper_figures import drift
    data = drift.load(load_rows([ROOT / "profiles/h100/drift-20261125f"]))
    assert data["few_ctas"] == [2, 4, 8, 16]
    cases = [c for cs in data["panels"].values() for c in cs]
    assert len(cases) == 8 and {c["schedule"] for c in cases} == {"static132"}

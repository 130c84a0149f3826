"""The decode study (``python -m experiments.run decode``): the launch the timed simulator walks,
what the LRU argument says must come out of it, and the command's plan, refusals and run
directory."""
from __future__ import annotations

import numpy as np
import pytest

from experiments.run import main
from experiments.simulation import decode as sd

SHAPE = sd.STUDY_SHAPES["gqa8-d64"]


def _kv_reads(table, step_items: slice) -> np.ndarray:
    """The K tile ids the items of ``step_items`` read, in their scan order."""
    keys = []
    for i in range(table.n_ctas)[step_items]:
        tiles = np.arange(table.length[i])
        keys.append(table.k_base + table.kv_row[i] + (tiles[::-1] if table.reverse[i] else tiles))
    return np.concatenate(keys)


@pytest.mark.parametrize("packing", sd.PACKINGS)
def test_each_step_reads_every_kv_tile_once_per_cta_that_packs_its_heads(packing):
    S_kv = 8192
    table, splits = sd.work_table(S_kv, "alternate", packing, 48, 2, SHAPE)
    hg = sd.plan(S_kv, packing, 48, SHAPE)[0]
    per_step = table.n_ctas // 2
    n_heads = SHAPE["B"] * SHAPE["H_kv"]
    readers = SHAPE["H"] // SHAPE["H_kv"] // hg       # CTAs of one K/V head and split
    for step in (slice(0, per_step), slice(per_step, None)):
        got = np.bincount(_kv_reads(table, step), minlength=n_heads * table.n_kv)
        assert (got == readers).all()
    assert not table.reverse[:per_step].any() and table.reverse[per_step:].all()
    assert splits == sd.plan(S_kv, packing, 48, SHAPE)[3]


def test_linear_scans_every_step_forward():
    table, _ = sd.work_table(8192, "linear", "group", 48, 2, SHAPE)
    assert not table.reverse.any()


def test_above_the_l2_linear_rereads_everything_and_alternate_keeps_about_the_l2s_worth():
    """gb10 (one partition, 24 MiB): step 2 of a cache twice the L2."""
    cap = sd.capacity("gb10")
    S_kv = int(2 * cap / sd.kv_bytes_per_token(SHAPE)) // 256 * 256
    kv = S_kv * sd.kv_bytes_per_token(SHAPE)
    lin = sd.timed_step2_bytes(S_kv, "linear", "group", "gb10", SHAPE)[0] / kv
    alt = sd.timed_step2_bytes(S_kv, "alternate", "group", "gb10", SHAPE)[0] / kv
    assert lin >= 0.99
    assert 0.4 <= alt <= 0.65, alt


def test_below_the_l2_nothing_is_read_again_on_one_partition():
    cap = sd.capacity("gb10")
    S_kv = int(0.4 * cap / sd.kv_bytes_per_token(SHAPE)) // 256 * 256
    for order in sd.ORDERS:
        assert sd.timed_step2_bytes(S_kv, order, "group", "gb10", SHAPE)[0] == 0


def test_the_grid_covers_every_shape_size_order_and_the_packings_that_differ():
    cases = sd.study_cases("h200")
    assert {c["shape"] for c in cases} == set(sd.STUDY_SHAPES)
    for c in cases:
        assert c["S_kv"] % 256 == 0 and c["size"] in sd.STUDY_SIZES
    mha = [c for c in cases if c["shape"] == "mha"]
    assert {c["packing"] for c in mha} == {"group"}     # one head per group: nothing to unpack
    assert len(cases) == len({(c["shape"], c["size"], c["order"], c["packing"]) for c in cases})


def test_the_study_simulates_into_a_run_directory_with_its_figure(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["decode", "--arch", "gb10", "--mode", "simulate", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "SIMULATED (a prediction, not a measurement)" in text
    from analysis.data import load_rows
    rows = load_rows([out])
    assert len(rows) == len(sd.study_cases("gb10"))
    assert {r["source"] for r in rows} == {"simulated"} and rows[0]["note"].count("timesim")
    assert (out / "figures" / "decode.png").stat().st_size > 5000


def test_the_dry_run_prints_the_grid_and_writes_nothing(tmp_path, capsys):
    assert main(["decode", "--arch", "h200", "--dry-run", "--out", str(tmp_path / "x")]) == 0
    text = capsys.readouterr().out
    assert "42 cases" in text and "this command would SIMULATE" in text
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("argv", [
    ["--seq", "4096"], ["--filter", "x"], ["--seed", "3"], ["--model", "lockstep"],
    ["--mode", "measure"], ["--reps", "3"], ["--capacity-mib", "10"]])
def test_options_that_mean_nothing_here_are_refused_in_one_line(argv, tmp_path, capsys):
    out = tmp_path / "x"
    assert main(["decode", "--arch", "h200", "--out", str(out)] + argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and not out.exists()


def test_the_instrument_lists_the_studys_cases_and_points_to_the_study(capsys):
    from experiments.instruments import decode_steps
    assert decode_steps.main(["--dry-run"]) == 0
    assert f"{len(sd.study_cases('h200'))} cases x 3 repeats" in capsys.readouterr().out
    assert decode_steps.main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "experiments.run decode" in err


def test_an_existing_output_is_not_overwritten(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep").write_text("mine")
    assert main(["decode", "--arch", "gb10", "--out", str(tmp_path / "x")]) == 2
    assert (tmp_path / "x" / "keep").read_text() == "mine"
    assert capsys.readouterr().err.count("\n") == 1

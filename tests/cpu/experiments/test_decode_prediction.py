"""The decode locality prediction (``experiments.simulation.decode``) on small caches: what
the LRU argument of its docstring says must come out of the simulated trace."""
from __future__ import annotations

from experiments.simulation import decode as sd

MIB = 1 << 20
CAP = 4 * MIB
PER_TOKEN = 2 * sd.SHAPE["B"] * sd.SHAPE["H_kv"] * sd.SHAPE["D"] * 2


def _ratio(size, order, packing="group", slots=16):
    S_kv = int(size * CAP / PER_TOKEN)
    miss, _ = sd.step2_read_misses(S_kv, order, packing, slots, CAP)
    return miss / (S_kv * PER_TOKEN)


def test_a_cache_below_the_l2_is_read_from_it_in_either_order():
    assert _ratio(0.5, "linear") == 0 and _ratio(0.5, "alternate") == 0


def test_above_the_l2_linear_misses_everything_and_alternate_hits_the_l2s_worth():
    lin, alt = _ratio(2.0, "linear"), _ratio(2.0, "alternate")
    assert lin >= 0.99                           # every K/V tile of step 2 evicted before use
    assert 0.45 <= alt <= 0.65, alt              # about (2 - 1) / 2 of it, plus the partials


def test_the_trace_reads_each_kv_tile_once_per_step_when_grouped_and_g_times_when_not():
    from spec.decode import n_tiles
    S_kv = int(CAP / PER_TOKEN)
    for packing, reads in (("group", 1), ("none", sd.SHAPE["H"] // sd.SHAPE["H_kv"])):
        key, sectors, is_read, start, _ = sd.decode_trace(S_kv, "linear", packing, 16)
        tile_n = sd.plan(S_kv, packing, 16)[2]
        kv_keys = 2 * sd.SHAPE["B"] * sd.SHAPE["H_kv"] * n_tiles(S_kv, tile_n)
        kv = key[start:][key[start:] < kv_keys]
        assert len(set(kv.tolist())) == kv_keys and len(kv) == reads * kv_keys


def test_the_command_refuses_an_existing_directory(tmp_path, capsys):
    assert sd.main(["--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_the_measurement_plans_the_predictions_cases(tmp_path, capsys):
    from experiments.instruments import decode_steps
    assert decode_steps.main(["--dry-run"]) == 0
    assert "16 cases x 3 repeats" in capsys.readouterr().out
    got = {(c["S_kv"], c["order"], c["packing"]) for c in decode_steps.cases("h200")}
    cap = sd.capacity("h200")
    assert {(int(s * cap / PER_TOKEN) // 256 * 256, o, p) for s in sd.SIZES for o in sd.ORDERS
            for p in sd.PACKINGS} == got
    assert decode_steps.main(["--out", str(tmp_path)]) == 2

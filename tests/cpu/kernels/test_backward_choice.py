"""The backward's configuration rule (kernels.rules.backward_choice): the dK/dV pass's step counts,
each pass's work quantities, the committed constants, the default it gives, its smoothness and the
one-line refusals of a bad configs file."""
from __future__ import annotations

import json

import numpy as np
import pytest

from kernels.host import backend, backward
from kernels.host.backend import default_variant
from kernels.rules import backward_choice
from kernels.rules.backward_choice import (
    CANDIDATES,
    BackwardRule,
    RuleFileError,
    cfg_label,
    parse_rule,
    pass_quantities,
)
from spec import Problem, ScanOrder, get_arch
from spec.problem import TileGrid, Tiles

PROBLEMS = [Problem(1, 1, 256, 64, causal=True), Problem(2, 4, 1000, 128, H_kv=2, causal=True),
            Problem(1, 8, 777, 64, S_kv=3000, causal=True), Problem(1, 8, 3000, 64, S_kv=777,
                                                                    causal=True),
            Problem(3, 2, 197, 64), Problem(1, 4, 512, 128, S_kv=8192)]


def test_dkdv_steps_count_the_q_tiles_that_reach_each_kv_tile():
    g = TileGrid(Problem(1, 1, 256, 64, causal=True), Tiles(64, 64))
    assert list(g.kv_item_steps()) == [4, 3, 2, 1]           # K/V tile 0 is seen by every row
    # a query block shorter than the K/V (top-left causal): keys past S_q are seen by no query
    g = TileGrid(Problem(1, 1, 128, 64, S_kv=320, causal=True), Tiles(64, 64))
    assert list(g.kv_item_steps()) == [2, 1, 0, 0, 0]
    g = TileGrid(Problem(1, 1, 256, 64, causal=True), Tiles(128, 64))
    assert list(g.kv_item_steps()) == [2, 2, 1, 1]
    assert list(TileGrid(Problem(1, 1, 197, 64), Tiles(64, 128)).kv_item_steps()) == [4, 4]


@pytest.mark.parametrize("p", PROBLEMS, ids=lambda p: p.label)
@pytest.mark.parametrize("tiles", [Tiles(64, 64), Tiles(64, 128), Tiles(128, 64)],
                         ids=lambda t: t.label)
def test_dkdv_steps_are_the_transpose_of_the_forward_steps(p, tiles):
    """Both passes visit the same (Q tile, K/V tile) pairs, checked against a brute-force
    top-left mask, but for the fully masked step the dK/dV kernel runs for a K/V tile that starts
    past S_q inside the ragged last Q tile (``TileGrid.q_tiles_for``)."""
    g = TileGrid(p, tiles)
    rows = np.arange(p.S_q)
    extra = 0
    for j, n in enumerate(g.kv_item_steps()):
        keys = np.arange(j * tiles.n, min((j + 1) * tiles.n, p.S_kv))
        seen = rows[(rows[:, None] >= keys[None, :]).any(1)] if p.causal else rows
        masked = int(p.causal and j * tiles.n >= p.S_q and j * tiles.n // tiles.m < g.n_q)
        assert n == len(np.unique(seen // tiles.m)) + masked, j
        extra += masked
    assert g.kv_item_steps().sum() == g.item_steps().sum() + extra


def test_pass_quantities_follow_the_kernels_items():
    pc = CANDIDATES["m64n64occ2"]
    mqa = Problem(4, 16, 1000, 128, H_kv=1, causal=True)
    # dK/dV: 4·1·16 = 64 K/V items < 132 SMs: the group split deals 16 query heads over 16 items
    assert backward.group_split(64, 16, 2 * 132 * 2, 132) == 16
    q = pass_quantities(mqa, "dkdv", pc, 132)
    assert (q.items, q.per_sm, q.heads) == (64 * 16, 2, 64)
    assert list(q.steps) == list(TileGrid(mqa, pc.tiles).kv_item_steps())   # one head per item
    gqa = Problem(1, 32, 4096, 128, H_kv=8, causal=True)                 # 512 items: no split
    q = pass_quantities(gqa, "dkdv", pc, 132)
    assert (q.items, q.heads) == (8 * 64, 8)
    assert list(q.steps) == list(4 * TileGrid(gqa, pc.tiles).kv_item_steps())
    q = pass_quantities(gqa, "dq", CANDIDATES["m128n64ww8"], 132)
    assert (q.items, q.per_sm) == (32 * 32, 1)
    assert list(q.steps) == list(TileGrid(gqa, Tiles(128, 64)).item_steps())
    with pytest.raises(ValueError, match="pass"):
        pass_quantities(gqa, "dv", pc, 132)


def _backward(p):
    """The backward configuration ``attention()`` trains ``p`` with (H100's forward)."""
    return default_variant(p, get_arch("h100"), training=True).backward


def test_the_committed_rule_covers_every_key_without_a_table():
    doc = json.loads(backward_choice.CONFIG.read_text())
    assert doc["schema"] == backward_choice.CONFIG_SCHEMA and "configs" not in doc
    rule = backward_choice.fitted_rule()
    assert rule is not None and rule.num_sms == 132
    for pass_ in backward.PASSES:
        assert set(rule.constants[pass_]) == {"d64.full", "d64.causal", "d128.full",
                                              "d128.causal"}
        for per in rule.constants[pass_].values():
            assert per and all(a >= 0 and b > 0 for a, b in per.values())
    # the shared keys: never fitted, they read the same D's other mask
    # (kernels.rules.backward_choice)
    assert doc["rule"]["shared"] == {"d64.causal": "d64.full", "d128.full": "d128.causal"}
    assert set(doc["rule"]["fit_error"]["dkdv"]) == {"d64.full", "d128.causal"}


@pytest.mark.parametrize("D,causal", [(64, False), (64, True), (128, True)])
def test_default_backward_is_each_passes_least_predicted_candidate(D, causal):
    rule = backward_choice.fitted_rule()
    long = 5111 if causal else 1537         # D=64 unmasked from 2048 rows on: the one pass
    for p in (Problem(8, 16, 1024, D, causal=causal), Problem(1, 32, long, D, H_kv=4,
                                                             causal=causal)):
        cfg = _backward(p)
        assert not cfg.one_pass
        for pass_ in backward.PASSES:
            pred = rule.predictions(p, pass_)
            assert cfg_label(getattr(cfg, pass_)) == min(pred, key=pred.get)


@pytest.mark.parametrize("p", [Problem(8, 16, 1024, 128), Problem(1, 32, 5111, 128, H_kv=4),
                               Problem(2, 16, 512, 128, S_kv=4096)], ids=lambda p: p.label)
def test_d128_without_a_mask_takes_the_one_pass_on_the_base(p):
    """The one pass where it was measured faster (``kernels.host.backend._default_backward``),
    on the build checked spill-free with its dQ reduce; the order and schedule still apply."""
    cfg = _backward(p)
    assert cfg.one_pass and cfg_label(cfg.dkdv) == cfg_label(backward.BASE)
    assert cfg.label().startswith("onepass:")
    cfg = backend.default_variant(p, get_arch("h100"), training=True,
                                  order=ScanOrder.sawtooth()).backward
    assert cfg.one_pass and cfg.dkdv.order == ScanOrder.sawtooth()
    two = backend.default_variant(p, get_arch("h100"), training=True,
                                  backward_one_pass=False).backward
    rule = backward_choice.fitted_rule()
    assert not two.one_pass and all(
        cfg_label(getattr(two, n)) == min(rule.predictions(p, n), key=rule.predictions(p, n).get)
        for n in backward.PASSES)


@pytest.mark.parametrize("S,one", [(2047, False), (2048, True), (9216, True)])
def test_d64_without_a_mask_takes_the_wide_one_pass_on_long_sequences(S, one):
    """D=64 without a mask: the one pass on ``WIDE`` (128 x 128) from ``ONE_PASS_D64_MIN_ROWS``
    query rows on, the rule's two passes below; causal never; forcing it takes ``WIDE``."""
    from kernels.rules.backward_config import ONE_PASS_D64_MIN_ROWS, WIDE
    assert ONE_PASS_D64_MIN_ROWS == 2048
    cfg = _backward(Problem(2, 8, S, 64))
    assert cfg.one_pass == one
    if one:
        assert cfg_label(cfg.dkdv) == cfg_label(WIDE) == "m128n128ww8"
    assert not _backward(Problem(2, 8, S, 64, causal=True)).one_pass
    forced = backend.default_variant(Problem(2, 8, 512, 64), get_arch("h100"), training=True,
                                     backward_one_pass=True).backward
    assert forced.one_pass and cfg_label(forced.dkdv) == cfg_label(WIDE)


def test_a_key_without_constants_takes_the_base(monkeypatch):
    empty = BackwardRule({"dkdv": {}, "dq": {}}, 132)
    monkeypatch.setattr(backward_choice, "fitted_rule", lambda: empty)
    cfg = _backward(Problem(1, 8, 1000, 64))
    assert cfg.dkdv.tiles == cfg.dq.tiles == backward.BASE.tiles
    monkeypatch.setattr(backward_choice, "fitted_rule", lambda: None)           # no configs file
    assert _backward(Problem(1, 8, 1000, 64)).dq.worker_warps == 8


@pytest.mark.parametrize("D,causal", [(64, False), (64, True), (128, False), (128, True)])
def test_the_predicted_time_grows_smoothly_with_the_problem(D, causal):
    """No borders: each pass's predicted time under the rule's choice never drops when a problem
    grows (a longer S, more batches or heads), for MHA and for grouped heads whose K/V items
    fill the SMs without the group split. (Where ``group_split`` changes the dK/dV items, a
    discrete rule of the launch, the prediction jumps with it, either way.)"""
    rule = backward_choice.fitted_rule()

    def best(p, pass_):
        return min(rule.predictions(p, pass_).values())
    lengths = list(range(100, 2200, 37)) + [4096, 7000, 9216, 16384, 65536]
    for pass_ in backward.PASSES:
        for B, H, H_kv in ((1, 16, 16), (8, 12, 12), (64, 6, 6), (4, 32, 32)):
            t = [best(Problem(B, H, s, D, H_kv=H_kv, causal=causal), pass_) for s in lengths]
            assert all(y >= x - 1e-9 for x, y in zip(t, t[1:])), (pass_, B, H)
        t = [best(Problem(8, 32, s, D, H_kv=8, causal=causal), pass_) for s in lengths[6:]]
        assert all(y >= x - 1e-9 for x, y in zip(t, t[1:])), (pass_, "gqa")
        for S in (197, 1024, 4097):
            t = [best(Problem(b, 12, S, D, causal=causal), pass_) for b in (1, 2, 4, 8, 16, 32)]
            assert all(y >= x - 1e-9 for x, y in zip(t, t[1:])), (pass_, S)
            t = [best(Problem(2, h, S, D, causal=causal), pass_) for h in (1, 2, 4, 8, 16, 32)]
            assert all(y >= x - 1e-9 for x, y in zip(t, t[1:])), (pass_, S)


GOOD = {"num_sms": 132, "constants": {"dkdv": {"d64.full": {"m64n128ww8": [3, 1.1],
                                                             "m64n64occ2": [2, 1.0]}},
                                      "dq": {"d64.full": {"m128n64ww8": [3, 0.7]}}},
        "shared": {"d64.causal": "d64.full"}}


def test_parse_rule_resolves_shared_keys():
    rule = parse_rule(GOOD)
    assert rule.constants["dq"]["d64.causal"] == {"m128n64ww8": (3.0, 0.7)}
    # m64n64occ2's dK/dV build spills at D=64 causal (SPILLING): the shared key never takes it
    assert rule.choose(Problem(1, 8, 1000, 64, causal=True)) == (CANDIDATES["m64n128ww8"],
                                                                  CANDIDATES["m128n64ww8"])
    assert set(rule.predictions(Problem(1, 8, 1000, 64), "dkdv")) == {"m64n128ww8", "m64n64occ2"}
    assert rule.choose(Problem(1, 8, 1000, 128)) is None
    assert parse_rule(None) is None


@pytest.mark.parametrize("bad,match", [
    ({"constants": {"dv": {}}}, "not a pass"),
    ({"constants": {"dq": {"d64.full": {"m99n99": [1, 1]}}}}, "unknown configuration m99n99"),
    ({"constants": {"dq": {"d64.full": {"m64n64occ2": [-1, 1]}}}}, "negative"),
    ({"shared": {"d128.full": "d128.causal"}}, "no dkdv constants"),
    ({"num_sms": "many"}, "malformed"),
])
def test_a_bad_rule_block_is_one_line(bad, match):
    with pytest.raises(RuleFileError, match=match) as e:
        parse_rule(GOOD | bad, "h100-backward.json")
    assert "\n" not in str(e.value) and "rulefit --backward" in str(e.value)


@pytest.mark.parametrize("text,match", [("{", "not readable JSON"),
                                        ('{"schema": 1, "configs": {}}', "schema 1")])
def test_a_bad_configs_file_is_one_line(tmp_path, monkeypatch, text, match):
    path = tmp_path / "h100-backward.json"
    path.write_text(text)
    monkeypatch.setattr(backward_choice, "CONFIG", path)
    backward_choice.fitted_rule.cache_clear()
    try:
        with pytest.raises(RuleFileError, match=match) as e:
            _backward(Problem(1, 8, 1000, 64))
        assert "\n" not in str(e.value)
    finally:
        backward_choice.fitted_rule.cache_clear()


def test_cfg_label_names_only_candidates():
    assert all(cfg_label(pc) == lab for lab, pc in CANDIDATES.items())
    with pytest.raises(ValueError, match="not a backward candidate"):
        cfg_label(backward.PassConfig(Tiles(32, 32)))
    assert backward_choice.FIX.startswith("re-run python -m experiments.tuning.rulefit")

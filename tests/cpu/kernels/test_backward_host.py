"""CPU checks of the training path's host side (no GPU, no torch): SDPA's ``scale=`` argument, the
group split rule (the default configuration: test_backward_choice.py) and the one-line refusals."""
from __future__ import annotations

import math

import pytest

from spec import Problem
from spec.family import BadInput, UnsupportedVariant
from spec.ops import resolve_scale


def test_scale_none_is_inverse_sqrt_d_and_numbers_pass_through():
    assert resolve_scale(None, 64) == 1 / math.sqrt(64)
    assert resolve_scale(None, 128) == 1 / math.sqrt(128)
    assert resolve_scale(0.3, 64) == 0.3
    assert resolve_scale(2, 128) == 2.0 and isinstance(resolve_scale(2, 128), float)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0, -0.1, True, "0.1", [0.1]])
def test_bad_scale_is_one_line(bad):
    with pytest.raises(BadInput, match="scale") as e:
        resolve_scale(bad, 64)
    assert "\n" not in str(e.value)


def test_order_and_schedule_reach_both_passes():
    from kernels.host.backend import default_variant
    from spec import get_arch
    cfg = default_variant(Problem(1, 8, 1000, 64), get_arch("h100"), order="sawtooth",
                          training=True, backward_schedule="static264").backward
    for pc in (cfg.dkdv, cfg.dq):
        assert pc.order.label == "sawtooth" and pc.schedule.label == "static264"


@pytest.mark.parametrize("sched", ["lpt8", "tile2", "snake8", "glpt4"])
def test_unsupported_backward_schedule_is_one_line(sched):
    from kernels.host.backend import default_variant
    from kernels.host.backward import check_pass
    from spec import get_arch
    cfg = default_variant(Problem(1, 8, 1000, 64), get_arch("h100"), training=True,
                          backward_schedule=sched).backward
    with pytest.raises(UnsupportedVariant, match="backward") as e:
        check_pass("dkdv", cfg.dkdv)
    assert "\n" not in str(e.value)


def test_group_split_only_where_the_items_leave_sms_idle():
    from kernels.host.backward import group_split
    assert group_split(600, 8, 528, 132) == 1       # enough items: no split
    assert group_split(200, 4, 528, 132) == 1       # every SM has an item: no split
    assert group_split(65, 32, 528, 132) == 16      # MQA, one batch: 16 of 32 heads' items
    assert group_split(64, 16, 528, 132) == 16      # B=4 MQA at S=1000: the whole group
    assert group_split(10, 1, 528, 132) == 1        # no grouped heads: nothing to split
    for n, g in ((65, 32), (100, 6), (7, 12)):
        s = group_split(n, g, 528, 132)
        assert g % s == 0 and (n * s >= 528 or s == g)

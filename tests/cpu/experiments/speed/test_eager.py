"""The host-path benchmark's summary (``experiments.speed.eager``) and the operators' argument
spelling (``spec.ops``), without a GPU."""
from __future__ import annotations

import pytest

from experiments.speed import eager
from spec import CtaSchedule, ScanOrder, Tiles
from spec.family import BadInput
from spec.ops import op_spelling


def _rows(times: dict) -> list[dict]:
    """Hostpath rows: {(caller, metric): [values]} of one problem (b1h8s256d64 fp16 full)."""
    return [dict(study="hostpath", B=1, H=8, H_kv=8, S_q=256, S_kv=256, D=64, dtype="fp16",
                 causal=False, variant=who, backend=who.split(".")[0], metric=m, value=v,
                 sample=i)
            for (who, m), vs in times.items() for i, v in enumerate(vs)]


def test_stored_lines_give_medians_and_the_bar_for_the_attention_callers():
    rows = _rows({("cutile.attention", "host_launch_ms"): [0.012, 0.013, 0.030],
                  ("cutile.attention", eager.EAGER_CALL_MS): [0.05, 0.06, 0.07],
                  ("cuda.attention", "host_launch_ms"): [0.021, 0.022, 0.023],
                  ("cuda.attention", eager.EAGER_CALL_MS): [0.05],
                  ("sdpa-flash", "host_launch_ms"): [0.018],
                  ("sdpa-flash", eager.EAGER_CALL_MS): [0.04]})
    lines = eager.stored_lines(rows)
    assert lines[0].startswith("b1h8s256d64.fp16.full: host us per call")
    cutile = next(ln for ln in lines if "cutile.attention" in ln)
    assert "host    13.0 us" in cutile and "eager     60.0 us" in cutile and "met" in cutile
    assert "MISSED" in next(ln for ln in lines if "cuda.attention" in ln)      # 22 us > 20
    assert "bar" not in next(ln for ln in lines if "sdpa-flash" in ln)
    assert eager.stored_lines([dict(r, study="models") for r in rows]) == []


def test_cli_refuses_a_run_without_hostpath_rows(tmp_path, capsys):
    assert eager.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ")


def test_op_spelling_turns_spec_objects_into_labels_and_ints():
    assert op_spelling("sawtooth2", None, None) == ("sawtooth2", None, None, None)
    assert op_spelling(ScanOrder.sawtooth(4), CtaSchedule.snake(7), Tiles(64, 128)) == \
        ("sawtooth4", "snake7", 64, 128)
    assert op_spelling("linear", "glpt3", (128, 64)) == ("linear", "glpt3", 128, 64)
    with pytest.raises(BadInput, match="TILE_M, TILE_N"):
        op_spelling("linear", None, (64, 64, 64))

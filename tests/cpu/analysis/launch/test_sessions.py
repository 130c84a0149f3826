"""analysis.launch.sessions: Friedman's test finds a session effect that is there, none in
independent noise, groups launches into sessions by the manifest's launches per session, and refuses
what it cannot test with one line and exit 2."""
from __future__ import annotations

import numpy as np
import pytest

from analysis.launch.sessions import launches_by_session, main, session_effect
from spec.records import Metric
from tests.conftest import ROOT


def _rows(values_by_case, per_session=1):
    rows = []
    for c, values in enumerate(values_by_case):
        for i, v in enumerate(values):
            rows.append(dict(variant=f"cuda.linear.static{c + 1}.m80n80d64", backend="cuda",
                             order="linear", schedule=f"static{c + 1}", tile_m=80, tile_n=80,
                             B=1, H=1, H_kv=1, S_q=4096, S_kv=4096, D=64, dtype="fp16",
                             causal=False, metric=Metric.L2_TEX_MISSES, value=float(v), sample=i,
                             note="kernel=flash_fwd", stat=""))
        rows.append(dict(rows[-1], sample=0, stat="median"))                      # the summary
    return rows


def test_a_session_that_is_bad_for_every_case_is_found():
    rng = np.random.default_rng(0)
    cases = [100 * (1 + 0.02 * rng.standard_normal(5)) * np.array([1, 1, 1.3, 1, 1])
             for _ in range(12)]
    res = session_effect(launches_by_session(_rows(cases), Metric.L2_TEX_MISSES))
    assert res["cases"] == 12 and res["sessions"] == 5
    assert res["p_value"] < 0.001 and res["highest"][2] == 12
    assert res["session_mean"][2] == pytest.approx(1.3, abs=0.05)


def test_independent_launch_noise_shows_no_session_effect():
    rng = np.random.default_rng(1)
    cases = [100 * (1 + 0.2 * rng.standard_normal(5)) for _ in range(30)]
    res = session_effect(launches_by_session(_rows(cases), Metric.L2_TEX_MISSES))
    assert res["p_value"] > 0.05


def test_launches_group_into_sessions_and_quiet_cases_are_left_out():
    by = launches_by_session(_rows([[1, 2, 3, 4, 5, 6]]), Metric.L2_TEX_MISSES,
                             launches_per_session=2)
    assert list(by.values())[0] == {0: [1.0, 2.0], 1: [3.0, 4.0], 2: [5.0, 6.0]}
    quiet = session_effect(launches_by_session(_rows([[100, 101, 100]] * 4),
                                               Metric.L2_TEX_MISSES))
    assert quiet["cases"] == 0 and np.isnan(quiet["p_value"])


def test_cli_on_committed_runs_and_bad_input(tmp_path, capsys):
    assert main([str(ROOT / "profiles/h100/longseq-20261123")]) == 0
    assert "Friedman chi2" in capsys.readouterr().out
    for bad in (tmp_path, ROOT / "profiles/h100/sawtooth-20261123"):   # no repeats; 1 session
        assert main([str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and "\n" not in err

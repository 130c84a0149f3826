"""The backward study from the command line, on this CPU: the H100 plan (dry run), a small
simulated run, and the committed GB10 simulation regenerated from the code."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from spec.records import Metric, data_path, read_csv

ROOT = Path(__file__).resolve().parents[3]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def _misses(run: Path) -> dict:
    rows = read_csv(data_path(run, "counters.csv"))      # committed runs are stored compressed
    return {(r["variant"], r["causal"]): r["value"] for r in rows
            if r["metric"] == Metric.L2_TEX_MISSES}


def test_backward_plan_on_h100_dry_run():
    r = cli("backward", "--arch", "h100", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "backward on h100: 12 cases" in r.stdout
    for v in ("cutile.linear.static132.m64n64d64.occ2.dkdv",
              "cutile.sawtooth.static132.m64n64d64.occ2.dq",
              "cutile.sawtooth.static132.m64n128d64.occ2.dq"):
        assert v in r.stdout
    assert "S=262144" in r.stdout and "measure (one NVIDIA H100" in r.stdout


def test_the_fair_dq_pairs_alone_on_h100_dry_run():
    """The command that measures only the spill-free dQ pairs (64x128 tiles) added after the
    committed run: its filter picks those four cases and nothing else."""
    r = cli("backward", "--arch", "h100", "--filter", "m64n128", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "backward on h100: 4 cases" in r.stdout
    assert "m64n64" not in r.stdout and r.stdout.count(".m64n128d64.occ2.dq") == 4


def test_a_small_simulated_run_shows_the_sawtooth_saving(tmp_path):
    """Q + dO of a head (S=32768: 8.25 MiB) against a 4 MiB cache: each non-causal pass's
    sawtooth misses less than its linear twin (causal, the CTAs' unequal items drift the
    wavefront apart and the sawtooth can lose: dK/dV +5% here), and the rows say they are
    simulated."""
    out = tmp_path / "run"
    r = cli("backward", "--arch", "gb10", "--seq", "32768", "--capacity-mib", "4",
            "--no-figures", "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows = read_csv(out / "counters.csv")
    assert {x["source"] for x in rows} == {"simulated"}
    m = _misses(out)
    assert len(m) == 12
    for (v, causal), n in m.items():
        if ".linear." in v and not causal:
            assert m[(v.replace(".linear.", ".sawtooth."), causal)] < n, v


def test_the_committed_gb10_simulation_regenerates(tmp_path):
    """``python -m experiments.run backward --arch gb10`` (the lock-step LRU is deterministic)
    gives the miss counts of the committed run profiles/gb10/backward-20261127 (its 64x64
    cases: the plan's 64x128 dQ pairs came later)."""
    out = tmp_path / "gb10"
    r = cli("backward", "--arch", "gb10", "--filter", "m64n64", "--no-figures", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert _misses(out) == _misses(ROOT / "profiles/gb10/backward-20261127")

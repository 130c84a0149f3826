"""The real CLI, end to end on small cases: plan, errors (exit 2, nothing left behind), outputs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spec.records import SCHEMA_VERSION, read_csv

ROOT = Path(__file__).resolve().parents[2]


def cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_list_names_the_studies():
    r = cli("--list")
    assert r.returncode == 0
    for study in ("sawtooth", "l1l2", "traffic", "divergence", "active-sms", "ladder", "scaling"):
        assert study in r.stdout


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path):
    r = cli("sawtooth", "--arch", "gb10", "--dry-run", "--out", str(tmp_path / "x"))
    assert r.returncode == 0, r.stderr
    assert "16 cases" in r.stdout and "cutile.sawtooth.static48.m64n64d64.occ2" in r.stdout
    assert "32 MiB = 1.33x the 24 MiB L2" in r.stdout
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("args, message", [
    (["sawtooth", "--arch", "a100"], "unknown arch 'a100'; known: gb10, h100, h200, b200, b300"),
    (["nope", "--arch", "gb10"], "unknown study 'nope'; known: sawtooth, l1l2"),
    (["sawtooth"], "--arch is required"),
    (["sawtooth", "--arch", "gb10", "--seq", "0"], "--seq 0 must be a positive"),
    (["sawtooth", "--arch", "gb10", "--capacity-mib", "-1"], "must be positive"),
    (["sawtooth", "--arch", "gb10", "--filter", "nomatch"], "matches no case"),
    (["sawtooth", "--arch", "gb10", "--mode", "measure"], "--mode measure needs a CUDA GPU"),
])
def test_bad_input_is_one_line_exit_2_and_no_output(tmp_path, args, message):
    out = tmp_path / "run"
    r = cli(*args, "--out", str(out))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.iterdir())


def test_small_simulation_writes_rows_manifest_and_figures(tmp_path):
    out = tmp_path / "run"
    r = cli("sawtooth", "--arch", "gb10", "--seq", "4096", "--filter", "static|cuda",
            "--capacity-mib", "0.5", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "SIMULATING" in r.stdout and "no CUDA GPU found" in r.stdout
    rows = read_csv(out / "counters.csv")
    assert rows and {r["source"] for r in rows} == {"simulated"}
    miss = [r for r in rows if r["metric"] == "lts__t_sectors_srcunit_tex_lookup_miss.sum"]
    assert len(miss) == 12                                   # 4 static + 8 CUDA variants
    m = json.loads((out / "manifest.json").read_text())
    assert m["schema_version"] == SCHEMA_VERSION and m["mode"] == "simulate" and m["arch"]["name"] == "gb10"
    assert m["parameters"]["capacity_bytes"] == 512 * 1024 and m["git"]["commit"]
    assert m["versions"]["numpy"]
    for fig in ("F7", "F8a", "F9a", "F10a"):
        assert (out / "figures" / f"{fig}.png").stat().st_size > 10_000
    # a second run into the same directory is refused and leaves the first intact
    again = cli("sawtooth", "--arch", "gb10", "--seq", "4096", "--out", str(out))
    assert again.returncode == 2 and "already exists" in again.stderr
    assert read_csv(out / "counters.csv") == rows


def test_paper_figures_cli_redraws_from_a_run(tmp_path):
    out = tmp_path / "run"
    assert cli("sawtooth", "--arch", "gb10", "--seq", "2048", "--filter", "cuda",
               "--no-figures", "--out", str(out)).returncode == 0
    r = subprocess.run([sys.executable, "-m", "paper_figures", "--arch", "gb10", "--run", str(out),
                        "--out", str(tmp_path / "figs")], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "figs" / "F8a.pdf").stat().st_size > 1000
    assert "F9a: skipped (no cuTile non-causal rows" in r.stdout


def test_reuse_study_writes_curves_with_their_abscissa(tmp_path):
    out = tmp_path / "run"
    r = cli("reuse", "--arch", "gb10", "--seq", "4096", "--filter", "cuda-noncausal",
            "--no-figures", "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows = read_csv(out / "counters.csv")
    mrc = [x for x in rows if x["metric"] == "lru_misses" and x["order"] == "linear"]
    caps = [x["x"] for x in mrc]
    assert caps == sorted(caps) and 24 << 20 in caps                  # GB10's L2 is on the grid
    misses = [x["value"] for x in mrc]
    assert all(a >= b for a, b in zip(misses, misses[1:]))           # never rises with capacity
    assert {x["source"] for x in rows} == {"simulated"}
    again = cli("reuse", "--arch", "gb10", "--mode", "measure", "--out", str(tmp_path / "m"))
    assert again.returncode == 2 and "simulator-only" in again.stderr

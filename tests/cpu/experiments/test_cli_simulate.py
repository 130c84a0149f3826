"""The experiments CLI's simulate mode, end to end on small cases: the rows, manifest and
figures of a run, the timed and lock-step models, the reuse study's curves, figures redrawn
from a run, and the resident-CTA count a simulation takes from the build."""
from __future__ import annotations

import json
import subprocess
import sys

from experiments.registry.studies import get_study
from experiments.run import _plan, build_parser
from spec import get_arch
from spec.records import SCHEMA_VERSION, Metric, read_csv
from spec.schedules import ScheduleKind
from tests.conftest import ROOT
from tests.cpu.experiments.cli_helpers import cli


def test_small_simulation_writes_rows_manifest_and_figures(tmp_path):
    out = tmp_path / "run"
    r = cli("sawtooth", "--arch", "gb10", "--seq", "4096", "--filter", "static|cuda",
            "--capacity-mib", "0.5", "--out", str(out))
    assert r.returncode == 0, r.stderr
    from spec.arch import no_gpu_reason
    assert "SIMULATING" in r.stdout and no_gpu_reason() in " ".join(r.stdout.split())
    rows = read_csv(out / "counters.csv")
    assert rows and {r["source"] for r in rows} == {"simulated"}
    miss = [r for r in rows if r["metric"] == "lts__t_sectors_srcunit_tex_lookup_miss.sum"]
    assert len(miss) == 12                                   # 4 static + 8 CUDA variants
    m = json.loads((out / "manifest.json").read_text())
    assert (m["schema_version"] == SCHEMA_VERSION and m["mode"] == "simulate"
            and m["arch"]["name"] == "gb10")
    assert m["parameters"]["capacity_bytes"] == 512 * 1024 and m["git"]["commit"]
    assert m["versions"]["numpy"]
    for fig in ("F7", "F8a", "F9a", "F10a"):
        assert (out / "figures" / f"{fig}.png").stat().st_size > 10_000
    # a second run into the same directory is refused and leaves the first intact
    again = cli("sawtooth", "--arch", "gb10", "--seq", "4096", "--out", str(out))
    assert again.returncode == 2 and "already exists" in again.stderr
    assert read_csv(out / "counters.csv") == rows


def test_simulate_mode_runs_the_timed_model_and_lockstep_on_request(tmp_path):
    """The main command simulates with the timed model and the arch's parameters (gb10: the
    defaults, not fitted) and the frozen model version, and every row's note says so (the
    manifest records the version); ``--model lockstep`` is the lock-step
    LRU of ``experiments.simulation.simulate.simulate_case``, count for count."""
    from analysis.cache.timesim import MODEL_VERSION
    from experiments.simulation.simulate import simulate_case
    runs = {}
    for model in ("timed", "lockstep"):
        out = tmp_path / model
        r = cli("sawtooth", "--arch", "gb10", "--seq", "8192", "--filter", "cuda",
                "--no-figures", "--model", model, "--out", str(out))
        assert r.returncode == 0, r.stderr
        runs[model] = (r.stdout, read_csv(out / "counters.csv"),
                       json.loads((out / "manifest.json").read_text())["parameters"])
    stdout, rows, params = runs["timed"]
    assert "timed model" in stdout and params["model"] == "timed"
    assert params["params"]["arch"] == "gb10" and params["params"]["fitted"] == []
    assert all("params gb10" in r["note"] and "timesim" in r["note"] for r in rows)
    # the frozen model version, in every row and in the run's manifest
    assert params["model_version"] == MODEL_VERSION
    assert all(f"model={MODEL_VERSION}" in r["note"] for r in rows)
    stdout, rows, params = runs["lockstep"]
    assert "lock-step" in stdout and params["model"] == "lockstep"
    assert "model_version" not in params
    arch = get_arch("gb10")
    args = build_parser().parse_args(["sawtooth", "--arch", "gb10", "--seq", "8192",
                                      "--filter", "cuda"])
    for c in _plan(args, get_study("sawtooth"), arch):
        got = [r["value"] for r in rows if r["variant"] == c.variant.id(c.problem)
               and r["B"] == c.problem.B and r["metric"] == Metric.L2_TEX_MISSES]
        assert got == [simulate_case(c, arch, arch.l2_bytes).counts.misses]


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


def test_build_residency_falls_back_to_the_request_and_says_why(monkeypatch):
    """Without a cuTile compiler, or when the cubin cannot be built or read, a grid launch keeps
    the study's occupancy request and the note says so; a persistent launch is its P."""
    from experiments.simulation.simulate import resident_of_build
    from kernels.build.toolchain import ToolchainError
    from kernels.host import backend
    gb10 = get_arch("gb10")
    cases = get_study("sawtooth").plan(gb10)
    grid = next(c for c in cases if c.variant.schedule.kind == ScheduleKind.TILE_X)
    persistent = next(c for c in cases if c.variant.schedule.is_persistent)
    assert resident_of_build(persistent, gb10) == (persistent, "")
    for err, says in ((ImportError("No module named 'cuda.tile'"), "no cuTile compiler"),
                      (ToolchainError("tileiras failed\nmore"), "could not be built or read here: "
                                                                "tileiras failed)")):
        def boom(*a, e=err):
            raise e
        monkeypatch.setattr(backend, "compiled_ctas_per_sm", boom)
        case, note = resident_of_build(grid, gb10)
        assert case == grid and note.startswith(f"resident CTAs {grid.resident}: the occupancy "
                                                "request") and says in note

"""The one door to stored data (``analysis.data``): only it opens files under ``profiles/``, every
input is pinned by content hash, a new or copied run directory changes nothing until it is
registered, and the simulator's parameter files regenerate from committed code and data (or say
why they cannot)."""
from __future__ import annotations

import builtins
import io
import os
import re
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

from analysis import calibration as cal
from analysis.data import DatasetError, catalogue, history, registry
from analysis.data.tables import read_manifest
from tests.conftest import ROOT

PROFILES = (ROOT / "profiles").resolve()
DOOR = (ROOT / "analysis" / "data").resolve()


def _cmd(*args, cwd=ROOT, timeout=600):
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def test_every_registered_entry_verifies_and_the_catalogue_is_current():
    """Every entry verifies: a retired one from git's objects, or, in a copy without that history
    (the tree shipped to a GPU machine, a shallow clone), it is said to be skipped."""
    r = _cmd("analysis.data", "check")
    assert r.returncode == 0, r.stderr
    n = len(registry.entries())
    done = int(re.search(rf"(\d+) of {n} entries verified", r.stdout)[1])
    skipped = re.search(r"(\d+) retired entries not verified, skipped: no git history", r.stdout)
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT,
                             capture_output=True, text=True).stdout.strip() == "true"
    if skipped is None or (history.history_problem() is None and not shallow):
        assert done == n, r.stdout
    else:
        assert done + int(skipped[1]) == n == done + len(registry.find(retired=True)), r.stdout
    r = _cmd("analysis.data", "catalogue", "--check")
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_committed_run_directory_is_registered_and_has_a_readme():
    """Nothing under profiles/ is invisible by accident, and every run says what tree ran it."""
    entries = registry.entries()
    for arch in sorted(p for p in PROFILES.iterdir() if p.is_dir() and p.name != "__pycache__"):
        for d in sorted(arch.iterdir()):
            rel = f"{arch.name}/{d.name}"
            assert rel in entries, f"profiles/{rel} is committed but not registered"
            if d.is_dir():
                assert (d / "README.md").is_file(), f"profiles/{rel} has no README.md"


def _watch(monkeypatch):
    """Record every open/listing of a path under profiles/ whose call stack has no frame in the
    door (analysis/data/)."""
    bad: list[str] = []

    def check(path):
        try:
            p = Path(os.fsdecode(path)).resolve()
        except (TypeError, ValueError):
            return
        if PROFILES != p and PROFILES not in p.parents:
            return
        stack = traceback.extract_stack()[:-2]
        if not any(Path(f.filename).resolve().is_relative_to(DOOR) for f in stack):
            ours = [f for f in stack if Path(f.filename).resolve().is_relative_to(ROOT)
                    and "tests" not in Path(f.filename).parts]
            where = f"{ours[-1].filename}:{ours[-1].lineno}" if ours else "?"
            bad.append(f"{where} opened {p.relative_to(ROOT)}")

    def wrap(fn):
        def inner(path, *a, **kw):
            if isinstance(path, (str, bytes, os.PathLike)):
                check(path)
            return fn(path, *a, **kw)
        return inner
    for mod, name in ((builtins, "open"), (io, "open"), (os, "scandir"), (os, "listdir")):
        monkeypatch.setattr(mod, name, wrap(getattr(mod, name)))
    return bad


def test_only_the_door_opens_files_under_profiles(monkeypatch):
    """Run every reader of committed data (findings, figures' selection and reading, the params
    files with their pins, the SM maps, the sampled simulator's error, the validations) and
    check that each file under profiles/ was opened from inside analysis/data."""
    from analysis.cache import smmap
    from analysis.data import default_runs, load_rows
    from analysis.findings.report import compute
    from experiments.simulation.simulate import shards_check
    from spec import get_arch
    registry._cache.clear()
    bad = _watch(monkeypatch)
    for arch in ("h100", "h200"):
        compute(arch, sim=False, log=lambda s: None)
        assert load_rows(default_runs(arch))
        cal.read_params(arch)
    cal.default_params(get_arch("gb10"))
    assert smmap.measured_map("h100") and len(smmap.measured_maps("h100")) >= 2
    shards_check.cache_clear()
    assert shards_check()["err_pct_max"] >= shards_check()["err_pct_min"]
    assert not bad, "\n".join(sorted(set(bad)))


def test_the_watch_catches_a_reader_outside_the_door(monkeypatch):
    bad = _watch(monkeypatch)
    (PROFILES / "registry.json.xz").read_bytes()
    assert bad and "registry.json.xz" in bad[0]


@pytest.fixture
def copied_tree(tmp_path):
    """A copy of the repository's profiles/ whose registry is the committed one."""
    shutil.copytree(PROFILES, tmp_path / "profiles",
                    ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    return tmp_path


def _observables():
    from analysis.cache import smmap
    from analysis.data import default_runs
    from analysis.findings.report import compute, markdown
    from spec import get_arch
    out = {"runs": {a: [d.path.name for d in default_runs(a)] for a in ("h100", "h200", "gb10")},
           "findings": {a: "".join(f"{t}\n{markdown(r)}" for t, r in
                                   compute(a, sim=False, log=lambda s: None).values())
                        for a in ("h100", "h200")},
           "params": {a: cal.read_params(a) for a in ("h100", "h200")},
           "gb10": cal.default_params(get_arch("gb10")),
           "maps": smmap.measured_maps("h100")}
    out["maps"] = [Path(m).relative_to(registry.profiles_dir()).as_posix() for m in out["maps"]]
    return out


def test_a_copied_run_directory_changes_nothing_until_registered(copied_tree):
    """Copy every kind of committed run to a newer name: the figures' runs, the findings, the
    simulator parameters (hence the GB10 rows of the main command) stay the same."""
    from analysis.cache import smmap
    with registry.use_root(copied_tree):
        smmap._launches.cache_clear()
        before = _observables()
        h100 = copied_tree / "profiles" / "h100"
        for name in ("sawtooth-20261123", "smmap-20261123", "drift-20261125e", "traffic-20261121",
                     "onepass-20261125", "holdout-20261125j"):
            shutil.copytree(h100 / name, h100 / name.replace("2026112", "2099112"))
        registry._cache.clear()
        smmap._launches.cache_clear()
        assert _observables() == before
    smmap._launches.cache_clear()


def test_a_changed_pinned_input_is_one_line_naming_the_command(copied_tree):
    with registry.use_root(copied_tree):
        with open(copied_tree / "profiles" / "h100" / "smmap-20261123" / "README.md", "a") as f:
            f.write("edited\n")
        with pytest.raises(DatasetError) as e:
            cal.read_params("h100")
    msg = str(e.value)
    assert "\n" not in msg and "smmap-20261123" in msg and "content changed" in msg
    p = cal.read_params("h100")
    bad = p.inputs[0] | {"sha256": "0" * 64}
    with pytest.raises(DatasetError) as e:
        cal.check_inputs(cal.ArchParams(**(vars(p) | {"inputs": (bad,)})), Path("h100.json"))
    assert "re-registered with other content" in str(e.value)
    assert f"regenerate it with `{p.command}`" in str(e.value)


def test_a_pinned_input_that_is_missing_exits_2_in_one_line(copied_tree):
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    shutil.rmtree(copied_tree / "profiles" / "h100" / "drift-sm-20261125b")
    code = ("import sys; from analysis.data import registry, DatasetError;"
            "from analysis import calibration as cal\n"
            f"with registry.use_root({str(copied_tree)!r}):\n"
            "    try: cal.read_params('h100')\n"
            "    except DatasetError as e: print(e, file=sys.stderr); sys.exit(2)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "drift-sm-20261125b" in r.stderr and "git checkout" in r.stderr


@pytest.mark.slow
def test_h100_params_regenerate_byte_for_byte(tmp_path):
    """The committed analysis/params/h100.json is what its own ``command`` writes today."""
    p = cal.read_params("h100")
    assert p.command and not p.frozen
    args = p.command.split()[2:] + ["--out", str(tmp_path)]
    r = _cmd(*args, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "h100.json").read_bytes() == (cal.PARAMS_DIR / "h100.json").read_bytes()


def test_h200_params_are_frozen_and_say_why():
    """h200.json cannot be regenerated: its fit data predate the one-pass counters, which the
    loader now requires. The file says so, and the loader indeed finds no case in them."""
    from spec import get_arch
    p = cal.read_params("h200")
    assert "one-pass" in p.frozen and "divergence-20261121" in p.frozen
    assert cal.load_measured("profiles/h200", get_arch("h200"), "divergence") == []


def test_register_refuses_bad_input_in_one_line(tmp_path):
    for args, msg in ((["register", "/tmp", "--role", "dataset"], "not a run under profiles"),
                      (["register", "profiles/h100/nope-20990101", "--role", "dataset"],
                       "no such file")):
        r = _cmd("analysis.data", *args)
        assert r.returncode == 2 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = _cmd("analysis.data", "register", "profiles/h100/x", "--role", "bogus")
    assert r.returncode == 2


def test_a_generated_run_readme_names_the_tree_that_ran():
    text = catalogue.run_readme("h100/sawtooth-20261123")
    m = read_manifest(PROFILES / "h100" / "sawtooth-20261123")
    assert m["git"]["commit"][:10] in text
    assert ("dirty" in text) == bool(m["git"]["dirty"])
    assert m["command"] in text


def test_a_new_run_says_in_its_readme_which_tree_ran_it(tmp_path, monkeypatch):
    """Every run directory experiments.run writes carries a README naming the commit and whether
    the tree had uncommitted changes (the manifest's git state, in words)."""
    from experiments.rundirs import rundir
    for dirty, says in ((True, "with uncommitted changes (dirty)"), (False, "(clean)")):
        d = tmp_path / str(dirty)
        d.mkdir()
        monkeypatch.setattr(rundir, "git_state", lambda: {"commit": "a" * 40, "dirty": dirty})
        rundir.write_manifest(d, command="python -m experiments.run sawtooth --arch gb10",
                              study="sawtooth", mode="simulate")
        text = (d / "README.md").read_text()
        assert f"commit {'a' * 10} {says}" in text
        assert "python -m experiments.run sawtooth --arch gb10" in text


def test_gb10_params_regenerate_byte_for_byte_and_pin_their_sources(tmp_path):
    """GB10 has no measurements: ``analysis/params/gb10.json`` is derived from the H100 and H200
    files (their content hashes pinned) by its own command, and says that no published value of
    the paper enters it."""
    p = cal.read_params("gb10")
    assert not p.fitted and p.command == "python -m analysis.calibration defaults --arch gb10"
    assert {i["path"] for i in p.inputs} == {"analysis/params/h100.json",
                                              "analysis/params/h200.json"}
    assert "published" in p.derivation
    r = _cmd(*p.command.split()[2:], "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "gb10.json").read_bytes() == (cal.PARAMS_DIR / "gb10.json").read_bytes()
    bad = p.inputs[0] | {"sha256": "0" * 64}
    with pytest.raises(DatasetError, match="which it derives from, changed"):
        cal.check_inputs(cal.ArchParams(**(vars(p) | {"inputs": (bad,)})), Path("gb10.json"))


def test_the_catalogue_marks_recorded_commands_whose_code_has_moved():
    """A run's recorded command stays as it was run; the catalogue says which ones name code
    that no longer exists (a moved module, a removed script) instead of presenting them as
    commands to run today."""
    from analysis.data.catalogue import catalogue_text, runs_today
    assert runs_today("python -m analysis.data check")
    assert runs_today("python -m experiments.run sawtooth --arch gb10")
    assert not runs_today("python -m experiments.simbench --sections 2")      # now explorations.
    assert not runs_today("python /work/main/cuda_baseline/drift.py --arch h100")
    assert runs_today("bash .ci/run")
    text = catalogue_text()
    marked = [ln for ln in text.splitlines() if "as recorded (history)" in ln]
    assert marked and all("experiments.run " not in ln for ln in marked)

"""The one dataset selector (analysis.data.select) over the registered runs: the selection rule,
the reader's one-line errors, and what the figure and findings commands do with bad input and
existing output directories."""
from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import data as DS
from analysis.data import catalogue, registry
from spec.records import data_path
from tests.conftest import ROOT
from tests.cpu.experiments.cli_helpers import module_cli

FIX = ROOT / "tests" / "fixtures" / "figures"
GOOD = FIX / "h200-traffic" / "counters.csv.gz"
GOOD_BYTES = gzip.decompress(GOOD.read_bytes())   # the fixture run's counters, uncompressed


def _run_dir(base: Path, name: str, manifest: dict | None = None, counters: bytes | None = None):
    d = base / name
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps(manifest or {}))
    if counters is not None:
        (d / "counters.csv").write_bytes(counters)
    return d


def _registered(root: Path, role: str = "dataset"):
    """Register every run directory under ``root/profiles/<arch>/`` (the fixture's registry) and
    read through it inside the block."""
    ctx = registry.use_root(root)
    ctx.__enter__()
    docs = [catalogue.entry_fields(f"{a.name}/{d.name}", role)
            for a in sorted((root / "profiles").iterdir()) if a.is_dir()
            for d in sorted(a.iterdir())
            if d.is_dir() and data_path(d, "manifest.json") and "spill" not in d.name]
    registry.write(docs)
    return ctx


@pytest.fixture
def store(tmp_path):
    """Yields a function that registers the runs built so far under ``tmp_path``."""
    ctxs = []

    def reg():
        if ctxs:
            ctxs.pop().__exit__(None, None, None)
        ctxs.append(_registered(tmp_path))
    yield reg
    for c in ctxs:
        c.__exit__(None, None, None)


def _manifest(study, mode="simulate", **params):
    return {"study": study, "mode": mode,
            "parameters": {"seq_override": None, "filter": None,
                           "source": "simulated" if mode == "simulate" else "measured", **params}}


# -- the selection rule ---------------------------------------------------------------------------
def test_repeats_stamps_names_and_artifacts(tmp_path, store):
    base = tmp_path / "profiles" / "h100"
    for name in ("sawtooth-20261001", "sawtooth-20261121", "sawtooth-20261121-r3",
                 "sawtooth-20261121-r2", "sawtooth-20261121-r10", "longseq-20261121",
                 "longseq-forloop-spill-20261121", "drift-20261121"):
        _run_dir(base, name, _manifest(name.split("-2")[0].removesuffix("-forloop-spill"),
                                       "measure"))
    _run_dir(base, "longseq-profile-20261121",
             _manifest("longseq", "measure", filter="cutile.*"))
    (base / "sawtooth-20261121-r4").mkdir()                 # no manifest: an unfinished run
    store()
    ds = DS.select("h100", "sawtooth")
    assert ds.path.name == "sawtooth-20261121" and ds.repeat == 1
    assert [d.path.name for d in DS.repeats_of(ds)] == [
        "sawtooth-20261121", "sawtooth-20261121-r2", "sawtooth-20261121-r3",
        "sawtooth-20261121-r10"]
    # longseq-profile is the longseq study run with a filter: never the default longseq run
    assert DS.select("h100", "longseq").path.name == "longseq-20261121"
    lp = DS.select("h100", "longseq", name="longseq-profile", params={"filter": DS.ANY})
    assert lp.path.name == "longseq-profile-20261121"
    # the spill artifact is never a dataset
    assert all("spill" not in d.path.name for d in DS.discover("h100"))
    assert DS.select("h200", "sawtooth") is None


def test_an_unregistered_run_changes_nothing(tmp_path, store):
    """Committing a newer run directory changes no selection until it is registered."""
    base = tmp_path / "profiles" / "h100"
    _run_dir(base, "sawtooth-20261121", _manifest("sawtooth", "measure"))
    store()
    newer = _run_dir(base, "sawtooth-20261130", _manifest("sawtooth", "measure"))
    assert DS.select("h100", "sawtooth").path.name == "sawtooth-20261121"
    with pytest.raises(DS.DatasetError, match="not registered.*analysis.data register"):
        DS.read_run(newer)
    store()                                                    # registered: now it is read
    assert DS.select("h100", "sawtooth").path.name == "sawtooth-20261130"


def test_a_changed_run_is_refused_in_one_line(tmp_path, store):
    base = tmp_path / "profiles" / "h100"
    d = _run_dir(base, "traffic-20261121", _manifest("traffic", "measure"), GOOD_BYTES)
    store()
    assert DS.read_run(d)["counters.csv"]
    (d / "counters.csv").write_bytes(GOOD_BYTES.replace(b"\n", b"\n", 1) + b"\n")
    registry._cache.clear()
    with pytest.raises(DS.DatasetError) as e:
        DS.read_run(d)
    msg = str(e.value)
    assert "\n" not in msg and "content changed" in msg and "git checkout" in msg
    (d / "counters.csv").unlink()
    registry._cache.clear()
    with pytest.raises(DS.DatasetError, match="content changed"):
        DS.read_run(d)
    shutil.rmtree(d)
    registry._cache.clear()
    with pytest.raises(DS.DatasetError, match="registered but missing"):
        DS.read_run(d)


def test_a_local_run_with_other_parameters_is_not_the_default(tmp_path, store):
    """After `experiments.run sawtooth --arch gb10 --capacity-mib 20`, the default GB10 selection
    still reads the committed nominal-capacity run; the 20 MiB run is read only when named."""
    l2 = 24 * 2**20
    _run_dir(tmp_path / "profiles" / "gb10", "sawtooth-20261121",
             _manifest("sawtooth", capacity_bytes=l2))
    local = _run_dir(tmp_path / "runs" / "gb10" / "sawtooth", "20261124-101500-simulate",
                     _manifest("sawtooth", capacity_bytes=20 * 2**20))
    store()
    assert DS.select("gb10", "sawtooth").path.name == "sawtooth-20261121"
    assert [d.path.name for d in DS.default_runs("gb10")] == ["sawtooth-20261121"]
    got = DS.select("gb10", "sawtooth", params={"capacity_bytes": 20 * 2**20})
    assert got.path == local and not got.committed
    assert got.label.endswith("20261124-101500-simulate")


@pytest.mark.parametrize("recorded, read", [(None, None), (4096, (4096,)),
                                           ([196608, 229376], (196608, 229376))])
def test_seq_override_reads_one_length_or_several(tmp_path, store, recorded, read):
    """Runs before 2026-11-25 recorded one ``--seq`` length, later ones the list given; a run
    with any override is never a study's default run."""
    d = _run_dir(tmp_path / "profiles" / "h100", "traffic-20261126",
                 _manifest("traffic", "measure", seq_override=recorded))
    store()
    ds = DS.dataset(d)
    assert ds.seq_override == read and ds.is_default(None) == (read is None)


def test_committed_before_local_and_latest_local(tmp_path, store):
    loc = tmp_path / "runs" / "h100" / "sawtooth"
    _run_dir(loc, "20261124-090000-simulate", _manifest("sawtooth"))
    _run_dir(loc, "20261124-100000-simulate", _manifest("sawtooth"))
    _run_dir(loc, ".partial-77", _manifest("sawtooth"))             # unfinished: never read
    (tmp_path / "profiles" / "h100").mkdir(parents=True)
    store()
    assert DS.select("h100", "sawtooth").path.name == "20261124-100000-simulate"
    _run_dir(tmp_path / "profiles" / "h100", "sawtooth-20261121", _manifest("sawtooth", "measure"))
    store()
    assert DS.select("h100", "sawtooth").path.name == "sawtooth-20261121"
    assert DS.select("h100", "sawtooth", source="simulated").path.name == \
        "20261124-100000-simulate"


# -- the reader ------------------------------------------------------------------------------------
def _bad_inputs() -> dict[str, bytes | None]:
    good = GOOD_BYTES
    header, rest = good.split(b"\n", 1)
    cols = header.split(b",")
    drop = cols.index(b"metric")
    no_metric = b"\n".join(b",".join(f for i, f in enumerate(line.split(b",")) if i != drop)
                           for line in good.splitlines())
    return {"truncated": good[: len(good) // 2 - 7],
            "binary": b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)),
            "column-missing": no_metric,
            "empty": b"",
            "header-only": header + b"\n",
            "absent": None}


@pytest.mark.parametrize("kind", list(_bad_inputs()))
def test_reader_says_what_is_wrong_in_one_line(kind, tmp_path):
    d = _run_dir(tmp_path, "run", _manifest("traffic"), _bad_inputs()[kind])
    with pytest.raises(DS.DatasetError) as e:
        DS.read_run(d)
    msg = str(e.value)
    assert "\n" not in msg and "counters.csv" in msg or str(d) in msg
    assert DS.read_table(GOOD)                                      # the good file reads


def test_absent_directory_and_no_data(tmp_path):
    with pytest.raises(DS.DatasetError, match="no such run directory"):
        DS.read_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DS.DatasetError, match="none of counters.csv"):
        DS.read_run(tmp_path / "empty")


# -- the commands ----------------------------------------------------------------------------------
def _cmd(*args):
    # a figure module run with -m is imported twice (the package imports every figure), which
    # runpy reports with a RuntimeWarning line: not part of the command's own output
    return subprocess.run([sys.executable, "-W", "ignore::RuntimeWarning", "-m", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def _cmd_here(*args):
    """``_cmd`` in this process (``module_cli``): for the checks of what a command prints and
    returns on bad input; those about ``python -m`` itself keep ``_cmd``."""
    return module_cli(*args, ignore=(RuntimeWarning,))


@pytest.mark.parametrize("kind", list(_bad_inputs()))
def test_paper_figures_on_bad_counters(kind, tmp_path):
    d = _run_dir(tmp_path, "run", _manifest("traffic"), _bad_inputs()[kind])
    out = tmp_path / "figs"
    r = _cmd_here("paper_figures", "--arch", "h200", "--run", str(d), "--out", str(out))
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not out.exists()


def test_figure_module_main_on_bad_counters(tmp_path):
    d = _run_dir(tmp_path, "run", _manifest("traffic"), _bad_inputs()["truncated"])
    r = _cmd("paper_figures.t2_model_error", "--arch", "h200", "--run", str(d), "--out",
             str(tmp_path / "figs"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "figs").exists()


def test_named_run_that_no_figure_applies_to_is_an_error(tmp_path):
    d = _run_dir(tmp_path, "run", _manifest("traffic"), GOOD_BYTES)
    r = _cmd("paper_figures.ladder", "--arch", "h200", "--run", str(d), "--out",
             str(tmp_path / "figs"))
    assert r.returncode == 2 and "no figure applies" in r.stderr
    assert not (tmp_path / "figs").exists()


def test_existing_output_directory_is_refused_and_kept(tmp_path):
    out = tmp_path / "figs"
    out.mkdir()
    (out / "old.png").write_bytes(b"old")
    r = _cmd("paper_figures.t2_model_error", "--arch", "h200", "--run", str(FIX / "h200-traffic"),
             "--out", str(out))
    assert r.returncode == 2 and "already exists" in r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["old.png"]


def test_render_run_prints_one_summary_line(tmp_path):
    from rich.console import Console

    from paper_figures import render_run
    console = Console(record=True, width=200)
    report = render_run(FIX / "h200-traffic", "h200", tmp_path / "figs", console)
    lines = console.export_text().strip().splitlines()
    drawn = sum("files" in r for r in report)
    assert lines == [f"drew {drawn} figure(s) in {tmp_path / 'figs'}; {len(report) - drawn} not "
                     f"applicable to this run"]
    index = json.loads((tmp_path / "figs" / "figures.json").read_text())
    figures = {f["figure"] for f in index["figures"] if "files" in f}
    assert figures == {"F3", "F4", "T2", "F7"}   # F7 is analytic


@pytest.mark.parametrize("kind", ["truncated", "binary", "column-missing", "empty", "absent"])
def test_findings_on_bad_counters(kind, tmp_path):
    """A named run with broken counters: one line, exit 2, no report directory."""
    src = DS.select("h100", "traffic").path                 # committed: this repository has it
    d = tmp_path / src.name
    shutil.copytree(src, d)
    bad = _bad_inputs()[kind]
    for f in ("counters.csv", "counters.csv.gz", "counters.csv.xz"):   # committed plain or packed
        (d / f).unlink(missing_ok=True)
    if bad is not None:
        (d / "counters.csv").write_bytes(bad)
    r = _cmd_here("analysis.findings", "--arch", "h100", "--no-sim", "--run", str(d), "--out",
                  str(tmp_path / "out"))
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()


def test_findings_per_arch_directories_never_mix(tmp_path):
    from analysis.findings.__main__ import main
    assert main(["--arch", "h100", "--no-sim", "--out", str(tmp_path)]) == 0
    assert main(["--arch", "h200", "--no-sim", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "h100" / "findings-h100.md").exists()
    assert not (tmp_path / "h100" / "findings-h200.md").exists()
    assert main(["--arch", "h100", "--no-sim", "--out", str(tmp_path)]) == 2     # refused


@pytest.mark.parametrize("suffix", [".gz", ".xz"])
def test_a_compressed_data_file_reads_as_the_plain_one(tmp_path, suffix):
    """Committed CSVs are stored as ``<name>.xz`` (or ``.gz``): the run reads the same rows, and
    broken compressed data is one line like any other bad file."""
    import gzip
    import lzma
    pack = {".gz": gzip.compress, ".xz": lzma.compress}[suffix]
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    plain.mkdir()
    packed.mkdir()
    (plain / "counters.csv").write_bytes(GOOD_BYTES)
    (packed / f"counters.csv{suffix}").write_bytes(pack(GOOD_BYTES))
    assert DS.read_run(packed) == DS.read_run(plain)
    (packed / f"counters.csv{suffix}").write_bytes(pack(GOOD_BYTES)[:40])
    with pytest.raises(DS.DatasetError) as e:
        DS.read_run(packed)
    assert "\n" not in str(e.value) and f"counters.csv{suffix}" in str(e.value)


@pytest.mark.parametrize("kind", ["missing", "file", "empty-dir", "other-study", "other-arch"])
def test_findings_refuses_a_bad_named_run_before_any_work(kind, tmp_path):
    """``--run`` is checked first: a missing path, a file, a directory without data, a run of a
    study no section reads or of another arch is one line and exit 2, and the committed findings
    are never printed in its place."""
    path = {"missing": tmp_path / "nope", "file": tmp_path / "f.txt",
            "empty-dir": tmp_path / "empty"}.get(kind)
    if kind == "file":
        path.write_text("x")
    elif kind == "empty-dir":
        path.mkdir()
    elif kind in ("other-study", "other-arch"):
        m = _manifest("convoy" if kind == "other-study" else "traffic")
        if kind == "other-arch":
            m["arch"] = {"name": "h200"}
        path = _run_dir(tmp_path, "run", m, GOOD_BYTES)
    r = _cmd_here("analysis.findings", "--arch", "h100", "--no-sim", "--run", str(path))
    assert r.returncode == 2 and r.stdout == "", r.stdout[-300:]
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error: --run ")
    want = {"missing": "no such run directory", "file": "a file, not a run directory",
            "empty-dir": "none of counters.csv", "other-study": "no findings section reads",
            "other-arch": "pass --arch h200"}[kind]
    assert want in r.stderr, r.stderr


def test_findings_refuses_an_output_that_is_a_file_before_any_work(tmp_path):
    f = tmp_path / "taken"
    f.write_text("mine")
    r = _cmd("analysis.findings", "--arch", "h100", "--no-sim", "--out", str(f))
    assert r.returncode == 2 and r.stdout == "" and "is a file, not a directory" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and f.read_text() == "mine"


@pytest.mark.parametrize("cmd", [
    ("paper_figures", "--arch", "h100", "--out", "{file}"),
    ("paper_figures", "--arch", "h100", "--out", "{file}/sub"),
    ("paper_figures.f07_access_order", "--out", "{file}"),
    ("analysis.calibration", "validate", "--arch", "h100", "--out", "{full}"),
    ("analysis.calibration", "defaults", "--arch", "gb10", "--out", "{file}"),
    ("analysis.data", "list", "--arch", "nope"),
])
def test_outputs_and_inputs_are_checked_before_any_work(cmd, tmp_path):
    """An output in the way (a file, a directory with files) or an arch with nothing registered
    is one line and exit 2, printed before anything else; the file in the way is kept."""
    f = tmp_path / "taken"
    f.write_text("mine")
    full = tmp_path / "full"
    full.mkdir()
    (full / "old.csv").write_text("old")
    r = _cmd(*[a.format(file=f, full=full) for a in cmd])
    assert r.returncode == 2 and r.stdout == "", (r.stdout[-300:], r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error: "), r.stderr
    assert f.read_text() == "mine" and sorted(p.name for p in full.iterdir()) == ["old.csv"]

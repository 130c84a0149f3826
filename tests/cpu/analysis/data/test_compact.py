"""``python -m analysis.data compact`` on a store of its own: machine files become ``.xz`` and read
back the same through the door, small files and READMEs stay as they are, the runs are re-pinned
and verify, the documents that cited the old names cite the new ones (a command's ``--out`` is
left alone), a run a params file pins is skipped unless ``--pinned``, which rewrites the pin."""
from __future__ import annotations

import gzip
import json
import lzma

import pytest

from analysis.data import registry
from analysis.data.__main__ import main
from analysis.data.catalogue import entry_fields
from analysis.data.compact import compact, pinned_hashes
from analysis.data.tables import read_manifest, read_run
from spec.records import read_bytes
from tests.conftest import ROOT

ROWS = ROOT / "tests/fixtures/figures/ladder/timing.csv.gz"


def _run(d, readme: str):
    d.mkdir(parents=True)
    (d / "timing.csv").write_bytes(gzip.decompress(ROWS.read_bytes()))
    manifest = {"study": "ladder", "mode": "measure", "command": "python -m experiments.run "
                "ladder --arch h100", "parameters": {"reps": 3},
                "cases": [f"case-{i}" for i in range(200)]}
    (d / "manifest.json").write_text(json.dumps(manifest, indent=1))
    (d / "note.txt").write_text("short; stays plain\n")
    (d / "README.md").write_text(readme)


@pytest.fixture
def store(tmp_path):
    prof = tmp_path / "profiles"
    _run(prof / "h100/ladder-20990101", "# run\n\n`timing.csv` rows; `manifest.json`; "
                                        "`note.txt`.\n\n```\npython -m experiments.run ladder "
                                        "--out timing.csv\n```\n")
    _run(prof / "h100/ladder-20990102", "# pinned run\n")
    with registry.use_root(tmp_path):
        registry.write([entry_fields("h100/ladder-20990101", "dataset"),
                        entry_fields("h100/ladder-20990102", "dataset")])
        pinned = registry.entries()["h100/ladder-20990102"].sha256
    (tmp_path / "analysis/params").mkdir(parents=True)
    (tmp_path / "analysis/params/h100.json").write_text(json.dumps(
        {"inputs": [{"path": "profiles/h100/ladder-20990102", "sha256": pinned}]}))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/page.md").write_text(
        "See `profiles/h100/ladder-20990101/timing.csv` and ladder-20990101/manifest.json; "
        "not profiles/h100/ladder-20990101/timing.csvx.\n")
    return tmp_path


def test_compact_stores_xz_reads_back_the_same_and_rewrites_citations(store):
    with registry.use_root(store):
        run = registry.profiles_dir() / "h100/ladder-20990101"
        before = read_run(run)
        manifest = read_manifest(run)
        renames, skipped = compact()
        registry._cache.clear()
        names = sorted(p.name for p in run.iterdir())
        assert names == ["README.md", "manifest.json.xz", "note.txt", "timing.csv.xz"]
        assert lzma.decompress((run / "timing.csv.xz").read_bytes()).startswith(b"run,study")
        for e in registry.entries().values():
            registry.verify(e)
        assert read_run(run) == before and read_manifest(run) == manifest
        assert {r.old for r in renames} == {"h100/ladder-20990101/timing.csv",
                                           "h100/ladder-20990101/manifest.json"}
        assert skipped and "ladder-20990102" in skipped[0]
        readme = (run / "README.md").read_text()
        assert "`timing.csv.xz` rows; `manifest.json.xz`; `note.txt`" in readme
        assert "--out timing.csv\n" in readme
        page = (store / "docs/page.md").read_text()
        assert "`profiles/h100/ladder-20990101/timing.csv.xz`" in page
        assert "ladder-20990101/manifest.json.xz;" in page and "timing.csvx" in page
        again, _ = compact()
        assert again == []


def test_a_pinned_run_is_compacted_only_with_pinned_and_its_pin_follows(store):
    params = store / "analysis/params/h100.json"
    with registry.use_root(store):
        old = registry.entries()["h100/ladder-20990102"].sha256
        assert old in pinned_hashes()
        compact(["profiles/h100/ladder-20990102"], pinned=True)
        registry._cache.clear()
        e = registry.verify(registry.entries()["h100/ladder-20990102"])
        assert e.sha256 != old
        assert json.loads(params.read_text())["inputs"][0]["sha256"] == e.sha256
        assert (e.abspath / "timing.csv.xz").exists()


def test_dry_run_changes_nothing_and_says_what_it_would_save(store, capsys):
    with registry.use_root(store):
        reg = (registry.profiles_dir() / "registry.json.xz").read_bytes()
        assert main(["compact", "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert "would store 2 file(s) of 1 run(s)" in out and "ladder-20990102" in out
        assert (registry.profiles_dir() / "registry.json.xz").read_bytes() == reg
        assert (registry.profiles_dir() / "h100/ladder-20990101/timing.csv").exists()


def test_readers_find_a_stored_file_by_its_plain_or_old_name(store):
    with registry.use_root(store):
        compact()
        registry._cache.clear()
        for name in ("timing.csv", "timing.csv.gz", "timing.csv.xz"):
            p = registry.open_path(f"profiles/h100/ladder-20990101/{name}")
            assert p.name == "timing.csv.xz"
        assert read_bytes(p).startswith(b"run,study")
        with pytest.raises(registry.DatasetError, match="no such file"):
            registry.open_path("profiles/h100/ladder-20990101/counters.csv")

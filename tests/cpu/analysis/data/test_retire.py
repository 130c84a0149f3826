"""Runs retired into git history (``analysis.data.history``), on a git repository of its own: a
retire/restore round trip gives back the same bytes and the same registry, a run that something
reads is refused, a restore from a wrong, missing or unreachable commit is refused, a retired
run opens as the one-line error naming the restore command, and bad arguments are one line,
exit 2, with nothing written."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from analysis.data import DatasetError, history, registry
from analysis.data.__main__ import main
from analysis.data.catalogue import catalogue_text, entry_fields

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(root: Path, *args: str) -> str:
    r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                       env=os.environ | GIT_ENV, check=True)
    return r.stdout.strip()


def _run(d: Path, study: str, extra: dict[str, bytes] | None = None) -> None:
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"study": study, "mode": "measure",
                                                 "parameters": {"source": "measured"}}))
    (d / "README.md").write_text(f"# {d.name}\n")
    for rel, data in (extra or {}).items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data)


ROLES = {"h100/ladder-20990101": "dataset", "h100/ladder-20990102": "dataset",
         "h100/notes-20990101": "evidence", "h100/bench.csv.gz": "evidence",
         "h100/probe-20990101": "evidence", "h100/pinned-20990101": "evidence",
         "h100/smmap-20990101": "instrument"}


@pytest.fixture
def repo(tmp_path):
    """A committed repository: two runs of one study (the later one is what selection picks),
    evidence read by nothing (a directory with nested names that sort differently as paths and
    as strings, an executable file, and a single-file entry), evidence a module names, evidence a
    params file pins, and an instrument."""
    root = tmp_path / "repo"
    prof = root / "profiles" / "h100"
    git(tmp_path, "init", "-q", "-b", "main", str(root))
    git(root, "commit", "-q", "--allow-empty", "-m", "empty")
    _run(prof / "ladder-20990101", "ladder", {"timing.csv": b"a,b\n1,2\n"})
    _run(prof / "ladder-20990102", "ladder", {"timing.csv": b"a,b\n3,4\n"})
    _run(prof / "notes-20990101", "notes", {"sub/a.txt": b"nested\n", "sub-b.txt": b"beside\n",
                                            "run.sh": b"#!/bin/sh\necho hi\n"})
    (prof / "notes-20990101" / "run.sh").chmod(0o755)
    (prof / "bench.csv.gz").write_bytes(gzip.compress(b"x,y\n1,2\n", mtime=0))
    _run(prof / "probe-20990101", "probe")
    _run(prof / "pinned-20990101", "pinned")
    _run(prof / "smmap-20990101", "smmap")
    (root / "analysis").mkdir()
    (root / "analysis" / "reader.py").write_text('PROBE = "profiles/h100/probe-20990101"\n')
    with registry.use_root(root):
        registry.write([entry_fields(p, role) for p, role in ROLES.items()])
        pin = registry.entries()["h100/pinned-20990101"].pin()
        (root / "analysis" / "params.json").write_text(json.dumps({"inputs": [pin]}))
        (root / "profiles" / "README.md").write_text(catalogue_text())
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "runs")
    with registry.use_root(root):
        yield root


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    prof = root / "profiles"
    return {p.relative_to(prof).as_posix(): (p.read_bytes(), p.stat().st_mode & 0o777)
            for p in sorted(prof.rglob("*")) if p.is_file()}


def _one_line_exit_2(capsys, argv: list[str], *says: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    for s in says:
        assert s in err, err
    return err


RETIRABLE = ["profiles/h100/notes-20990101", "profiles/h100/bench.csv.gz",
             "profiles/h100/ladder-20990101"]


def test_retire_then_restore_gives_back_the_same_bytes_and_registry(repo, capsys):
    before = _snapshot(repo)
    reg = (repo / "profiles" / "registry.json.xz").read_bytes()
    made = git(repo, "rev-parse", "HEAD")
    git(repo, "commit", "-q", "--allow-empty", "-m", "later work")
    assert main(["retire", *RETIRABLE]) == 0
    out = capsys.readouterr().out
    assert out.count(f"in commit {made[:12]}") == 3 and "python -m analysis.data catalogue" in out
    for p in RETIRABLE:
        assert not (repo / p).exists()
        # the commit that made the run what it is, not HEAD: a squash of HEAD's branch keeps it
        assert registry.entries()[p.removeprefix("profiles/")].retired == made
    # the door: not listed, not selected, opening it is one line naming the restore command
    assert {e.path for e in registry.find()} == set(ROLES) - {p[9:] for p in RETIRABLE}
    with pytest.raises(DatasetError) as e:
        registry.open_path("profiles/h100/notes-20990101/sub/a.txt")
    assert "\n" not in str(e.value)
    assert "python -m analysis.data restore profiles/h100/notes-20990101" in str(e.value)
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert "(retired in" in listed and "restore profiles/h100/bench.csv.gz" in listed
    assert main(["check"]) == 0
    assert f"{len(ROLES)} of {len(ROLES)} entries verified (3 retired, from git history)" in \
        capsys.readouterr().out
    page = catalogue_text()
    assert "## Retired into git history" in page
    assert "`h100/ladder-20990101`" in page.split("## Retired into git history")[1]
    assert "`python -m analysis.data restore profiles/<run>`" in page
    # committed, the retirement still restores from the commit it names
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "retire")
    assert main(["restore", "--all"]) == 0
    assert "3 run(s) restored" in capsys.readouterr().out
    assert _snapshot(repo) == before
    assert (repo / "profiles" / "registry.json.xz").read_bytes() == reg
    assert not [p for p in (repo / "profiles").rglob(".*")]       # no temporary files left


@pytest.mark.parametrize("path, reader", [
    ("profiles/h100/ladder-20990102", "analysis.data.select"),
    ("profiles/h100/probe-20990101", "analysis/reader.py:1 (names it)"),
    ("profiles/h100/pinned-20990101", "analysis/params.json (pins its hash)"),
    ("profiles/h100/smmap-20990101", "its role (instrument")])
def test_a_run_something_reads_is_refused_naming_the_reader(repo, capsys, path, reader):
    before = _snapshot(repo)
    _one_line_exit_2(capsys, ["retire", "profiles/h100/notes-20990101", path], path, reader)
    assert _snapshot(repo) == before                    # all or nothing: notes stays too


def test_a_registry_query_by_study_reads_every_run_it_matches(repo, tmp_path):
    (repo / "analysis" / "fit.py").write_text(
        'from analysis.data.registry import find, find_files\nSTUDY = "notes"\n'
        'def runs(arch):\n    return find(arch=arch, study=STUDY)\n'
        'def spills(arch):\n    return find(arch=arch, prefix=f"{arch}/probe-")\n'
        'def maps(arch):\n    return find_files(arch, "timing.csv*")\n')
    who = {e: history.readers(registry.entries()[e]) for e in
           ("h100/notes-20990101", "h100/probe-20990101", "h100/ladder-20990101")}
    assert who["h100/notes-20990101"] == ["analysis/fit.py:4 (a registry query that matches it)"]
    assert "analysis/fit.py:6 (a registry query that matches it)" in who["h100/probe-20990101"]
    assert who["h100/ladder-20990101"] == ["analysis/fit.py:8 (a registry query that matches it)"]


def test_uncommitted_runs_are_refused(repo, capsys):
    _run(repo / "profiles" / "h100" / "notes-20990102", "notes")
    docs = [dict(vars(e)) for e in registry.entries().values()]
    registry.write(docs + [entry_fields("h100/notes-20990102", "evidence")])
    _one_line_exit_2(capsys, ["retire", "profiles/h100/notes-20990102"], "uncommitted changes")
    git(repo, "add", "profiles/h100/notes-20990102")           # staged, not committed
    _one_line_exit_2(capsys, ["retire", "profiles/h100/notes-20990102"], "uncommitted changes")
    git(repo, "commit", "-q", "-m", "notes 2")
    (repo / "profiles" / "h100" / "notes-20990102" / "README.md").write_text("edited\n")
    _one_line_exit_2(capsys, ["retire", "profiles/h100/notes-20990102"],
                     "do not hash to the pinned")


@pytest.mark.parametrize("commit, says", [
    ("0" * 40, "not in this repository's history"),
    ("HEAD~1", "holds no such run"),
    ("zz", "not a full 40-hex commit id")])
def test_restore_from_a_wrong_or_missing_commit_is_refused(repo, capsys, commit, says):
    assert main(["retire", "profiles/h100/notes-20990101"]) == 0
    capsys.readouterr()
    if commit.startswith("HEAD"):
        commit = git(repo, "rev-parse", commit)
    docs = [dict(vars(e)) for e in registry.entries().values()]
    for d in docs:
        if d["path"] == "h100/notes-20990101":
            d["retired"] = commit
    registry.write(docs)
    _one_line_exit_2(capsys, ["restore", "profiles/h100/notes-20990101"], says)
    assert not (repo / "profiles" / "h100" / "notes-20990101").exists()
    assert main(["check"]) == 2
    assert says in capsys.readouterr().err


def test_restore_refuses_a_commit_whose_copy_has_other_content(repo, capsys):
    old = git(repo, "rev-parse", "HEAD")
    (repo / "profiles" / "h100" / "notes-20990101" / "README.md").write_text("# v2\n")
    docs = {e.path: dict(vars(e)) for e in registry.entries().values()}
    docs["h100/notes-20990101"] = entry_fields("h100/notes-20990101", "evidence")
    registry.write(list(docs.values()))
    git(repo, "commit", "-q", "-am", "v2")
    assert main(["retire", "profiles/h100/notes-20990101"]) == 0
    docs = [dict(vars(e)) | ({"retired": old} if e.path == "h100/notes-20990101" else {})
            for e in registry.entries().values()]
    registry.write(docs)
    capsys.readouterr()
    _one_line_exit_2(capsys, ["restore", "profiles/h100/notes-20990101"], "hash to",
                     "git log -- profiles/h100/notes-20990101")


def test_without_history_restore_refuses_and_check_says_it_skipped(repo, tmp_path, capsys):
    assert main(["retire", "profiles/h100/notes-20990101"]) == 0
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "retire")
    capsys.readouterr()
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git"))
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow))
    for where, says in ((copy, "not the top of a git clone"), (shallow, "git fetch --unshallow")):
        with registry.use_root(where):
            _one_line_exit_2(capsys, ["restore", "--all"], says)
            assert main(["check"]) == 0
            out = capsys.readouterr().out
            assert f"{len(ROLES) - 1} of {len(ROLES)} entries verified" in out
            assert "1 retired entries not verified, skipped" in out and says in out
            assert not (where / "profiles" / "h100" / "notes-20990101").exists()


@pytest.mark.parametrize("argv, says", [
    (["retire", "profiles/h100/nope-20990101"], "no such registered run"),
    (["retire", "profiles/h100/stray-20990101"], "not registered"),
    (["retire", "profiles/h100/notes-20990101/sub"], "inside the run profiles/h100/notes-20990101"),
    (["retire", "/tmp"], "not under profiles/"),
    (["restore", "profiles/h100/notes-20990101"], "not retired"),
    (["restore", "profiles/h100/nope-20990101"], "no such registered run"),
    (["restore"], "registered runs or --all"),
    (["restore", "--all", "profiles/h100/notes-20990101"], "registered runs or --all")])
def test_bad_arguments_are_one_line_exit_2_and_write_nothing(repo, capsys, argv, says):
    _run(repo / "profiles" / "h100" / "stray-20990101", "stray")
    before = _snapshot(repo)
    _one_line_exit_2(capsys, argv, says)
    assert _snapshot(repo) == before


def test_retiring_twice_and_registering_a_retired_run_say_what_to_do(repo, capsys):
    assert main(["retire", "profiles/h100/notes-20990101"]) == 0
    capsys.readouterr()
    _one_line_exit_2(capsys, ["retire", "profiles/h100/notes-20990101"], "already retired")
    _one_line_exit_2(capsys, ["register", "profiles/h100/notes-20990101", "--role", "evidence"],
                     "python -m analysis.data restore profiles/h100/notes-20990101")

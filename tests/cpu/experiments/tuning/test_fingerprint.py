"""The SASS fingerprint tool (``experiments.tuning.fingerprint``): ``--compare`` on written files
(exit 0 when they agree, 1 naming what differs, 2 on bad input), and, where the toolchains are
installed, a cuTile and a CUDA build fingerprinted twice with the same result."""
from __future__ import annotations

import json

import pytest

from experiments.tuning import fingerprint as fp
from tests.conftest import require_toolchain


def _write(path, builds, errors=None):
    path.write_text(json.dumps({"schema": 1, "builds": builds, "errors": errors or {}}))
    return str(path)


def test_compare_exit_codes_and_names(tmp_path, capsys):
    a = _write(tmp_path / "a.json", {"cutile.x": "1", "cuda.y": "2", "cuda.z": "3"})
    same = _write(tmp_path / "same.json", {"cuda.z": "3", "cuda.y": "2", "cutile.x": "1"})
    assert fp.main(["--compare", a, same]) == 0
    assert "3 identical, 0 differ" in capsys.readouterr().out
    b = _write(tmp_path / "b.json", {"cutile.x": "1", "cuda.y": "9", "cuda.w": "4"})
    assert fp.main(["--compare", a, b]) == 1
    out = capsys.readouterr().out
    assert "differs: cuda.y" in out and f"only in {a}: cuda.z" in out
    assert f"only in {b}: cuda.w" in out and "cutile.x" not in out.split("\n1 identical")[0]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert fp.main(["--compare", a, str(bad)]) == 2
    assert fp.main(["--compare", a, str(tmp_path / "missing.json")]) == 2
    assert fp.main(["--compare", a, _write(tmp_path / "c.json", [])]) == 2


def test_enumeration_is_stable_and_sampled_evenly():
    builds = fp.enumerate_builds("both")
    names = [n for n, _ in builds]
    assert len(names) == len(set(names)) > 1500        # both families, every test list
    assert names == [n for n, _ in fp.enumerate_builds("both")]
    assert {n.split(".")[0] for n in names} == {"cutile", "cuda"}
    picked = fp.sample(builds, 4, None)
    assert len(picked) == 4 and picked[0] == builds[0]
    assert all(n.startswith("cuda.flash_bwd") for n, _ in fp.sample(builds, None, "flash_bwd"))


@pytest.mark.compile
@pytest.mark.slow
def test_two_builds_fingerprint_reproducibly(tmp_path):
    from cuda_baseline.build.source import nvcc_path
    from tests.cpu.kernels.test_cutile_compile import _available
    require_toolchain(_available() and nvcc_path() is not None,
                      "cuda-tile + tileiras + cuobjdump and nvcc")
    builds = fp.enumerate_builds("both")
    pick = [next(b for b in builds if b[0].startswith("cutile.fwd")),
            next(b for b in builds if b[0].startswith("cuda.flash_fwd<"))]
    first = fp.run(pick, jobs=2)
    assert first["counts"]["fingerprinted"] == 2 and not first["errors"]
    assert all(v > 0 for v in first["text_bytes"].values())
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(first))
    b.write_text(json.dumps(fp.run(pick, jobs=1)))
    assert fp.compare(str(a), str(b)) == 0

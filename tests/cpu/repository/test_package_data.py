"""The package data a non-editable install carries (``pyproject.toml``) names what exists: every
``profiles/`` pattern lies inside a registered run and matches files, so a run that is renamed or
re-registered cannot silently drop out of the wheel (``test_install.py``, marked slow, installs it
and runs the commands)."""
from __future__ import annotations

import tomllib

from analysis.data import registry
from tests.conftest import ROOT


def _package_data() -> dict[str, list[str]]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return doc["tool"]["setuptools"]["package-data"]


def test_every_packaged_profiles_pattern_is_a_registered_run_with_files():
    patterns = _package_data()["profiles"]
    assert "registry.json.xz" in patterns
    entries = registry.entries()
    for pat in patterns:
        if pat == "registry.json.xz":
            continue
        top = "/".join(pat.split("/")[:2])
        assert top in entries, f"pyproject.toml packages profiles/{pat}, not a registered run"
        assert list((ROOT / "profiles").glob(pat)), f"profiles/{pat} matches no file"


def test_every_packaged_run_is_carried_whole():
    """A registered run is hashed over all its files: the patterns must take every one of them,
    or the installed copy would fail its content check."""
    patterns = _package_data()["profiles"]
    tops = {"/".join(p.split("/")[:2]) for p in patterns if p != "registry.json.xz"}
    base = ROOT / "profiles"
    carried = {f for p in patterns if p != "registry.json.xz" for f in base.glob(p) if f.is_file()}
    for top in tops:
        files = {f for f in (base / top).rglob("*") if f.is_file()
                 and "__pycache__" not in f.parts}
        assert files <= carried, f"profiles/{top}: {sorted(files - carried)[:3]} not packaged"


def test_the_kernel_configurations_and_sources_are_packaged():
    """The cuTile rules' JSON and the CUDA family's C++ travel with a non-editable install."""
    assert "rules/configs/*.json" in _package_data()["kernels"]
    assert list((ROOT / "kernels" / "rules" / "configs").glob("*.json"))
    for pattern in ("device/*.cu", "device/*.cuh"):
        assert pattern in _package_data()["cuda_baseline"]
        assert list((ROOT / "cuda_baseline").glob(pattern))

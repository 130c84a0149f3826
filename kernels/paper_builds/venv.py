"""The virtualenvs that hold a cuTile toolchain: find their tools and versions, and check that
one is usable (the old toolchain, cuda-tile 1.0.x with tileiras 13.1.80, lives in its own venv
beside the project's; ``kernels.paper_builds.toolchains`` compiles with both)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

OLD_VENV = Path(__file__).resolve().parents[2] / ".venv-ct10"
OLD_PINS = ("cuda-tile==1.0.1", "nvidia-cuda-tileiras==13.1.80", "nvidia-cuda-nvcc==13.1.80",
            "nvidia-nvvm==13.1.80", "nvidia-cuda-nvdisasm", "nvidia-cuda-cuobjdump", "numpy")


class SetupError(RuntimeError):
    """A toolchain or input is missing; the message names the fix."""


def setup_commands(venv: Path) -> list[str]:
    return [f"python3 -m venv {venv}", f"{venv}/bin/pip install " + " ".join(repr(p) if "=" in p
                                                                         else p for p in OLD_PINS)]


def venv_tool(venv: Path, name: str) -> Path | None:
    for p in sorted(venv.glob(f"lib/python3*/site-packages/nvidia/cu13/bin/{name}")):
        return p
    return None


def _site(venv: Path) -> Path:
    return next(venv.glob("lib/python3*/site-packages"))


def venv_versions(venv: Path) -> dict:
    out = {}
    for dist in ("cuda_tile", "nvidia_cuda_tileiras", "nvidia_cuda_nvcc", "nvidia_nvvm",
                 "nvidia_cuda_nvdisasm", "nvidia_cuda_cuobjdump"):
        found = sorted(_site(venv).glob(f"{dist}-*.dist-info"))
        if found:
            out[dist.replace("_", "-")] = found[-1].name[len(dist) + 1:-len(".dist-info")]
    return out


def check_venv(venv: Path, old: bool, fix: bool = False) -> dict:
    """The versions of a toolchain venv; SetupError naming the fix when it is not usable.
    ``fix``: complete the 13.1 wheels' tree for tileiras (below)."""
    how = (f"create it with: {' && '.join(setup_commands(venv))}" if old
           else "pip install 'cuda-tile[tileiras]' into it")
    if not (venv / "bin" / "python").exists() or venv_tool(venv, "tileiras") is None:
        raise SetupError(f"no cuda-tile toolchain venv at {venv} (python + tileiras); {how}")
    v = venv_versions(venv)
    if "cuda-tile" not in v:
        raise SetupError(f"{venv} has no cuda-tile; {how}")
    # tileiras of 13.1 looks for libnvvm under nvvm/lib64 of its own tree, where the nvidia-nvvm
    # 13.1 wheel does not put it (it ships lib/libnvvm.so.4): a link makes the tree complete
    cu13 = venv_tool(venv, "tileiras").parent.parent
    link = cu13 / "nvvm" / "lib64" / "libnvvm.so"
    if fix and not link.exists() and (cu13 / "lib" / "libnvvm.so.4").exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("../../lib/libnvvm.so.4"))
    return v


def tileiras_targets(venv: Path, candidates) -> set[str]:
    """Which of ``candidates`` (sm_XX) the venv's tileiras lists as targets."""
    out = subprocess.run([str(venv_tool(venv, "tileiras")), "--help"], check=False,
                         capture_output=True, text=True).stdout
    return {t for t in candidates if f"={t} " in out or f"={t}\n" in out}


def find_tool(name: str, venvs: tuple[Path, ...] = ()) -> Path:
    """``name`` (cuobjdump, nvdisasm) from the first venv that has it, else PATH."""
    for v in (*venvs, Path(sys.prefix)):
        if (p := venv_tool(v, name)) is not None:
            return p
    if (w := shutil.which(name)) is not None:
        return Path(w)
    raise SetupError(f"no {name}: pip install nvidia-cuda-{name} into the toolchain's venv")

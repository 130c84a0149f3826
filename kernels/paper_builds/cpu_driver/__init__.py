"""A libcuda stand-in so that cuda.tile imports and compiles on a machine without a GPU driver.

``libcuda_stub.c`` answers ``cuInit``, ``cuDriverGetVersion`` (13010) and ``cuGetProcAddress_v2``;
every other entry point it hands out fails with CUDA_ERROR_NO_DEVICE, so nothing can be launched.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("libcuda_stub.c")


def build_stub(directory: Path) -> Path:
    """Compile the stub into ``directory/libcuda.so.1`` with gcc (or cc); returns the directory,
    to put first on LD_LIBRARY_PATH of the process that imports cuda.tile."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise FileNotFoundError("no C compiler (gcc/cc) to build the libcuda stub: apt-get "
                                "install gcc")
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(directory / "libcuda.so.1"),
                    str(SOURCE)], check=True, capture_output=True)
    return directory

"""Compile cuTile kernels to cubins inside one toolchain's virtualenv, without a GPU.

    # one JSON result line per job
    <venv>/bin/python -m kernels.paper_builds.compile_worker jobs.json

Run by ``kernels.paper_builds.toolchains`` with that venv's python, so each cuda-tile release
compiles with its own front end and its own tileiras. A job names a kernel (a module of ours, or a
file of kernel source), its arguments as the JIT would see them, the occupancy hint and the target:

    {"module": "kernels.device.fmha" | "/path/k.py", "function": "fmha_fwd", "occupancy": 1,
     "target": "sm_121", "out": "/tmp/x.cubin",
     "args": [["array", [8, 1, 131072, 64], "f16"], ["f32", 0.125], ["i32", 0], ["const", 64]]}

Arrays are contiguous and 16-byte aligned, the facts the JIT reads off a torch tensor. cuda-tile
1.0.x types the arguments of ``compile_tile`` from ``__cuda_array_interface__`` and takes the
target from the device (here: the job's); later releases export through ``export_kernel`` with
``kernels.build.signatures.jit_like_array``, the project's compile-only path. cuda-tile needs
libcuda at import: on a machine without a driver, ``kernels/paper_builds/cpu_driver/libcuda_stub.c``
stands in for it.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

_DTYPES = {"f16": ("<f2", 2), "f32": ("<f4", 4), "i32": ("<i4", 4)}


@dataclass(frozen=True)
class Build:
    """One kernel build: what to compile and with which arguments (``job`` gives the worker's
    JSON for one target)."""

    id: str
    source: str                  # "study" | "authors"
    causal: bool
    order: str                   # linear | sawtooth
    schedule: str                # static | tile2
    module: str                  # kernels.device.fmha, or a file of kernel source
    function: str
    occupancy: int | None
    args: tuple

    def job(self, target: str, out: Path) -> dict:
        return {"module": self.module, "function": self.function, "occupancy": self.occupancy,
                "target": target, "out": str(out), "args": [list(a) for a in self.args]}


class FakeArray:
    """A device array as ``__cuda_array_interface__`` describes it: never dereferenced."""

    def __init__(self, shape, dtype: str, ptr: int = 0x7F0000000000):
        typestr, size = _DTYPES[dtype]
        strides, acc = [], size
        for d in reversed(shape):
            strides.append(acc)
            acc *= d
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (ptr, False), "strides": tuple(reversed(strides)),
                                         "version": 3}


def _load_kernel(module: str, function: str):
    if module.endswith(".py"):
        spec = importlib.util.spec_from_file_location(Path(module).stem, module)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    else:
        mod = importlib.import_module(module)
    return getattr(mod, function)


def _version() -> tuple[int, int]:
    import cuda.tile as ct
    major, minor = ct.__version__.split(".")[:2]
    return int(major), int(minor)


def _compile_v10(job: dict, out: Path) -> None:
    """cuda-tile 1.0.x: ``compile_tile(pyfunc, args, CompilerOptions)``, target forced."""
    import cuda.tile._compile as compile_mod
    from cuda.tile._compiler_options import CompilerOptions
    compile_mod.get_sm_arch = lambda: job["target"]
    kern = _load_kernel(job["module"], job["function"])
    args = []
    for kind, *rest in job["args"]:
        if kind == "array":
            args.append(FakeArray(rest[0], rest[1]))
        elif kind == "f32":
            args.append(float(rest[0]))
        else:
            args.append(rest[0])
    lib = compile_mod.compile_tile(kern._pyfunc, tuple(args),
                                   CompilerOptions(occupancy=job["occupancy"]))
    shutil.copyfile(lib.fname_cubin, out)


def _compile_export(job: dict, out: Path) -> None:
    """cuda-tile >= 1.1: ``export_kernel`` with JIT-like constraints."""
    import cuda.tile as ct
    from cuda.tile.compilation import (
        CallingConvention,
        KernelSignature,
        ScalarConstraint,
        export_kernel,
    )

    from kernels.build.signatures import jit_like_array, needs_v2
    dts = {"f16": ct.float16, "f32": ct.float32, "i32": ct.int32}
    params = []
    for kind, *rest in job["args"]:
        if kind == "array":
            params.append(jit_like_array(tuple(rest[0]), dts[rest[1]]))
        elif kind in ("f32", "i32"):
            params.append(ScalarConstraint(dts[kind]))
        else:
            params.append(rest[0])
    kern = _load_kernel(job["module"], job["function"])
    if job["occupancy"] is not None:
        kern = kern.replace_hints(occupancy=job["occupancy"])
    cc = (CallingConvention.cutile_python_v2() if needs_v2(params)
          else CallingConvention.cutile_python_v1())
    sig = KernelSignature(params, cc).with_mangled_symbol(job["function"])
    export_kernel(kern, [sig], str(out), gpu_code=job["target"], output_format="cubin")


def run(job: dict) -> dict:
    out = Path(job["out"])
    try:
        (_compile_v10 if _version() < (1, 1) else _compile_export)(job, out)
        return {"out": str(out), "ok": True, "error": None}
    except Exception as e:  # noqa: BLE001 - reported per job, one line, the batch goes on
        first = " ".join(str(e).split())[:400] or type(e).__name__
        return {"out": str(out), "ok": False, "error": f"{type(e).__name__}: {first}"}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m kernels.paper_builds.compile_worker JOBS.json", file=sys.stderr)
        return 2
    import cuda.tile as ct
    for job in json.loads(Path(argv[0]).read_text()):
        res = run(job)
        res["cuda_tile"] = ct.__version__
        print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

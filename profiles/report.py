"""Reading ``.ncu-rep`` reports with NVIDIA's own reader (``ncu_report``), CSV export as fallback.

``ncu_report`` is the Python report interface that ships with Nsight Compute
(``<install>/extras/python/ncu_report.py``) and as the ``ncu-report`` pip package. It reads the
binary report directly: metric values keep their type (integer sector counts stay integers), the
NVTX range of each kernel comes from ``IAction.nvtx_state()`` instead of a quoted CSV cell, and no
``ncu --import --csv`` subprocess runs. Where the module cannot be imported, the report is
exported with ``ncu --import R --csv --page raw`` and read by ``profiles.ingest.parse_raw_csv``;
both paths return the same :class:`~profiles.ingest.KernelResult` list (the fixture tests check
that they agree on one report).

Walk of a report (PRI): context → ranges (``num_ranges``/``range_by_idx``) → actions (one per
profiled kernel, ``num_actions``/``action_by_idx``) → ``metric_by_name(name)`` (``None`` when the
report lacks it) → ``value()``/``unit()``; ``nvtx_state()`` → domains → push/pop range stack,
outermost first (``push_pop_range(i)`` indexes the call stack).
"""
from __future__ import annotations

import importlib
import math
import os
import shutil
import sys
from pathlib import Path

from .ingest import IngestError, KernelResult, parse_raw_csv

MODULE = "ncu_report"


def extras_dirs(ncu_path: str | None) -> list[Path]:
    """Where an Nsight Compute install keeps ``ncu_report``, given the ``ncu`` executable: the
    install dir is the resolved executable's folder, or for the CUDA toolkit's ``bin/ncu`` wrapper
    a ``nsight-compute*`` folder beside ``bin``, or the standalone installs under
    /opt/nvidia/nsight-compute (where the lent H100's ``/usr/local/cuda/bin/ncu`` wrapper points:
    its realpath alone does not lead there)."""
    if not ncu_path:
        return []
    real = Path(os.path.realpath(ncu_path))
    dirs = [real.parent / "extras" / "python"]
    dirs += sorted(real.parent.parent.glob("nsight-compute*/extras/python"), reverse=True)
    dirs += sorted(Path("/opt/nvidia/nsight-compute").glob("*/extras/python"), reverse=True)
    return [d for d in dict.fromkeys(dirs) if (d / f"{MODULE}.py").is_file()]


def load_module(ncu_path: str | None = None, extras: bool = True):
    """``ncu_report`` if importable, else (``extras``) from the Nsight Compute install of
    ``ncu_path`` (or the ``ncu`` on PATH); None when neither has it."""
    try:
        return importlib.import_module(MODULE)
    except ImportError:
        pass
    if not extras:
        return None
    for d in extras_dirs(ncu_path or shutil.which("ncu")):
        sys.path.insert(0, str(d))
        try:
            return importlib.import_module(MODULE)
        except ImportError:
            sys.path.remove(str(d))
    return None


def _innermost(action) -> str | None:
    """The innermost push/pop range over the action's NVTX domains (the first domain that has a
    range stack; the profiling target pushes one range, in the default domain)."""
    state = action.nvtx_state()
    if state is None:
        return None
    for dom_id in state.domains():
        dom = state.domain_by_id(dom_id)
        depth = len(dom.push_pop_ranges())
        if depth:
            return dom.push_pop_range(depth - 1).name()
    return None


def _value(metric) -> float:
    v = metric.value()
    if v is None:
        return math.nan
    if isinstance(v, str):
        raise IngestError(f"metric {metric.name()} holds {v!r}, not a number")
    return float(v)


def read_report(path: Path, metrics: tuple[str, ...], module=None) -> list[KernelResult]:
    """Kernels of an ``.ncu-rep`` in report order with the values of ``metrics``, read with
    ``ncu_report`` (``module``: the imported module, found with :func:`load_module` if None)."""
    mod = module or load_module()
    if mod is None:
        raise IngestError("the ncu_report module is not importable: pip install ncu-report, or "
                          "put <Nsight Compute>/extras/python on PYTHONPATH")
    if not Path(path).is_file():
        raise IngestError(f"no report at {path}")
    ctx = mod.load_report(str(path))
    out = []
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            values = {}
            for name in metrics:
                m = action.metric_by_name(name)
                if m is None:
                    raise IngestError(f"report {Path(path).name} lacks metric {name}: was it "
                                      "collected with this metric group?")
                values[name] = (_value(m), m.unit())
            out.append(KernelResult(len(out), action.name(), _innermost(action), values))
    return out


def read_isolated(path: Path, metrics: tuple[str, ...], extras: Path,
                  timeout: int = 600) -> list[KernelResult] | None:
    """Read a report with the ``ncu_report`` of an Nsight Compute install in a fresh interpreter
    (``python -m profiles.report``), None if that interpreter fails. In-process it is not safe:
    on the lent H100/H200 (ncu 2025.3.1, Python 3.12) the install's module, imported into a
    process that then imports torch (or already holds the libraries a measured run loads),
    ended the process with SIGSEGV."""
    import json
    import subprocess
    r = subprocess.run([sys.executable, "-m", "profiles.report", str(path), str(extras),
                        *metrics], capture_output=True, text=True, timeout=timeout,
                       cwd=Path(__file__).resolve().parents[1])
    if r.returncode != 0:
        return None
    return [KernelResult(i, name, rng, {m: (v, u) for m, (v, u) in values.items()})
            for i, name, rng, values in json.loads(r.stdout)]


def read_kernels(path: Path, metrics: tuple[str, ...], *, export_csv=None,
                 ncu_path: str | None = None) -> tuple[list[KernelResult], str]:
    """Kernels of a report and the reader used: ``ncu_report`` when the module is importable
    here (the pip package), ``ncu_report (subprocess)`` with an Nsight Compute install's module
    (:func:`read_isolated`), else ``csv``: ``export_csv`` is a callable returning the raw-page
    CSV text of the report (``ncu.export_raw_csv``)."""
    mod = load_module(ncu_path, extras=False)
    if mod is not None:
        return read_report(path, metrics, mod), "ncu_report"
    for d in extras_dirs(ncu_path or shutil.which("ncu")):
        got = read_isolated(Path(path), metrics, d)
        if got is not None:
            return got, "ncu_report (subprocess)"
    if export_csv is None:
        raise IngestError("the ncu_report module is not importable and no CSV export was "
                          "offered: pip install ncu-report")
    return parse_raw_csv(export_csv(path), metrics), "csv"


def main(argv: list[str] | None = None) -> int:
    """``python -m profiles.report REPORT EXTRAS_DIR METRIC...``: the kernels as JSON on stdout
    (the isolated reader of :func:`read_isolated`)."""
    import json
    path, extras, *metrics = sys.argv[1:] if argv is None else argv
    sys.path.insert(0, extras)
    kernels = read_report(Path(path), tuple(metrics), importlib.import_module(MODULE))
    json.dump([[k.index, k.kernel, k.nvtx_range, k.values] for k in kernels], sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

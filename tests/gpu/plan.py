"""The GPU suite's shard plan: which tests each of N pytest processes runs (pure; no GPU, no torch).

The unit of work is a test function with all its parameter cases (its module's fixtures and its
builds stay in one process; a module of ``WHOLE_MODULES`` is one unit), cut into chunks of cases
where one function alone would cost more than half a shard's fair share. Units go largest first to
the least-loaded shard (ties: the lower shard), so the plan is deterministic for the same test ids
and costs. The tests of ``ALONE`` (timing instruments) form one last shard that runs after the
others, alone. A unit's cost is the sum of its cases' costs: the measured seconds of ``costs``
where known (per test id from a previous run's ``durations.json``, or per case of a function from
the compact ``function-costs.json`` it also writes, committed as ``costs.json`` beside this
module), else the function's estimate in ``FUNCTION_COST``, else the module's in ``MODULE_COST``,
else ``DEFAULT_COST``. Every shard also pays ``SHARD_OVERHEAD`` (start-up, imports, collection).
tests/cpu/repository/test_gpu_runner.py tests this module.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_COST = 1.0
SHARD_OVERHEAD = 20.0
MODULE_COST = {          # seconds per case after the warm step, where costs.json has none
    "tests/gpu/test_cutile.py": 0.4,
    "tests/gpu/test_cutile_tactics.py": 1.0,
    "tests/gpu/test_cuda_baseline.py": 0.03,
    "tests/gpu/test_backward_cutile.py": 2.0,
    "tests/gpu/test_backward_cuda.py": 2.5,
    "tests/gpu/test_backward_trace.py": 0.8,
    "tests/gpu/test_attention_op.py": 2.0,
    "tests/gpu/test_drift.py": 10.0,
    "tests/gpu/test_latency.py": 10.0,
    "tests/gpu/test_kill_resume.py": 60.0,
    "tests/cpu/kernels/test_backward_wiring.py": 1.0,
}
WHOLE_MODULES = {       # kept in one unit: CuPy caches their instantiations per module set
    "tests/gpu/test_cuda_baseline.py",       # (tests/gpu/conftest.py ``compile_builds``)
}
ALONE = {               # timing instruments: nothing else may run on the GPU beside them
    "tests/gpu/test_latency.py",
    "tests/gpu/test_drift.py",
}
FUNCTION_COST = {        # the long single cases: training loops, compiled graphs
    "test_copy_task_trains_to_sdpa_loss": 25.0,
    "test_copy_task_detached_control_fails": 15.0,
    "test_detached_control_fails_the_copy_task": 15.0,
    "test_one_step_parameter_gradients_equal_sdpa": 10.0,
    "test_one_step_parameter_grads_match_sdpa": 10.0,
    "test_opcheck": 10.0,
}


def split_id(nodeid: str) -> tuple[str, str]:
    """(file, function) of a pytest node id ``file::function[case]``."""
    parts = nodeid.split("::")
    return parts[0], parts[-1].split("[")[0] if len(parts) > 1 else ""


def cost_of(nodeid: str, costs: dict[str, float]) -> float:
    if nodeid in costs:
        return float(costs[nodeid])
    path, func = split_id(nodeid)
    if f"{path}::{func}" in costs:          # a function's measured mean per case
        return float(costs[f"{path}::{func}"])
    return FUNCTION_COST.get(func, MODULE_COST.get(path, DEFAULT_COST))


@dataclass(frozen=True)
class Unit:
    """Test cases of one function that run in one process: ``args`` is what pytest is given
    (``file::function`` when the unit is the whole function, else the case ids)."""
    path: str
    function: str
    nodeids: tuple[str, ...]
    cost: float
    whole: bool

    @property
    def args(self) -> list[str]:
        if not self.whole:
            return list(self.nodeids)
        return [f"{self.path}::{self.function}"] if self.function else [self.path]


@dataclass
class Shard:
    """The tests one pytest process runs; an ``alone`` shard runs after the others, by itself
    on the GPU (``ALONE``)."""
    index: int
    units: list[Unit] = field(default_factory=list)
    alone: bool = False

    @property
    def cost(self) -> float:
        return SHARD_OVERHEAD + sum(u.cost for u in self.units)

    @property
    def nodeids(self) -> list[str]:
        return [n for u in self.units for n in u.nodeids]

    @property
    def args(self) -> list[str]:
        return [a for u in self.units for a in u.args]


def units(nodeids: list[str], costs: dict[str, float], n_shards: int) -> list[Unit]:
    """The functions of ``nodeids`` (in their order), each cut into chunks of consecutive cases
    costing at most half of a shard's fair share (a whole function when it fits)."""
    by_func: dict[tuple[str, str], list[str]] = {}
    for n in dict.fromkeys(nodeids):
        path, func = split_id(n)
        by_func.setdefault((path, "" if path in WHOLE_MODULES else func), []).append(n)
    total = sum(cost_of(n, costs) for n in dict.fromkeys(nodeids))
    cap = max(total / n_shards / 2, 1e-9) if n_shards > 1 else float("inf")
    out = []
    for (path, func), ids in by_func.items():
        c = [cost_of(n, costs) for n in ids]
        if sum(c) <= cap or len(ids) == 1 or not func:
            out.append(Unit(path, func, tuple(ids), sum(c), True))
            continue
        chunk, acc = [], 0.0
        for n, x in zip(ids, c):
            if chunk and acc + x > cap:
                out.append(Unit(path, func, tuple(chunk), acc, False))
                chunk, acc = [], 0.0
            chunk.append(n)
            acc += x
        out.append(Unit(path, func, tuple(chunk), acc, False))
    return out


def plan(nodeids: list[str], costs: dict[str, float] | None, n_shards: int) -> list[Shard]:
    """``n_shards`` shards (fewer when there are fewer units; none without tests) holding every
    node id once, balanced by cost (module docstring)."""
    if n_shards < 1:
        raise ValueError(f"n_shards {n_shards}: at least 1")
    alone = [n for n in nodeids if split_id(n)[0] in ALONE]
    us = units([n for n in nodeids if split_id(n)[0] not in ALONE], costs or {}, n_shards)
    shards = [Shard(i) for i in range(min(n_shards, len(us)))]
    for u in sorted(us, key=lambda u: (-u.cost, u.path, u.function, u.nodeids)):
        min(shards, key=lambda s: (s.cost, s.index)).units.append(u)
    shards = [s for s in shards if s.units]
    if alone:
        shards.append(Shard(len(shards), units(alone, costs or {}, 1), alone=True))
    return shards


def function_costs(durations: dict[str, float]) -> dict[str, dict[str, float]]:
    """{file: {function: mean seconds per case}} of a ``durations.json``: the compact table
    committed as ``costs.json`` (a few kB where the per-test one is 120)."""
    sums: dict[tuple[str, str], list[float]] = {}
    for nodeid, sec in durations.items():
        sums.setdefault(split_id(nodeid), []).append(float(sec))
    out: dict[str, dict[str, float]] = {}
    for (path, func), v in sorted(sums.items()):
        out.setdefault(path, {})[func] = round(sum(v) / len(v), 2)
    return out


def load_costs(path: Path) -> dict[str, float]:
    """A ``durations.json`` ({node id: seconds}) or a ``function_costs`` table ({file::function:
    seconds per case}); empty when the file is absent."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    flat = {}
    for k, v in data.items():
        if isinstance(v, dict):                 # a function_costs table: file -> function
            flat.update({f"{k}::{f}": float(s) for f, s in v.items()})
        else:
            flat[str(k)] = float(v)
    return flat


def junit_results(xml_text: str) -> dict[str, tuple[str, float]]:
    """{node id: (outcome, seconds)} of a pytest ``--junitxml`` report; outcome is passed,
    failed, error or skipped."""
    import xml.etree.ElementTree as ET
    root = ET.fromstring(xml_text)
    out = {}
    for tc in root.iter("testcase"):
        cls, name = tc.get("classname", ""), tc.get("name", "")
        parts = cls.split(".")
        # classname is the dotted module path (plus a class); rebuild the file path
        path, rest = _module_path(parts)
        nodeid = "::".join([path, *rest, name])
        outcome = "passed"
        for child in tc:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                break
        out[nodeid] = (outcome, float(tc.get("time", 0) or 0))
    return out


def _module_path(parts: list[str]) -> tuple[str, list[str]]:
    """The file of a junit classname's parts (a dotted module path, perhaps with a class
    after it)."""
    for i in range(len(parts), 0, -1):
        if parts[i - 1].startswith("test_") or parts[i - 1] == "conftest":
            return "/".join(parts[:i]) + ".py", parts[i:]
    return "/".join(parts) + ".py", []

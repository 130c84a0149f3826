"""The program ncu profiles: ``python -m experiments.measurement.target PLAN.json``, for every study
and for the variance experiments alike (one profiling target).

It prepares every case of the plan and launches each once outside any NVTX range (JIT compilation
and first-touch stay out of the profile), then launches each case inside the NVTX range named by
its case id, ``plan["launches"]`` times (default 1), round-robin: round ``l`` launches every case
once, in plan order, so a slow drift of the GPU over the session spreads over all cases alike
instead of biasing the ones launched last. ncu is told to profile only those ranges, so the report
holds ``launches`` kernels per case, round by round. A backward case (a variant ending in
``.dkdv`` or ``.dq``) launches that one kernel in its range; its inputs, the training forward
and the dQ pass that makes Δ run before, outside every range (``experiments.measurement.backward``).

Optional plan keys, for the controlled experiments of ``explorations.variance`` (all off by
default): ``reverse`` launches the cases in reverse plan order (does the launch order matter?);
``flush_bytes`` writes a buffer of that size before every launch, outside the range (our own L2
flush, to compare with ncu's ``--cache-control all``); ``trace_dir`` launches the family's trace
build instead and saves, per launch, each CTA's SM, start and end and sampled step stamps there
(``save_trace``; CTA placement and drift against the miss count); ``trace_every`` (CUDA only,
default 1) makes that build stamp every k-th step, not every step.
"""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

from analysis.launch import placement as placement_mod
from spec.case import case_from_dict
from spec.problem import TileGrid

from .correctness import poisoned_like, random_inputs
from .families import family


class TraceError(ValueError):
    """A trace launch cannot be saved (the family's trace build records no SM ids)."""


def save_trace(tr: dict, case, path: Path) -> None:
    """One launch's trace, compact (``analysis.launch.placement.compact``: per CTA its SM, start and
    end, and the start of 64 sampled steps plus the first step of the second work item)."""
    import numpy as np
    if tr.get("smid") is None:
        raise TraceError(f"{case.id}: this family's trace build records no SM ids")
    n_kv = TileGrid(case.problem, case.variant.tiles).n_kv
    lt = placement_mod.compact(tr["time_ns"], tr["smid"], tr["start_ns"], tr["end_ns"],
                               keep_steps=[n_kv], every=tr["every"])
    np.savez(path, **placement_mod.to_arrays([lt]))


def main(argv: list[str] | None = None) -> int:
    import torch
    argv = sys.argv[1:] if argv is None else argv
    plan = json.loads(Path(argv[0]).read_text())
    cases = [case_from_dict(d) for d in plan["cases"]]
    trace_dir = plan.get("trace_dir")
    every = int(plan.get("trace_every", 1))
    families, launches, inputs = {}, [], {}
    for case in cases:
        if case.variant.bwd is not None:    # one backward kernel (experiments.measurement.backward)
            if trace_dir:
                raise TraceError(f"{case.id}: the backward kernels have no trace build")
            from .backward import pass_launcher, setup
            key = ("backward", case.problem)
            if key not in inputs:           # inputs, the training forward and Δ: outside ranges
                inputs[key] = setup(case.problem, plan.get("seed", 0))
            fn = pass_launcher(case, inputs[key])
            fn()                                                                 # warm-up
            launches.append((case, fn))
            continue
        fam = families.get(case.variant.backend) or families.setdefault(
            case.variant.backend, family(case.variant.backend, plan.get("arch")))
        if case.problem not in inputs:
            q, k, v = random_inputs(case.problem, plan.get("seed", 0))
            inputs[case.problem] = (q, k, v, poisoned_like(q))
        prepared = fam.prepare(case.variant, case.problem)
        launch_one = functools.partial(fam.trace, every=every) if trace_dir else fam.run
        launch_one(prepared, *inputs[case.problem])                              # warm-up
        launches.append((case, functools.partial(launch_one, prepared, *inputs[case.problem])))
    flush_bytes = int(plan.get("flush_bytes") or 0)
    flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda") if flush_bytes else None
    order = launches[::-1] if plan.get("reverse") else launches
    torch.cuda.synchronize()
    for launch in range(int(plan.get("launches", 1))):
        for case, launch_one in order:
            if flush is not None:
                flush.fill_(launch + 1)
                torch.cuda.synchronize()
            torch.cuda.nvtx.range_push(case.id)
            tr = launch_one()
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
            if trace_dir:
                save_trace(tr, case, Path(trace_dir) / f"c{cases.index(case)}-l{launch}.npz")
    return 0


if __name__ == "__main__":
    sys.exit(main())

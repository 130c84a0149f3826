"""The program ncu profiles: ``python -m experiments.target PLAN.json``.

It prepares every case of the plan and launches each once outside any NVTX range (JIT compilation
and first-touch stay out of the profile), then launches each case inside the NVTX range named by
its case id, ``plan["launches"]`` times (default 1), round-robin: round ``l`` launches every case
once, in plan order, so a slow drift of the GPU over the session spreads over all cases alike
instead of biasing the ones launched last. ncu is told to profile only those ranges, so the report
holds ``launches`` kernels per case, round by round.
"""
from __future__ import annotations

import json
import sys

from spec.case import case_from_dict

from .correctness import poisoned_like, random_inputs
from .families import family


def main(argv: list[str] | None = None) -> int:
    import torch
    argv = sys.argv[1:] if argv is None else argv
    plan = json.loads(open(argv[0]).read())
    cases = [case_from_dict(d) for d in plan["cases"]]
    families, launches, inputs = {}, [], {}
    for case in cases:
        fam = families.get(case.variant.backend) or families.setdefault(
            case.variant.backend, family(case.variant.backend, plan.get("arch")))
        if case.problem not in inputs:
            q, k, v = random_inputs(case.problem, plan.get("seed", 0))
            inputs[case.problem] = (q, k, v, poisoned_like(q))
        q, k, v, out = inputs[case.problem]
        prepared = fam.prepare(case.variant, case.problem)
        fam.run(prepared, q, k, v, out)                     # warm-up: compile outside the range
        launches.append((case, fam, prepared))
    torch.cuda.synchronize()
    for _ in range(int(plan.get("launches", 1))):
        for case, fam, prepared in launches:
            q, k, v, out = inputs[case.problem]
            torch.cuda.nvtx.range_push(case.id)
            fam.run(prepared, q, k, v, out)
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where the one-pass backward's causal build loses time: one problem's one-pass dK/dV(+dQ)
launch, to run under ncu (``--launch-skip 1`` skips the warm-up launch).

    ncu --clock-control none -k regex:bwd_dkdv --launch-skip 1 --launch-count 1 \\
        --section SpeedOfLight --section WarpStateStats --csv \\
        python -m explorations.onepass_stalls b2h16s4096d128.bf16.causal

The problem label is ``spec.Problem.label``'s form (bNhN[gN]sN[kvN]dN.dtype.causal|full)."""
from __future__ import annotations

import re
import sys


def main(argv=None) -> int:
    import torch

    from experiments.measurement.correctness import random_inputs
    from kernels.host import backend, backward
    from spec import Problem, get_arch
    label = (argv or sys.argv[1:])[0]
    B, H, g, S, D, dt, mask = re.fullmatch(r"b(\d+)h(\d+)(?:g(\d+))?s(\d+)d(\d+)\.(\w+)\.(\w+)",
                                           label).groups()
    pr = Problem(int(B), int(H), int(S), int(D), H_kv=int(g or H), dtype=dt,
                 causal=mask == "causal")
    q, k, v = random_inputs(pr, 0)
    dout = torch.randn_like(q)
    lse = backward.stat_buffer(q)
    out = backend.attention(q, k, v, causal=pr.causal, lse=lse)
    cfg = backend.default_variant(pr, get_arch("h100"), training=True,
                                  backward_one_pass=True).backward
    launch = backward.launch_for(pr, cfg, device_index=torch.cuda.current_device())
    bufs = (backward.stat_buffer(q), torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))
    for _ in range(2):
        launch(dout, q, k, v, out, lse, *bufs)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m explorations.peer_kernels``: the GPU kernels SDPA's cuDNN and flash backends launch
on the shapes where the cuTile default is furthest behind cuDNN, and their times.

cuDNN's kernel names carry its tile choice (e.g. ``..._knob_7_64x128x128_...``) and whether it
runs persistent; torch's profiler records the names. One line per (shape, backend, kernel):
calls, mean device time. Nothing is committed from it but the printed table.
"""
from __future__ import annotations

import argparse

SHAPES = ((32, 16, 512, 128), (16, 16, 512, 128), (32, 16, 1024, 128), (32, 16, 512, 64))
"""(B, H, S, D) of the shapes, fp16."""


def main(argv: list[str] | None = None) -> int:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile

    from experiments.measurement.correctness import random_inputs
    from spec import Problem

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True)
    args = ap.parse_args(argv)
    for b, h, s, d in SHAPES:
        problem = Problem(b, h, s, d, causal=args.causal)
        q, k, v = random_inputs(problem, 0)
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                              ("flash", SDPBackend.FLASH_ATTENTION)):
            with sdpa_kernel([backend]):
                for _ in range(3):
                    torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        torch.nn.functional.scaled_dot_product_attention(
                            q, k, v, is_causal=args.causal)
                    torch.cuda.synchronize()
            for ev in prof.key_averages():
                if ev.device_type.name == "CUDA" and ev.count:
                    us = ev.device_time_total / ev.count
                    print(f"{problem.label} {name}: {ev.count} x {us:8.1f} us  {ev.key[:160]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

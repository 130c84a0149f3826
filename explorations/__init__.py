"""One-off kernel experiments with measured negative results (README.md), kept runnable.

They sit on top of the stack, beside ``experiments/``: each script compiles its own variant of the
cuTile kernel body and measures it through ``explorations.harness``, which uses the project's
correctness gate and timing protocol (``experiments.measurement.correctness``,
``experiments.measurement.timing``). Nothing in the kernel families imports them.
"""

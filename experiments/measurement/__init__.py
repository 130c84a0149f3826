"""Measure mode on the GPU: the correctness gate (``correctness``), CUDA-event timing beside the
SDPA peers (``timing``), the kernel families by name (``families``), the measured sweep and its
ncu counters (``measure``) and the process ncu profiles (``target``).
"""

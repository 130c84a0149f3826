"""Simulate mode on the CPU: a study's cases through the spec traces and the L2 simulators of
``analysis.cache`` (``simulate``).
"""

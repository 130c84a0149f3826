"""Instruments beside the studies: the pointer-chase latency of an L2 hit and miss (``latency``),
the L2 partition each SM sits on (``smmap``), the DRAM streamer that sets the bandwidth a miss
costs (``streamer``).
"""

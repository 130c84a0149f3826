"""Studies: plan, run and record them (``python -m experiments.run``, ``experiments/run.py``).

By job, bottom first (each subpackage imports only those before it;
``tests/cpu/repository/test_layering.py``):

- ``registry``: the studies as plain data, their plans, problem suites and sequence lengths;
- ``rundirs``: run directories, reserved, written atomically, published when complete, and the
  journal that keeps a measured run's finished pieces;
- ``measurement``: measure mode on the GPU (correctness gate, timing beside SDPA, ncu);
- ``simulation``: simulate mode on the CPU (the L2 simulators of ``analysis.cache``);
- ``instruments``: pointer-chase latency, the SM-to-partition map, the DRAM streamer;
- ``speed``: the studies of speed as a user sees it (eager call time, shape and model suites);
- ``sharding``: a measured study over several GPUs or Slurm jobs;
- ``runner``: the command line, the two modes, the dry run and its cost model, progress, report;
- ``tuning``: the default configurations of ``attention()``: tuner, sweep, rule fit.
"""

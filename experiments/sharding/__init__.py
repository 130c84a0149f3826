"""A measured study sharded over GPUs or Slurm jobs and merged into one run (``shard``: the command
line, the plan, the sharded measure mode; ``shard_jobs``: the jobs, executors and merge).
"""

"""The studies of speed as a user sees it: eager call time and host time per call (``eager``),
the shape and model suites' summaries (``shapes``), the training benchmarks (``backward_bench``:
the CUDA twin; ``cutile_backward_bench`` with its rows and summaries ``cutile_backward_rows``:
the cuTile family).
"""

"""F9b: cuTile non-causal throughput per schedule, with SDPA peers (``timing_panels``)."""
from .timing_panels import cutile_module

FIGURE, STUDIES = "F9b", ("sawtooth",)
ROWS, load, plot, main = cutile_module(__name__, FIGURE, causal=False)

if __name__ == "__main__":
    raise SystemExit(main())

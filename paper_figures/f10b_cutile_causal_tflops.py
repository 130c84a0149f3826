"""F10b: cuTile causal throughput per schedule, with SDPA peers (``timing_panels``)."""
from .timing_panels import cutile_module

FIGURE, STUDIES = "F10b", ("sawtooth",)
ROWS, load, plot, main = cutile_module(__name__, FIGURE, causal=True)

if __name__ == "__main__":
    raise SystemExit(main())

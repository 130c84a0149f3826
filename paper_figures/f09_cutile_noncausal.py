"""F9a: cuTile non-causal L2 misses per schedule, linear vs sawtooth (``cutile_panels``)."""
from .cutile_panels import misses_module

FIGURE, STUDIES = "F9a", ("sawtooth",)
ROWS, load, plot, main = misses_module(__name__, FIGURE, causal=False)

if __name__ == "__main__":
    raise SystemExit(main())

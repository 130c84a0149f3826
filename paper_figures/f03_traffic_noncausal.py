"""F3: L2 sector accesses vs S, non-causal, against the traffic models (``traffic_panels``)."""
from .traffic_panels import mode_module

FIGURE, STUDIES = "F3", ("traffic",)
ROWS, load, plot, main = mode_module(__name__, FIGURE, causal=False)

if __name__ == "__main__":
    raise SystemExit(main())

"""F4: L2 sector accesses vs S, causal, against the traffic models (``traffic_panels``)."""
from .traffic_panels import mode_module

FIGURE, STUDIES = "F4", ("traffic",)
ROWS, load, plot, main = mode_module(__name__, FIGURE, causal=True)

if __name__ == "__main__":
    raise SystemExit(main())

"""F2: L1/L2 counters vs persistent CTAs (CUDA), the l1l2 study's long S (``l1l2_panels``)."""
from .l1l2_panels import sweep_module

FIGURE, STUDIES = "F2", ("l1l2",)
ROWS, load, plot, main = sweep_module(__name__, FIGURE, "long")

if __name__ == "__main__":
    raise SystemExit(main())

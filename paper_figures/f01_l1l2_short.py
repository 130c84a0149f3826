"""F1: L1/L2 counters vs persistent CTA count at the short sequence length of the l1l2 study (CUDA):
all and L1TEX-sourced L2 sectors and L1 sectors (left axis), L1 hits (right axis, log)."""
import sys

from .l1l2_panels import load_sweep, plot_sweep

FIGURE = "F1"
STUDIES: tuple[str, ...] = ("l1l2",)


def load(rows):
    return load_sweep(rows, "short")


def plot(data, arch=None):
    return plot_sweep(data, FIGURE, arch)


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

"""F3: L2 sector accesses (lts__t_sectors.sum, ..._srcunit_tex.sum) vs S, non-causal, log-log, with the
exact traffic model and the paper's closed form (below: their error in percent)."""
import sys

from .traffic_panels import load_mode, plot_mode

FIGURE = "F3"
STUDIES: tuple[str, ...] = ("traffic",)


def load(rows):
    return load_mode(rows, causal=False)


def plot(data, arch=None):
    return plot_mode(data, FIGURE, arch)


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

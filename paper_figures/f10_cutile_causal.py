"""F10a: cuTile causal L2 misses, Static and Tile-based, linear vs sawtooth."""
from .cutile_panels import load_misses, plot_misses

FIGURE = "F10a"


def load(rows):
    return load_misses(rows, causal=True)


def plot(data, arch=None):
    return plot_misses(data, FIGURE, True, arch)


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    main()

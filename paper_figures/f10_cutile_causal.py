"""F10a: cuTile causal L2 misses, Static and Tile-based, linear vs sawtooth.

One run of the sawtooth study only (``python -m experiments.run sawtooth --arch <arch>``):
with several loaded (a run and its repeats ``<run>-r2``, ``-r3``) it draws the
original (``data.one_run``) and the title says so; ``repeats`` shows every run."""
import sys

from .cutile_panels import load_misses, plot_misses

FIGURE = "F10a"
STUDIES: tuple[str, ...] = ("sawtooth",)


def load(rows):
    return load_misses(rows, causal=True)


def plot(data, arch=None):
    return plot_misses(data, FIGURE, True, arch)


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

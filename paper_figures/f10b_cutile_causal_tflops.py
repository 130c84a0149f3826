"""F10b: cuTile causal throughput per schedule (Static, Tile-based), linear vs sawtooth, with the
SDPA flash and cuDNN peers of the same problem as horizontal reference lines (sawtooth study).

One run of the sawtooth study only (``python -m experiments.run sawtooth --arch <arch>``):
with several loaded (a run and its repeats ``<run>-r2``, ``-r3``) it draws the
original (``data.one_run``) and the title says so; ``repeats`` shows every run."""
import sys

from .timing_panels import load_cutile, plot_cutile

FIGURE = "F10b"
STUDIES: tuple[str, ...] = ("sawtooth",)


def load(rows):
    return load_cutile(rows, causal=True)


def plot(data, arch=None):
    return plot_cutile(data, FIGURE, True, arch)


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

"""F9b: cuTile non-causal throughput per schedule (Static, Tile-based), linear vs sawtooth, with the
SDPA flash and cuDNN peers of the same problem as horizontal reference lines (sawtooth study).

One run of the sawtooth study only (``python -m experiments.run sawtooth --arch <arch>``):
with several loaded (a run and its repeats ``<run>-r2``, ``-r3``) it draws the
original (``data.one_run``) and the title says so; ``repeats`` shows every run."""
import sys

from .timing_panels import load_cutile, plot_cutile

FIGURE = "F9b"
STUDIES: tuple[str, ...] = ("sawtooth",)


def load(rows):
    return load_cutile(rows, causal=False)


def plot(data, arch=None):
    return plot_cutile(data, FIGURE, False, arch)


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

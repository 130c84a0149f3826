"""F8b: CUDA split-Q throughput (TFLOP/s) vs batch size, linear vs sawtooth, with SDPA peers per batch
(sawtooth study; bars: median of the timed samples, error bars: their min..max).

One run of the sawtooth study only (``python -m experiments.run sawtooth --arch <arch>``):
with several loaded (a run and its repeats ``<run>-r2``, ``-r3``) it draws the
original (``data.one_run``) and the title says so; ``repeats`` shows every run."""
import sys

from .timing_panels import load_cuda_batch, plot_cuda_batch

FIGURE = "F8b"
STUDIES: tuple[str, ...] = ("sawtooth",)


def load(rows):
    return load_cuda_batch(rows, "tflops")


def plot(data, arch=None):
    return plot_cuda_batch(data, FIGURE, "tflops", arch)


def main(argv=None):
    from .cli import figure_main
    return figure_main(__name__, argv)


if __name__ == "__main__":
    sys.exit(main())

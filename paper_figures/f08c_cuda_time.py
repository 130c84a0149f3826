"""F8c: CUDA kernel time vs batch size, linear vs sawtooth, SDPA peers (``timing_panels``)."""
from .timing_panels import cuda_batch_module

FIGURE, STUDIES = "F8c", ("sawtooth",)
ROWS, load, plot, main = cuda_batch_module(__name__, FIGURE, "ms")

if __name__ == "__main__":
    raise SystemExit(main())

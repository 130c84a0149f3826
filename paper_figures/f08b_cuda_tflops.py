"""F8b: CUDA throughput vs batch size, linear vs sawtooth, SDPA peers (``timing_panels``)."""
from .timing_panels import cuda_batch_module

FIGURE, STUDIES = "F8b", ("sawtooth",)
ROWS, load, plot, main = cuda_batch_module(__name__, FIGURE, "tflops")

if __name__ == "__main__":
    raise SystemExit(main())

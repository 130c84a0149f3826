"""CUDA host path: CudaFamily, the eager launches, training launches, attention() and its
operators."""

"""CUDA build tools: instantiation names and NVRTC/nvcc options; the C++ is in ../device/."""

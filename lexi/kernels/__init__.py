"""Compute kernels: Triton on CUDA, each beside the PyTorch reference that is also the CPU path."""

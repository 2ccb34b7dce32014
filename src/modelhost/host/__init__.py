"""The host: devices, GPU memory, process memory, the CUDA runtime."""

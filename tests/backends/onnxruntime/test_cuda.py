"""backends/onnxruntime/cuda.py: --cuda-memory-pool-byte-size as ONNX Runtime's CUDA provider option."""

from __future__ import annotations

from modelhost.backends.onnxruntime.cuda import cuda_provider_options
from modelhost.host.gpu_memory import GpuMemory


def test_cuda_pool_becomes_gpu_mem_limit_for_that_gpu_only() -> None:
    memory = GpuMemory(cuda_pool_bytes={0: 1000, 1: 0})
    assert cuda_provider_options(memory, 0) == {"gpu_mem_limit": "1000"}
    # 0 is tritonserver's "no pool": no limit, not a limit of 0 bytes that would fail every allocation.
    assert cuda_provider_options(memory, 1) == {}
    assert cuda_provider_options(memory, 2) == {}
    # Not given: ONNX Runtime's default, not Triton's 64 MB pool default.
    assert cuda_provider_options(GpuMemory(), 0) == {}

"""--cuda-memory-pool-byte-size as ONNX Runtime's CUDA execution provider takes it (host/gpu_memory.py says how
tritonserver's memory flags map onto what modelhost can limit)."""

from __future__ import annotations

from modelhost.host.gpu_memory import GpuMemory


def cuda_provider_options(memory: GpuMemory, device_id: int) -> dict[str, str]:
    """CUDA execution provider options for an instance on `device_id`."""
    size = memory.cuda_pool_bytes.get(device_id, 0)
    # Not given, or 0 (tritonserver: no pool on that GPU): ONNX Runtime's own default, no limit. Triton's default
    # pool of 64 MB must not become a 64 MB cap on everything ONNX Runtime allocates.
    return {"gpu_mem_limit": str(size)} if size > 0 else {}

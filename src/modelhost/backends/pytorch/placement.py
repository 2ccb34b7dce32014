"""Where an instance's model and inputs live, by instance group kind (as Triton's PyTorch backend places them).

- KIND_CPU: model and inputs on the CPU.
- KIND_GPU: model and inputs on cuda:<device_id>; refused at load where torch has no CUDA or not that GPU.
- KIND_MODEL: inputs on the CPU, the model where its file put its tensors (torch.jit.load without map_location):
  a model that places itself, on one or several GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from modelhost.backends.params import group_kind
from modelhost.errors import ModelConfigError


@dataclass(frozen=True, slots=True)
class Placement:
    kind: str  # KIND_CPU, KIND_GPU, KIND_MODEL
    inputs: torch.device  # where input tensors are made
    map_location: torch.device | None  # where the model's tensors are loaded (None: where the file says)
    uses_cuda: bool  # whether CUDA settings (DISABLE_CUDNN, ENABLE_CACHE_CLEANING) can matter

    @property
    def gpu(self) -> int | None:
        return self.inputs.index if self.inputs.type == "cuda" else None


def cuda_device(model: str, device_id: int) -> torch.device:
    """cuda:<device_id>, or why this torch cannot run a KIND_GPU instance there."""
    if not torch.cuda.is_available():
        raise ModelConfigError(
            f"unable to load model '{model}': instance group kind KIND_GPU needs PyTorch with CUDA and a visible "
            f"GPU, and this torch ({torch.__version__}) has none (torch.cuda.is_available() is False); use "
            "KIND_CPU, or install a CUDA build of torch"
        )
    count = torch.cuda.device_count()
    if device_id >= count:
        raise ModelConfigError(
            f"unable to load model '{model}': instance group kind KIND_GPU asks for GPU {device_id}, and torch "
            f"sees {count} GPU(s)"
        )
    return torch.device("cuda", device_id)


def placement(model: str, group: Any, device_id: int) -> Placement:
    kind = group_kind(group)
    cpu = torch.device("cpu")
    if kind == "KIND_GPU":
        device = cuda_device(model, device_id)
        return Placement(kind, device, device, True)
    if kind == "KIND_MODEL":
        return Placement(kind, cpu, None, torch.cuda.is_available())
    return Placement(kind, cpu, cpu, False)


__all__ = ["Placement", "cuda_device", "placement"]

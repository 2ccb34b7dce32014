"""Triton core normalisation of a model config (NormalizeModelConfig + NormalizeInstanceGroup).

Applied to every model after the backend fields are filled and auto-complete ran; what it sets is visible in
GET .../config. Normalising twice gives the same config.
"""

from __future__ import annotations

import logging

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from modelhost.config import constants as c

_log = logging.getLogger("modelhost.config")


def _normalize_batchers(config: ModelConfig) -> None:
    if config.HasField("dynamic_batching"):
        batcher = config.dynamic_batching
        if not batcher.preferred_batch_size and config.max_batch_size > 0:
            batcher.preferred_batch_size.append(config.max_batch_size)
    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        if sequence.max_sequence_idle_microseconds == 0:
            sequence.max_sequence_idle_microseconds = c.SEQUENCE_IDLE_DEFAULT_MICROSECONDS
        if sequence.HasField("oldest"):
            oldest = sequence.oldest
            if not oldest.preferred_batch_size and config.max_batch_size > 0:
                oldest.preferred_batch_size.append(config.max_batch_size)


def _normalize_optimization(config: ModelConfig) -> None:
    optimization = config.optimization
    if not optimization.HasField("input_pinned_memory"):
        optimization.input_pinned_memory.enable = True
    if not optimization.HasField("output_pinned_memory"):
        optimization.output_pinned_memory.enable = True


def default_instance_count(kind: int, backend: str) -> int:
    """Triton's default `count`: 1, or 2 for KIND_CPU groups of the ONNX Runtime and TensorFlow backends."""
    if kind == ModelInstanceGroup.KIND_CPU and backend in c.MULTI_CPU_INSTANCE_BACKENDS:
        return c.DEFAULT_CPU_INSTANCE_COUNT
    return 1


def normalize_instance_groups(config: ModelConfig, gpu_count: int, *, gpu_backend: bool = True) -> None:
    """Give every model at least one instance group and resolve name, kind, count and gpus of each.

    `gpu_backend`: False where the model's backend cannot run on a GPU here (ONNX Runtime without its CUDA
    provider): KIND_AUTO then means the CPU on a GPU host too, rather than instances that cannot load.
    """
    if not config.instance_group:
        group = config.instance_group.add(name=config.name)
        if config.backend in c.CPU_ONLY_BACKENDS:
            group.kind = ModelInstanceGroup.KIND_CPU
    gpus = list(range(max(gpu_count, 0)))
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == ModelInstanceGroup.KIND_AUTO:
            # KIND_AUTO means GPU when every listed GPU (or, with none listed, any GPU) is present.
            on_gpu = bool(gpus) and all(0 <= gid < len(gpus) for gid in group.gpus)
            if on_gpu and not gpu_backend:
                _log.warning(
                    "model '%s': the %s backend cannot run on a GPU here, so its instance group '%s' runs on "
                    "the CPU (set kind: KIND_CPU to say so, or install the backend's GPU build)",
                    config.name,
                    config.backend,
                    group.name,
                )
                on_gpu = False
            group.kind = ModelInstanceGroup.KIND_GPU if on_gpu else ModelInstanceGroup.KIND_CPU
        if group.count < 1:
            group.count = default_instance_count(group.kind, config.backend)
        if group.kind == ModelInstanceGroup.KIND_GPU and not group.gpus:
            group.gpus.extend(gpus)


def is_ensemble(config: ModelConfig) -> bool:
    """Triton treats a model as an ensemble (no instances nor optimization) if it has ensemble_scheduling."""
    return bool(config.HasField("ensemble_scheduling"))


def normalize_config(
    config: ModelConfig, model_name: str, *, gpu_count: int = 0, gpu_backend: bool = True
) -> None:
    """Apply Triton core's normalisation in place (`gpu_backend`: see normalize_instance_groups)."""
    if not config.name:
        config.name = model_name
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    _normalize_batchers(config)
    if not is_ensemble(config):
        _normalize_optimization(config)
        normalize_instance_groups(config, gpu_count, gpu_backend=gpu_backend)


__all__ = ["default_instance_count", "is_ensemble", "normalize_config", "normalize_instance_groups"]

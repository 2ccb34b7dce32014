"""Validation of a completed, normalised model config (Triton core ValidateModelConfig, ValidateInstanceGroup,
ValidateModelIOConfig and the repository's name check).

Every error is a ModelConfigError whose message is Triton's wording, which names the model and the field, and
then the config's source in parentheses.
"""

from __future__ import annotations

from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from modelhost.config import constants as c
from modelhost.config.invalid import InvalidConfig
from modelhost.config.normalize import is_ensemble
from modelhost.config.validate_io import validate_io
from modelhost.config.validate_schedulers import (
    validate_dynamic_batching,
    validate_ensemble,
    validate_sequence_batching,
)
from modelhost.errors import ModelConfigError


def _check_name_given(config: ModelConfig, model_name: str) -> None:
    if not config.name:
        raise InvalidConfig(f"model configuration must specify 'name' (model '{model_name}')")


def _check_name_matches(config: ModelConfig, model_name: str) -> None:
    if config.name != model_name:
        raise InvalidConfig(
            f"unexpected directory name '{model_name}' for model '{config.name}', directory name must equal "
            "model name"
        )


def _check_platform_backend(config: ModelConfig) -> None:
    name, platform, backend = config.name, config.platform, config.backend
    if not backend:
        if not platform:
            raise InvalidConfig(f"must specify 'platform' or 'backend' for '{name}'")
        if platform != c.ENSEMBLE_PLATFORM:
            raise InvalidConfig(f"unexpected platform type '{platform}' for {name}")
    elif platform == c.ENSEMBLE_PLATFORM:
        raise InvalidConfig(
            f"Ensemble model '{name}' must have platform type '{platform}' and empty backend type"
        )
    allowed = c.KNOWN_BACKEND_PLATFORMS.get(backend)
    if allowed is not None and platform not in allowed:
        raise InvalidConfig(f"unexpected 'platform' and 'backend' pair, got:{platform}, {backend}")
    if backend == c.PYTHON_BACKEND and platform:
        # Triton would hand such a model to a python-based "platform handler"; modelhost runs model.py only.
        raise InvalidConfig(
            f"model '{name}' uses the python backend, which must not specify a 'platform' (got '{platform}')"
        )


def _check_version_policy(config: ModelConfig, model_name: str) -> None:
    if not config.HasField("version_policy"):
        raise InvalidConfig(f"must specify 'version policy' for {config.name}")
    policy = config.version_policy
    which = policy.WhichOneof("policy_choice")
    if (which == "latest" and policy.latest.num_versions < 1) or (
        which == "specific" and not policy.specific.versions
    ):
        raise InvalidConfig(
            f"at least one version must be available under the version policy of model '{model_name}' "
            f"(version_policy {which} selects none)"
        )


def _check_instance_groups(config: ModelConfig, gpu_count: int) -> None:
    name = config.name
    if not config.instance_group:
        raise InvalidConfig(f"must specify one or more 'instance group's for {name}")
    for group in config.instance_group:
        where = f"instance group {group.name} of model {name}"
        if group.count < 1:
            raise InvalidConfig(f"{where} must specify a positive 'count', got {group.count}")
        if group.kind == ModelInstanceGroup.KIND_MODEL:
            if group.gpus:
                raise InvalidConfig(f"{where} has kind KIND_MODEL but specifies one or more GPUs")
        elif group.kind == ModelInstanceGroup.KIND_GPU:
            if not group.gpus:
                if gpu_count <= 0:
                    raise InvalidConfig(
                        f"{where} has kind KIND_GPU but no GPUs are available (this server sees no GPU; use "
                        "KIND_CPU or KIND_AUTO)"
                    )
                raise InvalidConfig(f"{where} has kind KIND_GPU but specifies no GPUs")
            for gid in group.gpus:
                if not 0 <= gid < gpu_count:
                    # Triton's words (6.0: its default --min-supported-compute-capability, printed as C++ does).
                    available = " ".join(str(i) for i in range(gpu_count))
                    raise InvalidConfig(
                        f"{where} specifies invalid or unsupported gpu id {gid}. GPUs with at least the minimum "
                        f"required CUDA compute compatibility of 6.000000 are: {available}"
                    )
        elif group.kind == ModelInstanceGroup.KIND_CPU:
            if group.gpus:
                raise InvalidConfig(f"{where} has kind KIND_CPU but specifies one or more GPUs")
        else:
            raise InvalidConfig(f"{where} has unexpected kind KIND_AUTO")
        if group.profile:
            if config.platform != c.TENSORRT_PLATFORM:
                raise InvalidConfig(
                    f"{where} and platform {config.platform} specifies profile field which is only supported "
                    "for TensorRT models"
                )
            for profile in group.profile:
                if not profile.isdigit():
                    raise InvalidConfig(
                        f"{where} and platform {config.platform} specifies invalid profile {profile}. The "
                        "field should contain the string representation of a non-negative integer."
                    )


def _check_model_metrics(config: ModelConfig) -> None:
    for metric_control in config.model_metrics.metric_control:
        if not metric_control.HasField("metric_identifier"):
            raise InvalidConfig(f"metric control must specify 'metric_identifier' for {config.name}")
        if not metric_control.metric_identifier.family:
            raise InvalidConfig(f"metric identifier must specify non-empty 'family' for {config.name}")
        if not metric_control.HasField("histogram_options"):
            raise InvalidConfig(f"metric control must specify 'histogram_options' for {config.name}")
        if not metric_control.histogram_options.buckets:
            raise InvalidConfig(f"histogram options must specify non-empty 'buckets' for {config.name}")


# Fields of ModelConfig that modelhost does not act on yet, and why: a config that sets one fails its load instead
# of loading as if the field were honoured. Dotted paths go through repeated fields (any element). Listed in
# docs/compatibility.md from here.
FIELDS_NOT_SUPPORTED: dict[str, str] = {}
# Backends that load `model_operations` libraries (Triton's ONNX Runtime backend does; its others ignore them).
OP_LIBRARY_BACKENDS = ("onnxruntime",)


def _set_values(message: Any, path: list[str]) -> bool:
    """Whether the field at `path` below `message` is set: true, non-zero, or a message with content."""
    field, rest = path[0], path[1:]
    value = getattr(message, field)
    single = hasattr(value, "ListFields") or isinstance(value, bool | int | float | str | bytes)
    values = [value] if single else list(value)  # a repeated field: any of its elements
    if not rest:
        return any(v.ListFields() if hasattr(v, "ListFields") else bool(v) for v in values)
    return any(_set_values(v, rest) for v in values)


def _check_fields_not_supported(config: ModelConfig) -> None:
    for path, why in FIELDS_NOT_SUPPORTED.items():
        if _set_values(config, path.split(".")):
            raise InvalidConfig(f"'{path}' is not supported yet: {why} (model '{config.name}')")
    backend = config.backend or ("onnxruntime" if config.platform == "onnxruntime_onnx" else config.platform)
    if config.model_operations.op_library_filename and backend not in OP_LIBRARY_BACKENDS:
        # Triton's other backends would load the model and ignore the libraries; a model that needs them would
        # then fail at its first request.
        raise InvalidConfig(
            f"'model_operations' (custom operation libraries) is honoured by the onnxruntime backend only, not "
            f"by '{backend}' (model '{config.name}'); load the library in the model itself, or with LD_PRELOAD"
        )


def check_config(config: ModelConfig, model_name: str, gpu_count: int, *, complete: bool = True) -> None:
    """Raise InvalidConfig for the first broken rule, in Triton's order.

    With complete=False only the rules Triton checks before a backend auto-completes the config are applied
    (no tensor, no instance group rules).
    """
    _check_name_given(config, model_name)
    _check_platform_backend(config)
    if config.max_batch_size < 0:
        raise InvalidConfig(f"'max_batch_size' must be non-negative value for {config.name}")
    _check_version_policy(config, model_name)
    _check_fields_not_supported(config)
    if config.HasField("dynamic_batching"):
        validate_dynamic_batching(config)
    if config.HasField("sequence_batching"):
        validate_sequence_batching(config)
    if is_ensemble(config):
        validate_ensemble(config)
    elif config.platform == c.ENSEMBLE_PLATFORM:
        raise InvalidConfig(
            f"ensemble scheduling must be set for ensemble {config.name} whose platform is "
            f"{c.ENSEMBLE_PLATFORM}"
        )
    if config.model_transaction_policy.decoupled and config.response_cache.enable:
        raise InvalidConfig(
            f"Response Cache does not currently support model {config.name} with 'decoupled' transaction "
            "policy. Please disable the response cache."
        )
    if config.HasField("model_metrics"):
        _check_model_metrics(config)
    # After the rules above, as Triton's repository manager checks the name only once the config is valid.
    _check_name_matches(config, model_name)
    if not complete:
        return
    if not is_ensemble(config):
        _check_instance_groups(config, gpu_count)
    validate_io(config)


def validate_config(config: ModelConfig, model_name: str, source: str, gpu_count: int) -> None:
    """Raise ModelConfigError for the first rule the config breaks; `source` names the config's origin."""
    try:
        check_config(config, model_name, gpu_count)
    except InvalidConfig as err:
        raise ModelConfigError(f"{err.message} (in {source})") from None


__all__ = ["FIELDS_NOT_SUPPORTED", "check_config", "validate_config"]

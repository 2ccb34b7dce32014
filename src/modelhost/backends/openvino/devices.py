"""Where a model runs: the instance kind (KIND_CPU only) and the OpenVINO device of TARGET_DEVICE.

OpenVINO devices are not instance kinds: Triton's openvino backend refuses every kind but KIND_CPU and reaches
Intel GPUs and NPUs through TARGET_DEVICE. KIND_GPU means an NVIDIA GPU to the server, which OpenVINO cannot
use, so it is refused here too, whatever the machine has.
"""

from __future__ import annotations

from typing import Any

from modelhost.backends.params import group_kind
from modelhost.errors import ModelConfigError

# Devices that stand for others, named after a colon ("AUTO:GPU,CPU"), or alone ("AUTO").
VIRTUAL_DEVICES = ("AUTO", "MULTI", "HETERO", "BATCH")


def available_devices(core: Any) -> list[str]:
    return [str(d) for d in core.available_devices]


def check_instance_kind(group: Any, model_name: str, available: list[str]) -> None:
    kind = group_kind(group)
    if kind != "KIND_CPU":
        raise ModelConfigError(
            f"unable to load model '{model_name}', the openvino backend supports only instance groups of kind "
            f"KIND_CPU, got {kind} (OpenVINO runs on an Intel GPU or NPU through the TARGET_DEVICE parameter of a "
            f"KIND_CPU instance group; available OpenVINO devices: {', '.join(available) or 'none'})"
        )


def _named_devices(target: str) -> list[str]:
    """The physical devices a TARGET_DEVICE names: "GPU.1" -> ["GPU.1"], "HETERO:GPU,CPU" -> both, "AUTO" -> []
    (any), "BATCH:GPU(4)" -> ["GPU"]."""
    head, colon, rest = target.partition(":")
    if head not in VIRTUAL_DEVICES:
        return [target]
    if not colon:
        return []
    return [name.partition("(")[0].strip() for name in rest.split(",") if name.strip()]


def check_target_device(target: str, model_name: str, available: list[str]) -> None:
    """Refuse a TARGET_DEVICE naming a device OpenVINO does not see, naming those it does."""
    families = {device.partition(".")[0] for device in available}
    for device in _named_devices(target):
        if device in VIRTUAL_DEVICES:
            continue
        if device not in available and device not in families:
            raise ModelConfigError(
                f"unable to load model '{model_name}': TARGET_DEVICE '{target}' names OpenVINO device '{device}', "
                f"which is not available (available OpenVINO devices: {', '.join(available) or 'none'})"
            )
    if not available:
        raise ModelConfigError(f"unable to load model '{model_name}': OpenVINO sees no device to run on")


def supported_properties(core: Any, target: str) -> list[str] | None:
    """The properties TARGET_DEVICE takes (None when it does not say), to pass our defaults only where taken."""
    head = target.partition(":")[0]
    try:
        return [str(key) for key in core.get_property(head, "SUPPORTED_PROPERTIES")]
    except Exception:  # a virtual device may refuse the question; then we pass no defaults
        return None


__all__ = [
    "VIRTUAL_DEVICES",
    "available_devices",
    "check_instance_kind",
    "check_target_device",
    "supported_properties",
]

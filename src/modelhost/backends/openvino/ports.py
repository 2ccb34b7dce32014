"""A model's inputs and outputs as the rest of the backend sees them: by name, with config-style dims.

A tensor is known by `get_any_name()`, as Triton's backend knows it. A model whose input or output has no name
cannot be configured (Triton lists such models as not supported): it is refused naming the tensor's position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from modelhost.errors import ModelConfigError


def port_name(port: Any, kind: str, index: int, model_name: str) -> str:
    if not port.get_names():
        raise ModelConfigError(
            f"unable to load model '{model_name}': model {kind} {index} has no tensor name, and the openvino "
            "backend needs every input and output to be named"
        )
    return str(port.get_any_name())


def ports_by_name(ports: Sequence[Any], kind: str, model_name: str) -> dict[str, tuple[int, Any]]:
    """Name -> (position, port) of a model's inputs or outputs."""
    return {port_name(port, kind, index, model_name): (index, port) for index, port in enumerate(ports)}


def port_dims(port: Any) -> list[int] | None:
    """The port's shape with -1 for each dynamic dimension; None for a dynamic rank."""
    shape = port.get_partial_shape()
    if shape.rank.is_dynamic:
        return None
    return [int(d.get_length()) if d.is_static else -1 for d in shape]


__all__ = ["port_dims", "port_name", "ports_by_name"]

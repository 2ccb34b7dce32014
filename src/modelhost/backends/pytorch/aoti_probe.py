"""A load-time check of a config against an AOTInductor package, which does not say its inputs' dtypes and shapes.

The package's compiled code checks its inputs itself (AOTI_RUNTIME_CHECK_INPUTS=1, aoti.py) before computing
anything. So a load runs it once on zeros shaped and typed as the config says (variable dimensions and the batch
as 1) and reads the refusal, if any: a dtype other than the config's, or a dimension the config fixes at another
size, is a config that contradicts the model, refused as such. A refusal that a size of 1 chosen for a variable
dimension may have caused says nothing about the config, and the model loads; requests then meet the same checks.
Without AOTI_RUNTIME_CHECK_INPUTS=1 the compiled code trusts its inputs, so no probe runs (a wrong shape would be
read out of bounds).
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

import torch
from tritonclient.grpc.model_config_pb2 import DataType

from modelhost.backends.model_io import config_shape
from modelhost.backends.pytorch.tensors import CONFIG_TO_TORCH
from modelhost.errors import ModelConfigError

log = logging.getLogger(__name__)

CHECK_INPUTS = "AOTI_RUNTIME_CHECK_INPUTS"
# ATen scalar type names in AOTInductor's messages ("expected: 6(at::kFloat)") -> config datatypes
_ATEN_TYPES = {
    "Bool": "TYPE_BOOL",
    "Byte": "TYPE_UINT8",
    "Char": "TYPE_INT8",
    "Short": "TYPE_INT16",
    "Int": "TYPE_INT32",
    "Long": "TYPE_INT64",
    "Half": "TYPE_FP16",
    "Float": "TYPE_FP32",
    "Double": "TYPE_FP64",
    "BFloat16": "TYPE_BF16",
}
_DTYPE = re.compile(r"input_handles\[(\d+)\]: unmatched dtype, expected: \d+\(at::k(\w+)\)")
_DIM = re.compile(r"input_handles\[(\d+)\]: unmatched dim value at (\d+), expected: (\d+), but got: (\d+)")


def checks_inputs() -> bool:
    return os.environ.get(CHECK_INPUTS) == "1"


def _probe_inputs(config: Any, positions: dict[str, int], device: torch.device) -> list[torch.Tensor]:
    batching = int(config.max_batch_size) > 0
    tensors = {t.name: t for t in config.input}
    flat: list[torch.Tensor] = [torch.zeros(0)] * len(positions)
    for name, position in positions.items():
        tensor = tensors[name]
        shape = ([1] if batching else []) + [1 if d == -1 else int(d) for d in config_shape(tensor)]
        flat[position] = torch.zeros(
            shape, dtype=CONFIG_TO_TORCH[DataType.Name(tensor.data_type)], device=device
        )
    return flat


def _fixed(config: Any, name: str, dim: int) -> int | None:
    """The size the config fixes for dimension `dim` of input `name` (batch dimension included), None if not."""
    tensor = next(t for t in config.input if t.name == name)
    shape = ([-1] if int(config.max_batch_size) > 0 else []) + [int(d) for d in config_shape(tensor)]
    return shape[dim] if dim < len(shape) and shape[dim] != -1 else None


def probe(model: str, config: Any, package: Any, positions: dict[str, int], device: torch.device) -> None:
    """Refuse a config the package's input checks contradict; `positions`: config input -> flat position.
    Inputs fed by the server (batch inputs) are not probed: their shapes depend on the batch."""
    if not checks_inputs() or len(positions) != len({t.name for t in config.input}):
        return
    names = {position: name for name, position in positions.items()}
    try:
        with torch.inference_mode():
            package.loader.run(_probe_inputs(config, positions, device))
    except Exception as e:
        message = str(e).strip()
        if (match := _DTYPE.search(message)) is not None:
            name = names[int(match.group(1))]
            expected = _ATEN_TYPES.get(match.group(2), f"at::k{match.group(2)}")
            configured = DataType.Name(next(t for t in config.input if t.name == name).data_type)
            raise ModelConfigError(
                f"unable to load model '{model}', configuration expects datatype {configured} for input '{name}', "
                f"model expects {expected}"
            ) from e
        if (match := _DIM.search(message)) is not None:
            tensor, dim, size = names[int(match.group(1))], int(match.group(2)), int(match.group(3))
            fixed = _fixed(config, tensor, dim)
            if fixed is not None and fixed != size:
                raise ModelConfigError(
                    f"unable to load model '{model}', input '{tensor}': the model expects size {size} for "
                    f"dimension {dim} (batch dimension included), the configuration gives {fixed}"
                ) from e
        log.debug("model '%s': load-time probe inconclusive: %s", model, message)


__all__ = ["CHECK_INPUTS", "checks_inputs", "probe"]

"""numpy arrays (the server's tensors) to torch tensors and back, and which config datatypes torch can take.

The datatypes are Triton's PyTorch backend's (BOOL, UINT8, INT8/16/32/64, FP16/32/64) plus BF16, which the server
carries as raw 2-byte words (uint16) and torch has natively; UINT16/32/64 are refused at load as Triton refuses
them (torch's own support of them is limited). BYTES reach TorchScript as List[str]: 1-D only, UTF-8 text.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt
import torch
from tritonclient.grpc.model_config_pb2 import DataType

from modelhost.backends.model_io import config_shape
from modelhost.errors import BackendInvalidArgument, InvalidArgument, ModelConfigError

CONFIG_TO_TORCH: Final[dict[str, torch.dtype]] = {
    "TYPE_BOOL": torch.bool,
    "TYPE_UINT8": torch.uint8,
    "TYPE_INT8": torch.int8,
    "TYPE_INT16": torch.int16,
    "TYPE_INT32": torch.int32,
    "TYPE_INT64": torch.int64,
    "TYPE_FP16": torch.float16,
    "TYPE_FP32": torch.float32,
    "TYPE_FP64": torch.float64,
    "TYPE_BF16": torch.bfloat16,
}
TORCH_TO_CONFIG: Final[dict[torch.dtype, str]] = {dtype: name for name, dtype in CONFIG_TO_TORCH.items()}
STRING = "TYPE_STRING"


def check_config_tensors(model: str, config: Any) -> None:
    """Refuse, at load, config tensors torch cannot carry (Triton's wording)."""
    batching = int(config.max_batch_size) > 0
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for tensor in tensors:
            data_type = DataType.Name(tensor.data_type)
            if data_type == STRING:
                # A List[str] has one dimension: the batch's, or the tensor's own.
                if len(config_shape(tensor)) + (1 if batching else 0) > 1:
                    raise ModelConfigError(
                        f"Triton only supports 1 dimensional List of String as {kind} for '{tensor.name}' for "
                        f"model '{model}'"
                    )
            elif data_type not in CONFIG_TO_TORCH:
                raise ModelConfigError(
                    f"unsupported datatype {data_type} for {kind} '{tensor.name}' for model '{model}'"
                )


def to_torch(array: npt.NDArray[Any], device: torch.device) -> torch.Tensor:
    """A tensor of the array's values on `device`. BF16 arrives as uint16 words."""
    # The server's buffers may be read-only (decoded requests): torch needs memory it may write (a model may work
    # in place), so those are copied; batches the server assembled are used as they are.
    array = np.require(array, requirements=("C", "A", "W"))
    tensor = torch.from_numpy(array)
    if array.dtype == np.uint16:  # BF16's words (UINT16 itself is refused at load)
        tensor = tensor.view(torch.bfloat16)
    return tensor if device.type == "cpu" else tensor.to(device)


def to_numpy(tensor: torch.Tensor) -> npt.NDArray[Any]:
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.contiguous().view(torch.uint16).numpy()
    return tensor.numpy()


def strings_in(name: str, array: npt.NDArray[Any]) -> list[str]:
    """A BYTES tensor as the List[str] TorchScript takes: its elements as UTF-8 text."""
    try:
        return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in array.ravel()]
    except UnicodeDecodeError as e:
        raise InvalidArgument(
            f"input '{name}' holds bytes that are not UTF-8, which a TorchScript List[str] needs"
        ) from e


def strings_out(name: str, values: list[Any]) -> npt.NDArray[Any]:
    """A List[str] result as a BYTES tensor (1-D)."""
    if not all(isinstance(v, str) for v in values):
        raise BackendInvalidArgument(f"output '{name}' must be of type Tensor or List[str].")
    array = np.empty(len(values), dtype=object)
    array[:] = [v.encode("utf-8") for v in values]
    return array


__all__ = [
    "CONFIG_TO_TORCH",
    "TORCH_TO_CONFIG",
    "check_config_tensors",
    "strings_in",
    "strings_out",
    "to_numpy",
    "to_torch",
]

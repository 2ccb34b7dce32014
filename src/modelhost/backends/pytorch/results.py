"""A TorchScript forward() result as the config's outputs: checked against the config on every execution.

TorchScript's schema may leave the number and dtypes of outputs open (a List[Tensor], Any), so what a load could
not check is checked here, with Triton's wording, and fails the batch as a 400: an output index the result does
not have, a dtype other than the config's, a scalar, a batching model's output without the batch dimension.
"""

from __future__ import annotations

from typing import Any

import numpy.typing as npt
import torch

from modelhost.backends.api import Arrays
from modelhost.backends.pytorch.naming import OutputBinding
from modelhost.backends.pytorch.tensors import STRING, TORCH_TO_CONFIG, strings_out, to_numpy
from modelhost.errors import BackendInvalidArgument


def _values(result: Any, single: bool) -> list[Any]:
    """The returned values in order: a tuple's or a list's elements, or the one tensor or List[str]."""
    if single or isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, list) and result and all(isinstance(v, str) for v in result):
        return [result]  # one List[str] output, where forward()'s type did not say
    if isinstance(result, tuple | list):
        return list(result)
    raise BackendInvalidArgument(
        "output must be of type Tensor, List[str], Dict[str, Tensor] or a Tuple or List of Tensor and List[str], "
        f"got {type(result).__name__}"
    )


def _pick(result: Any, binding: OutputBinding, name: str, values: list[Any] | None) -> Any:
    if binding.by_key:
        if not isinstance(result, dict):
            raise BackendInvalidArgument(
                f"output must be a Dict[str, Tensor] as forward() declares, got {type(result).__name__}"
            )
        if name not in result:
            raise BackendInvalidArgument(
                f"output '{name}' in the model configuration is not in the dictionary the model returned "
                f"(keys: {', '.join(sorted(str(k) for k in result))})"
            )
        return result[name]
    assert values is not None
    index = binding.indices[name]
    if index >= len(values):
        raise BackendInvalidArgument(
            f"The output {name} in the model configuration refers to an output index which doesn't exist. This "
            f"model has {len(values)} outputs"
        )
    return values[index]


def output_array(name: str, value: Any, data_type: str, batch: int | None) -> npt.NDArray[Any]:
    """One returned value as output `name` of config type `data_type`, or why it cannot be."""
    if data_type == STRING:
        if not isinstance(value, list):
            raise BackendInvalidArgument(
                f"output '{name}' is TYPE_STRING in the configuration, but the model returned "
                f"{type(value).__name__} for it, not a List[str]"
            )
        return strings_out(name, value)
    if not isinstance(value, torch.Tensor):
        raise BackendInvalidArgument(f"output '{name}' must be of type Tensor or List[str].")
    provided = TORCH_TO_CONFIG.get(value.dtype, str(value.dtype))
    if provided != data_type:
        raise BackendInvalidArgument(
            f"configuration expects datatype {data_type} for output '{name}', model provides {provided}"
        )
    if value.dim() == 0:
        raise BackendInvalidArgument(f"output '{name}' is a scalar which is not supported.")
    if batch is not None and value.shape[0] != batch:
        raise BackendInvalidArgument(
            f"output '{name}' has shape {list(value.shape)}: the model batches (max_batch_size > 0), so its first "
            f"dimension must be the batch size {batch}"
        )
    return to_numpy(value)


def collect(
    result: Any, binding: OutputBinding, output_names: list[str], types: dict[str, str], batch: int | None
) -> Arrays:
    """The requested outputs of a forward() result. `types`: config datatype by output name; `batch`: the batch
    size every output's first dimension must have, None where it need not (no batching, ragged batches)."""
    values = None if binding.by_key else _values(result, binding.single)
    return {
        name: output_array(name, _pick(result, binding, name, values), types[name], batch)
        for name in output_names
    }


__all__ = ["collect", "output_array"]

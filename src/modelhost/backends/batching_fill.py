"""Auto-complete pieces shared by the backends that fill a config from the model file (Triton's backends each
repeat these lines): `max_batch_size` and `dynamic_batching` for a model that can batch, and a tensor's dims."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)


def fill_batching(config: Any, model_name: str, default_max_batch_size: int) -> None:
    """A batchable model: `max_batch_size` from the default when the config leaves it 0 (with Triton's warning),
    and `dynamic_batching {}` when it may batch more than one row and names no scheduler."""
    if config.max_batch_size == 0:
        config.max_batch_size = max(default_max_batch_size, 0)
        log.warning(
            "autofilled max_batch_size to %d for model '%s' since batching is supported but no max_batch_size is "
            "specified in model configuration. Must specify max_batch_size to utilize autofill with a larger max "
            "batch size",
            config.max_batch_size,
            model_name,
        )
    if (
        config.max_batch_size > 1
        and not config.HasField("dynamic_batching")
        and not config.HasField("sequence_batching")
    ):
        config.dynamic_batching.SetInParent()


def fill_dims(io: Any, model_dims: Sequence[int], batching: bool, *, reshape_unbatched: bool) -> None:
    """A config tensor's dims from the model's shape: less the batch dimension when batching. A tensor with no
    dimension left gets dims [1] (dims may not be empty) and an empty reshape, the model's scalar per batch item;
    without batching the reshape is added only where the backend's Triton counterpart adds it
    (`reshape_unbatched`: TensorRT and TensorFlow do; ONNX Runtime and OpenVINO do not, since an empty reshape
    of an unbatched tensor describes a tensor with no data)."""
    dims = list(model_dims[1:] if batching else model_dims)
    if dims:
        io.dims.extend(dims)
        return
    io.dims.append(1)
    if batching or reshape_unbatched:
        io.reshape.SetInParent()


__all__ = ["fill_batching", "fill_dims"]

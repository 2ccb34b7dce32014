"""Auto-complete of `max_batch_size` and `dynamic_batching` for a model whose file shows it can batch, shared by
the backends that auto-complete (Triton's backends each repeat these lines, with the same warning)."""

from __future__ import annotations

import logging
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


__all__ = ["fill_batching"]

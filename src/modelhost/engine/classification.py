"""The classification extension: an output replaced by its top-N entries as "value:index[:label]" strings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from modelhost.errors import InvalidArgument

_UNSUPPORTED = {"BOOL", "FP16", "BF16", "BYTES"}
_MAX_ELEMENTS = 1_000_000


def read_labels(model_dir: Path, label_filename: str) -> list[str]:
    if not label_filename:
        return []
    path = model_dir / label_filename
    return path.read_text(encoding="utf-8").splitlines()


def _format_value(value: Any) -> str:
    # Triton prints with std::to_string: six decimals for floats, plain integers otherwise.
    if isinstance(value, float | np.floating):
        return f"{float(value):.6f}"
    return str(int(value))


def classify(
    output: npt.NDArray[Any], datatype: str, count: int, batching: bool, labels: list[str]
) -> npt.NDArray[Any]:
    """Top-`count` classes of each batch row (or of the whole tensor when the model does not batch)."""
    if datatype in _UNSUPPORTED:
        raise InvalidArgument("class result not available for output due to unsupported type")
    if output.size > _MAX_ELEMENTS:
        raise InvalidArgument("classification output tensor too large")
    rows = output.reshape(output.shape[0], -1) if batching and output.ndim > 0 else output.reshape(1, -1)
    k = min(count, rows.shape[1])
    result: list[list[bytes]] = []
    for row in rows:
        order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        entries = []
        for idx in order:
            text = f"{_format_value(row[idx])}:{int(idx)}"
            if int(idx) < len(labels):
                text += f":{labels[int(idx)]}"
            entries.append(text.encode())
        result.append(entries)
    array = np.array(result, dtype=object)
    return array if batching else array.reshape(k)

"""`model_operations { op_library_filename: [...] }` for ONNX Runtime: custom operation libraries registered on
the model's sessions (its instances', and the one auto-complete reads the model's signature from), as Triton's
ONNX Runtime backend registers them. A name without a directory is looked up as the dynamic loader looks it up
(LD_LIBRARY_PATH); a library that does not load fails the model's load, naming it."""

from __future__ import annotations

from typing import Any

import onnxruntime as ort

from modelhost.errors import ModelConfigError


def register_op_libraries(options: ort.SessionOptions, config: Any, model_name: str) -> None:
    for filename in config.model_operations.op_library_filename:
        try:
            options.register_custom_ops_library(filename)
        except Exception as e:  # onnxruntime's own exception types
            raise ModelConfigError(
                f"unable to load model '{model_name}': the custom operation library '{filename}' "
                f"(model_operations) could not be registered: {e}"
            ) from e

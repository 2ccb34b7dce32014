"""ONNX auto-complete (onnxruntime_backend ModelState::AutoCompleteConfig).

Runs only when the config lacks inputs (input + batch_input) or outputs. The model's own signature decides:
batching is possible when every input and output has rank >= 1 and a dynamic first dimension. Then an unset
max_batch_size becomes the backend's default-max-batch-size (4), and dynamic_batching {} is added when
max_batch_size > 1 and no scheduler is configured. A missing input or output list is filled from the model
(batch dimension dropped when batching; dynamic dims -1; empty dims -> [1] plus an empty reshape when
batching). A list that is given is never merged with the model's: checking it against the model happens at
load time.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnxruntime as ort
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from modelhost.backends.batching_fill import fill_batching, fill_dims
from modelhost.backends.onnxruntime.custom_ops import register_op_libraries
from modelhost.config.constants import DEFAULT_MAX_BATCH_SIZE
from modelhost.datatypes import ONNX_TO_CONFIG
from modelhost.errors import ModelConfigError
from modelhost.repository.layout import version_directories

_log = logging.getLogger(__name__)


def onnx_model_path(model_dir: Path, default_model_filename: str) -> Path | None:
    """The ONNX file auto-complete reads: from the highest version holding the default model file.

    The default model file is either the ONNX file itself or a directory holding `model.onnx` (a large model
    with external data).
    """
    for version_dir in reversed(version_directories(model_dir).values()):
        candidate = version_dir / default_model_filename
        if candidate.is_file():
            return candidate
        if candidate.is_dir() and (candidate / "model.onnx").is_file():
            return candidate / "model.onnx"
    return None


@dataclass(frozen=True, slots=True)
class OnnxTensorInfo:
    name: str
    type: str  # ONNX Runtime type string, "tensor(float)"
    dims: list[int]  # -1 for dynamic dims


def _dim(value: object) -> int:
    """ORT reports a fixed dim as an int and a dynamic one as None or its symbolic name: those become -1."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return -1


def _tensor_infos(nodes: Sequence[Any]) -> list[OnnxTensorInfo]:
    infos = []
    for node in nodes:
        shape = node.shape if isinstance(node.shape, list | tuple) else []
        infos.append(OnnxTensorInfo(str(node.name), str(node.type), [_dim(d) for d in shape]))
    return infos


def read_onnx_signature(
    path: Path, model_name: str, config: Any = None
) -> tuple[list[OnnxTensorInfo], list[OnnxTensorInfo]]:
    """The model's inputs and outputs, from a single-threaded CPU session (with the config's custom operation
    libraries, which a model using their operations needs even to be read)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if config is not None:
        register_op_libraries(options, config, model_name)
    try:
        session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises its own exception types (Fail, InvalidGraph, ...)
        raise ModelConfigError(
            f"unable to autofill for '{model_name}': failed to load ONNX model {path}: {err}"
        ) from err
    return _tensor_infos(session.get_inputs()), _tensor_infos(session.get_outputs())


def _supports_batching(infos: Sequence[OnnxTensorInfo]) -> bool:
    return all(len(info.dims) > 0 and info.dims[0] == -1 for info in infos)


def _fill_ios(config: ModelConfig, field: str, infos: Sequence[OnnxTensorInfo], model_name: str) -> None:
    ios = getattr(config, field)
    del ios[:]
    batching = config.max_batch_size > 0
    for info in infos:
        data_type = ONNX_TO_CONFIG.get(info.type)
        if data_type is None:
            raise ModelConfigError(
                f"unable to autofill for '{model_name}': unsupported ONNX type '{info.type}' "
                f"for {field} '{info.name}'"
            )
        io = ios.add()
        io.name = info.name
        io.data_type = DataType.Value(data_type)
        fill_dims(io, info.dims, batching, reshape_unbatched=False)


def autocomplete_onnx(
    config: ModelConfig,
    model_name: str,
    model_dir: Path,
    *,
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> None:
    """Complete an ONNX Runtime model's config in place from the ONNX model itself."""
    input_count = len(config.input) + len(config.batch_input)
    output_count = len(config.output)
    if input_count > 0 and output_count > 0:
        _log.info(
            "skipping model configuration auto-complete for '%s': inputs and outputs already specified",
            model_name,
        )
        return

    path = onnx_model_path(model_dir, config.default_model_filename)
    if path is None:
        raise ModelConfigError(
            f"unable to autofill for '{model_name}': no version directory of {model_dir} contains "
            f"'{config.default_model_filename}', and the configuration does not specify both inputs and "
            "outputs"
        )
    inputs, outputs = read_onnx_signature(path, model_name, config)

    if _supports_batching(inputs) and _supports_batching(outputs):
        fill_batching(config, model_name, default_max_batch_size)
    elif config.max_batch_size != 0:
        raise ModelConfigError(
            f"autofill failed for model '{model_name}': model does not support batching while non-zero "
            "max_batch_size is specified"
        )

    if input_count == 0:
        _fill_ios(config, "input", inputs, model_name)
    if output_count == 0:
        _fill_ios(config, "output", outputs, model_name)


__all__ = [
    "OnnxTensorInfo",
    "autocomplete_onnx",
    "onnx_model_path",
    "read_onnx_signature",
]

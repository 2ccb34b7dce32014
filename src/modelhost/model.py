"""One loaded model version: checks a request against its config, runs it through its scheduler, shapes the answer.

Everything per model (tensor specs, labels, metadata) is compiled once at load, not per request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from modelhost.backends.base import Arrays
from modelhost.classification import classify, read_labels
from modelhost.errors import InvalidArgument
from modelhost.io_specs import TensorSpec, format_shape, input_specs, output_specs, shape_matches
from modelhost.metrics import ModelMetrics
from modelhost.scheduling.instances import InstancePool, Job
from modelhost.types import InferenceRequest, InferenceResponse, Tensor

_BATCH_NOTE = (
    " NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to "
    "each input shape. If you want to specify the full shape including the batch dim in your input dims config, "
    "try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size."
)


def request_prefix(request: InferenceRequest) -> str:
    return f"[request id: {request.id or '<id_unknown>'}] "


class LoadedModel:
    def __init__(self, name: str, version: int, config: Any, model_dir: Path, pool: InstancePool) -> None:
        self.name = name
        self.version = version
        self.version_str = str(version)
        self.config = config
        self.model_dir = model_dir
        self.pool = pool
        self.max_batch_size = int(config.max_batch_size)
        self.inputs: dict[str, TensorSpec] = input_specs(config)
        self.outputs: dict[str, TensorSpec] = output_specs(config)
        self.required_inputs = [n for n, s in self.inputs.items() if not s.optional]
        self.all_output_names = list(self.outputs)
        self.labels = {n: read_labels(model_dir, s.label_filename) for n, s in self.outputs.items()}
        self.platform = config.platform or config.backend
        self.metrics: ModelMetrics | None = None  # attached by the server on first use

    def metadata(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "inputs": [
                {"name": s.name, "datatype": s.datatype, "shape": s.full_shape(self.max_batch_size)}
                for s in self.inputs.values()
            ],
            "outputs": [
                {"name": s.name, "datatype": s.datatype, "shape": s.full_shape(self.max_batch_size)}
                for s in self.outputs.values()
            ],
        }

    def _model_inputs(self, request: InferenceRequest) -> tuple[Arrays, int]:
        """Check the inputs against the config; return them model-shaped, and the batch size."""
        name = self.name
        arrays: Arrays = {}
        batch = 1
        for i, tensor in enumerate(request.inputs):
            spec = self.inputs.get(tensor.name)
            if spec is None:
                raise InvalidArgument(
                    request_prefix(request) + f"unexpected inference input '{tensor.name}' for model '{name}'"
                )
            if tensor.name in arrays:
                raise InvalidArgument(
                    request_prefix(request) + f"input '{tensor.name}' appears more than once in the request"
                )
            if tensor.datatype != spec.datatype:
                raise InvalidArgument(
                    request_prefix(request) + f"inference input '{tensor.name}' data-type is '{tensor.datatype}', "
                    f"but model '{name}' expects '{spec.datatype}'"
                )
            shape = tensor.shape
            if self.max_batch_size > 0:
                if len(shape) == 0 or not shape_matches(shape[1:], spec.dims):
                    raise self._shape_error(request, tensor, spec)
                if i == 0:
                    batch = shape[0]
                elif shape[0] != batch:
                    raise InvalidArgument(
                        request_prefix(request)
                        + f"input '{tensor.name}' batch size does not match other inputs for '{name}'"
                    )
            elif not shape_matches(shape, spec.dims):
                raise self._shape_error(request, tensor, spec)
            data = tensor.data
            if spec.reshape is not None:
                target = ([batch] if self.max_batch_size > 0 else []) + list(spec.reshape)
                try:
                    data = data.reshape(target)
                except ValueError as e:
                    raise InvalidArgument(
                        request_prefix(request) + f"input '{tensor.name}' of shape {format_shape(shape)} cannot "
                        f"be reshaped to {format_shape(target)} for model '{name}'"
                    ) from e
            arrays[tensor.name] = data
        missing = [n for n in self.required_inputs if n not in arrays]
        if missing:
            expected = len(self.required_inputs)
            raise InvalidArgument(
                request_prefix(request) + f"expected {expected} inputs but got {len(arrays)} inputs for model "
                f"'{name}'. Got input(s) {list(arrays)}, but missing required input(s) {missing}. "
                "Please provide all required input(s)."
            )
        if self.max_batch_size > 0 and batch > self.max_batch_size:
            raise InvalidArgument(
                request_prefix(request)
                + f"inference request batch-size must be <= {self.max_batch_size} for '{name}'"
            )
        return arrays, batch

    def _shape_error(self, request: InferenceRequest, tensor: Tensor, spec: TensorSpec) -> InvalidArgument:
        message = (
            request_prefix(request) + f"unexpected shape for input '{tensor.name}' for model '{self.name}'. "
            f"Expected {format_shape(spec.full_shape(self.max_batch_size))}, got {format_shape(tensor.shape)}."
        )
        if self.max_batch_size > 0:
            message += _BATCH_NOTE
        return InvalidArgument(message)

    def _output_names(self, request: InferenceRequest) -> list[str]:
        if not request.outputs:
            return self.all_output_names
        names: list[str] = []
        for out in request.outputs:
            if out.name not in self.outputs:
                raise InvalidArgument(
                    request_prefix(request) + f"unexpected inference output '{out.name}' for model '{self.name}'"
                )
            if out.name in names:
                raise InvalidArgument(
                    request_prefix(request) + f"output '{out.name}' is requested more than once"
                )
            if out.classification < 0:
                raise InvalidArgument(
                    request_prefix(request) + f"classification count for output '{out.name}' must be positive"
                )
            names.append(out.name)
        return names

    async def infer(self, request: InferenceRequest) -> tuple[InferenceResponse, int]:
        """The response, and the batch size it ran with."""
        inputs, batch = self._model_inputs(request)
        output_names = self._output_names(request)
        results = await self.pool.execute(Job(inputs, output_names, batch))
        classifications = {o.name: o.classification for o in request.outputs if o.classification > 0}
        outputs: list[Tensor] = []
        for name in output_names:
            spec = self.outputs[name]
            array = results[name]
            if spec.reshape is not None and spec.dims.count(-1) <= 1:
                array = array.reshape(([array.shape[0]] if self.max_batch_size > 0 else []) + list(spec.dims))
            datatype = spec.datatype
            count = classifications.get(name, 0)
            if count:
                array = classify(array, datatype, count, self.max_batch_size > 0, self.labels[name])
                datatype = "BYTES"
            elif array.dtype != spec.dtype and datatype != "BYTES":
                array = np.asarray(array, dtype=spec.dtype)
            outputs.append(Tensor(name, datatype, list(array.shape), array))
        return InferenceResponse(self.name, self.version_str, request.id, outputs), batch

    def close(self) -> None:
        self.pool.close()

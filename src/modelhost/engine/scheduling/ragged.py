"""Ragged batching: inputs whose shapes differ between the requests of a batch, and the batch inputs and outputs
that tell the model where each request's data lies (`allow_ragged_batch`, `batch_input`, `batch_output`).

Triton's semantics, as its ONNX Runtime, PyTorch and TensorRT backends implement them:

- a ragged input (`allow_ragged_batch: true`) does not keep requests with different shapes out of a batch; the
  model gets the requests' data concatenated into one 1-D tensor, without padding;
- a `batch_input` is a tensor the server makes for the model from a source input of every request in the batch:
  BATCH_ELEMENT_COUNT (each request's element count: shape [requests]), BATCH_ACCUMULATED_ELEMENT_COUNT (their
  running sum), ..._WITH_ZERO (the same after a leading 0: [requests + 1]), BATCH_MAX_ELEMENT_COUNT_AS_SHAPE (a
  tensor of shape [max element count]; its data means nothing), BATCH_ITEM_SHAPE (the shape of every batch item,
  [rows, rank]) and BATCH_ITEM_SHAPE_FLATTEN (the same, flattened);
- a `batch_output` of kind BATCH_SCATTER_WITH_INPUT_SHAPE is an output holding every request's result one after
  the other: each request gets its part, shaped like its source input where the output's dims are variable.

A request alone runs through the same code as a batch of one, so a model sees the same tensors either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from tritonclient.grpc.model_config_pb2 import BatchInput

from modelhost.backends.api import Arrays, Job
from modelhost.datatypes import CONFIG_TO_WIRE, WIRE_TO_NUMPY
from modelhost.engine.scheduling.instances import InstancePool
from modelhost.errors import InternalError, ModelConfigError


@dataclass(frozen=True, slots=True)
class _BatchInput:
    kind: int
    target: str
    dtype: np.dtype[Any]
    source: str


@dataclass(frozen=True, slots=True)
class _Scatter:
    target: str
    source: str
    dims: tuple[int, ...]  # the output's dims, without the batch dimension


def _check(config: Any) -> None:
    """What Triton checks of batch inputs and outputs at load, in its words where it has them."""
    inputs = {t.name for t in config.input}
    outputs = {t.name for t in config.output}
    for b in config.batch_input:
        if len(b.target_name) != 1 or len(b.source_input) != 1:
            raise ModelConfigError(
                f"batch input of model '{config.name}' must have exactly one 'target_name' and one 'source_input'"
            )
        if b.source_input[0] not in inputs:
            raise ModelConfigError(
                f"batch input '{b.target_name[0]}' of model '{config.name}' has unknown source input "
                f"'{b.source_input[0]}'"
            )
        if b.target_name[0] in inputs:
            raise ModelConfigError(
                f"batch input '{b.target_name[0]}' of model '{config.name}' is also a model input in the config"
            )
        if _wire(b.data_type) not in ("INT32", "INT64", "FP32"):
            raise ModelConfigError(
                f"batch input '{b.target_name[0]}' of model '{config.name}' must be of type TYPE_INT32, "
                "TYPE_INT64 or TYPE_FP32"
            )
    for b in config.batch_output:
        if len(b.target_name) != 1 or len(b.source_input) != 1 or b.source_input[0] not in inputs:
            raise ModelConfigError(
                f"batch output of model '{config.name}' must have one 'target_name' and one known 'source_input'"
            )
        if b.target_name[0] not in outputs:
            raise ModelConfigError(
                f"batch output '{b.target_name[0]}' of model '{config.name}' is not an output of the model"
            )


def _wire(config_type: int) -> str:
    return CONFIG_TO_WIRE[
        BatchInput.DESCRIPTOR.fields_by_name["data_type"].enum_type.values_by_number[config_type].name
    ]


def _dtype(config_type: int) -> np.dtype[Any]:
    return np.dtype(WIRE_TO_NUMPY[_wire(config_type)])


class RaggedBatching:
    __slots__ = ("batch_inputs", "ragged", "scatters")

    def __init__(self, config: Any) -> None:
        _check(config)
        self.ragged = frozenset(t.name for t in config.input if t.allow_ragged_batch)
        self.batch_inputs = [
            _BatchInput(int(b.kind), b.target_name[0], _dtype(b.data_type), b.source_input[0])
            for b in config.batch_input
        ]
        dims = {t.name: tuple(int(d) for d in t.dims) for t in config.output}
        self.scatters = {
            b.target_name[0]: _Scatter(b.target_name[0], b.source_input[0], dims.get(b.target_name[0], ()))
            for b in config.batch_output
        }

    @staticmethod
    def wanted(config: Any) -> bool:
        return config.max_batch_size > 0 and bool(
            config.batch_input or config.batch_output or any(t.allow_ragged_batch for t in config.input)
        )

    def key(self, inputs: Arrays) -> tuple[Any, ...]:
        """Requests with equal keys may share a batch: a ragged input's shape does not keep them apart."""
        return tuple(
            (name, a.dtype.str, None if name in self.ragged else a.shape[1:])
            for name, a in sorted(inputs.items())
        )

    def compose(self, requests: list[Arrays]) -> Arrays:
        """The model's inputs for these requests' inputs: concatenated (ragged ones flattened), and the batch
        inputs made from them."""
        names = requests[0]
        inputs: Arrays = {}
        for name in names:
            parts = [r[name].reshape(-1) if name in self.ragged else r[name] for r in requests]
            inputs[name] = parts[0] if len(parts) == 1 else np.concatenate(parts)
        for batch_input in self.batch_inputs:
            inputs[batch_input.target] = self._batch_input(
                batch_input, [r[batch_input.source] for r in requests]
            )
        return inputs

    @staticmethod
    def _batch_input(spec: _BatchInput, sources: list[npt.NDArray[Any]]) -> npt.NDArray[Any]:
        counts = [s.size for s in sources]
        kind = spec.kind
        if kind == BatchInput.BATCH_ELEMENT_COUNT:
            return np.array(counts, dtype=spec.dtype)
        if kind == BatchInput.BATCH_ACCUMULATED_ELEMENT_COUNT:
            return np.cumsum(counts).astype(spec.dtype)
        if kind == BatchInput.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO:
            return np.concatenate([[0], np.cumsum(counts)]).astype(spec.dtype)
        if kind == BatchInput.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE:
            return np.zeros(max(counts), dtype=spec.dtype)
        shapes = np.array([s.shape[1:] for s in sources for _ in range(s.shape[0])], dtype=spec.dtype)
        if kind == BatchInput.BATCH_ITEM_SHAPE:
            return shapes
        return shapes.reshape(-1)  # BATCH_ITEM_SHAPE_FLATTEN

    def split(self, outputs: Arrays, requests: list[tuple[Arrays, int, list[str]]]) -> list[Arrays]:
        """Each request's outputs: its rows, or for a scatter output its part shaped like its source input.
        `requests`: (inputs, batch size, requested output names) of each request, in batch order."""
        answers: list[Arrays] = []
        row = 0
        offsets = dict.fromkeys(self.scatters, 0)
        flat = {name: outputs[name].reshape(-1) for name in self.scatters if name in outputs}
        for inputs, rows, names in requests:
            answer: Arrays = {}
            for name, scatter in self.scatters.items():  # every request's part, asked for or not: they follow
                if name not in outputs:
                    continue  # no request of the batch asked for it
                source = inputs[scatter.source].shape
                shape = [rows] + [
                    source[i + 1] if d == -1 and i + 1 < len(source) else d
                    for i, d in enumerate(scatter.dims)
                ]
                start, size = offsets[name], math.prod(shape)
                values = flat[name]
                if start + size > values.size:
                    raise InternalError(
                        f"output '{name}' holds {values.size} elements, too few to scatter to the requests of "
                        "the batch"
                    )
                if name in names:
                    answer[name] = values[start : start + size].reshape(shape)
                offsets[name] = start + size
            for name in names:
                if name not in self.scatters:
                    answer[name] = outputs[name][row : row + rows]
            answers.append(answer)
            row += rows
        return answers


async def execute_alone(ragged: RaggedBatching, pool: InstancePool, job: Job) -> Arrays:
    """A request run on its own (no batcher): the model still gets its inputs as a batch of one."""
    model_job = Job(ragged.compose([job.inputs]), job.output_names, job.batch_size, request=job.request)
    results = await pool.execute(model_job)
    job.timing.queue_ns, job.timing.infer_ns = model_job.timing.queue_ns, model_job.timing.infer_ns
    return ragged.split(results, [(job.inputs, job.batch_size, job.output_names)])[0]


__all__ = ["RaggedBatching", "execute_alone"]

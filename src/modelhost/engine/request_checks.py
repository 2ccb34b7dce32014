"""A request checked against its model version's config before it is queued: its inputs (names, count, batch size,
data types, shapes, reshapes) and its requested outputs, in the order of Triton's request normalisation, so that a
request with several faults gets the error Triton would give, in Triton's words.

Everything per model is compiled once at load (`RequestChecks`), not per request; the common request (every input
required, none reshaped, each sent once and right) passes in one pass.
"""

from __future__ import annotations

from collections.abc import Iterable

from modelhost.backends.api import Arrays
from modelhost.errors import InvalidArgument
from modelhost.io_specs import TensorSpec, format_shape, shape_matches
from modelhost.tensor_codec import id_prefix
from modelhost.types import InferenceRequest, Tensor

_BATCH_NOTE = (
    " NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to "
    "each input shape. If you want to specify the full shape including the batch dim in your input dims config, "
    "try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size."
)


def request_prefix(request: InferenceRequest) -> str:
    return id_prefix(request.id)


def _name_list(names: Iterable[str]) -> str:
    """Names as Triton lists them in messages: ['A','B']."""
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


class RequestChecks:
    """The checks of one model version: `inputs` the inputs a client sends (the server-fed ones of a sequence model
    left out), `outputs` those it may ask for."""

    __slots__ = ("all_outputs", "inputs", "max_batch_size", "name", "outputs", "plain", "required")

    def __init__(
        self, name: str, max_batch_size: int, inputs: dict[str, TensorSpec], outputs: dict[str, TensorSpec]
    ) -> None:
        self.name = name
        self.max_batch_size = max_batch_size
        self.inputs = inputs
        self.outputs = outputs
        self.required = [n for n, s in inputs.items() if not s.optional]
        # Every input required and none reshaped: a request that sends each once, well typed and shaped, is
        # checked in one pass (`_plain_inputs`), as most are.
        self.plain = len(self.required) == len(inputs) and all(s.reshape is None for s in inputs.values())
        self.all_outputs = list(outputs)

    def inputs_of(self, request: InferenceRequest) -> tuple[Arrays, int]:
        """Check the inputs against the config; return them model-shaped, and the batch size.

        The checks run in the order of Triton's request normalisation, so that a request with several faults
        gets the error Triton would give: input count, then names and batch sizes, then types and shapes.
        """
        if self.plain:
            plain = self._plain_inputs(request)
            if plain is not None:
                return plain
        name = self.name
        seen: set[str] = set()
        for tensor in request.inputs:
            if tensor.name in seen:
                raise InvalidArgument(
                    request_prefix(request) + f"input '{tensor.name}' already exists in request"
                )
            seen.add(tensor.name)
        if not len(self.required) <= len(request.inputs) <= len(self.inputs):
            raise self._count_error(request)
        batch: int | None = None
        for tensor in request.inputs:
            if tensor.name not in self.inputs:
                # Triton's wording, without the request id, as it words it.
                raise InvalidArgument(f"unexpected inference input '{tensor.name}' for model '{name}'")
            if self.max_batch_size > 0:
                if not tensor.shape:
                    raise InvalidArgument(
                        request_prefix(request)
                        + f"input '{tensor.name}' has no shape but model requires batch "
                        f"dimension for '{name}'"
                    )
                if batch is None:
                    batch = tensor.shape[0]
                elif tensor.shape[0] != batch:
                    raise InvalidArgument(
                        request_prefix(request)
                        + f"input '{tensor.name}' batch size does not match other inputs for '{name}'"
                    )
        if any(n not in seen for n in self.required):
            # Right count and known names, but an optional input stands in for a required one.
            raise self._count_error(request)
        batch = 1 if batch is None else batch
        if self.max_batch_size > 0 and batch > self.max_batch_size:
            raise InvalidArgument(
                request_prefix(request)
                + f"inference request batch-size must be <= {self.max_batch_size} for '{name}'"
            )
        arrays: Arrays = {}
        for tensor in request.inputs:
            spec = self.inputs[tensor.name]
            if tensor.datatype != spec.datatype:
                raise InvalidArgument(
                    request_prefix(request)
                    + f"inference input '{tensor.name}' data-type is '{tensor.datatype}', "
                    f"but model '{name}' expects '{spec.datatype}'"
                )
            shape = tensor.shape
            if not shape_matches(shape[1:] if self.max_batch_size > 0 else shape, spec.dims):
                raise self._shape_error(request, tensor, spec)
            data = tensor.data
            if spec.reshape is not None:
                target = ([batch] if self.max_batch_size > 0 else []) + list(spec.reshape)
                try:
                    data = data.reshape(target)
                except ValueError as e:
                    raise InvalidArgument(
                        request_prefix(request)
                        + f"input '{tensor.name}' of shape {format_shape(shape)} cannot "
                        f"be reshaped to {format_shape(target)} for model '{name}'"
                    ) from e
            arrays[tensor.name] = data
        return arrays, batch

    def _plain_inputs(self, request: InferenceRequest) -> tuple[Arrays, int] | None:
        """`inputs_of` in one pass for a model whose inputs are all required and none reshaped, given as
        many inputs as it has: the arrays and batch size when every check passes, None when one does not (the
        checks in Triton's order then say which)."""
        specs = self.inputs
        if len(request.inputs) != len(specs):
            return None
        arrays: Arrays = {}
        batch: int | None = None
        batching = self.max_batch_size > 0
        for tensor in request.inputs:
            spec = specs.get(tensor.name)
            if spec is None or tensor.name in arrays or tensor.datatype != spec.datatype:
                return None
            shape = tensor.shape
            if batching:
                if (
                    not shape
                    or (batch is not None and shape[0] != batch)
                    or not shape_matches(shape[1:], spec.dims)
                ):
                    return None
                batch = shape[0]
            elif not shape_matches(shape, spec.dims):
                return None
            arrays[tensor.name] = tensor.data
        if batch is None:
            return arrays, 1
        return (arrays, batch) if batch <= self.max_batch_size else None

    def _count_error(self, request: InferenceRequest) -> InvalidArgument:
        got, expected, required = len(request.inputs), len(self.inputs), len(self.required)
        names = {t.name for t in request.inputs}
        missing = [n for n in self.required if n not in names]
        count = (
            f"{expected} inputs"
            if required == expected
            else f"number of inputs between {required} and {expected}"
        )
        return InvalidArgument(
            request_prefix(request) + f"expected {count} but got {got} inputs for model '{self.name}'. Got "
            f"input(s) {_name_list(t.name for t in request.inputs)}, but missing required input(s) "
            f"{_name_list(missing)}. Please provide all required input(s)."
        )

    def _shape_error(self, request: InferenceRequest, tensor: Tensor, spec: TensorSpec) -> InvalidArgument:
        message = (
            request_prefix(request) + f"unexpected shape for input '{tensor.name}' for model '{self.name}'. "
            f"Expected {format_shape(spec.full_shape(self.max_batch_size))}, got {format_shape(tensor.shape)}."
        )
        if self.max_batch_size > 0:
            message += _BATCH_NOTE
        return InvalidArgument(message)

    def output_names(self, request: InferenceRequest) -> list[str]:
        if not request.outputs:
            return self.all_outputs
        names: list[str] = []
        for out in request.outputs:
            if out.name not in self.outputs:
                # Triton's wording, without the request id, as it words it.
                raise InvalidArgument(f"unexpected inference output '{out.name}' for model '{self.name}'")
            if out.name in names:
                # Triton (2.51) answers the output once; asking twice is a client mistake worth naming.
                raise InvalidArgument(
                    request_prefix(request) + f"output '{out.name}' is requested more than once"
                )
            if out.classification < 0:
                raise InvalidArgument(
                    f"invalid value for 'classification' parameter of output '{out.name}', expected >= 0"
                )
            names.append(out.name)
        return names


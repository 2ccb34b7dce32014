"""pb_utils.InferenceResponse (outputs, or an error, and parameters), and the parameters as Triton keeps them on
requests and responses: a JSON object in a string."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from modelhost.backends.python.pb_utils.errors import TritonError, TritonModelException
from modelhost.backends.python.pb_utils.tensors import Tensor


def parameters_json(parameters: Mapping[str, Any] | str | None) -> str:
    """Request/response parameters as Triton keeps them: a JSON object in a string."""
    if parameters is None:
        return "{}"
    if isinstance(parameters, str):
        # Not in Triton (it takes a dict); a JSON object is accepted as it is, e.g. parameters passed through.
        try:
            decoded = json.loads(parameters)
        except ValueError as e:
            raise TritonModelException(f"parameters must be a JSON object: {e}") from e
        if not isinstance(decoded, dict):
            raise TritonModelException(f"Expect dict, got {type(decoded)}")
        return parameters
    if not isinstance(parameters, Mapping):
        raise TritonModelException(f"Expect dict, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(f"Expect parameters keys to have type str, found type {type(key)}")
        if not isinstance(value, bool | int | str):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return json.dumps(dict(parameters))


class InferenceResponse:
    """`InferenceResponse(output_tensors=[...], error=None, parameters={})`: a response, or an error response."""

    def __init__(
        self,
        output_tensors: Sequence[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: Mapping[str, bool | int | str] | str | None = None,
    ) -> None:
        if output_tensors is None:
            output_tensors = []
        # A list, as nearly every model passes, spares the (slow) abstract Sequence check.
        if type(output_tensors) is not list and (
            isinstance(output_tensors, str | bytes) or not isinstance(output_tensors, Sequence)
        ):
            raise TypeError(
                f"InferenceResponse(): output_tensors must be a list of pb_utils.Tensor, not "
                f"{type(output_tensors).__name__}"
            )
        for tensor in output_tensors:
            if not isinstance(tensor, Tensor):
                raise TypeError(
                    f"InferenceResponse(): output_tensors must be a list of pb_utils.Tensor, found "
                    f"{type(tensor).__name__}"
                )
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(
                f"InferenceResponse(): error must be a pb_utils.TritonError, not {type(error).__name__}"
            )
        self._output_tensors = list(output_tensors)
        self._error = error
        self._parameters = parameters_json(parameters)

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        """The parameters as a JSON object in a string."""
        return self._parameters

    def __repr__(self) -> str:
        if self._error is not None:
            return f"InferenceResponse(error={self._error!r})"
        return f"InferenceResponse(output_tensors={self._output_tensors!r})"


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None

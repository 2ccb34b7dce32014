"""The core's own request and response types: one representation for every frontend.

Frontends decode the wire format once into these and encode the answer once from them. Tensor data is a numpy
array built over the received buffer (never a Python list on the binary and gRPC paths); BYTES tensors are numpy
object arrays of `bytes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy.typing as npt

# A request or response parameter: what KServe parameters may hold.
ParamValue = bool | int | float | str
Parameters = dict[str, ParamValue]

# Triton's reserved request parameters that the frontends turn into request fields and leave out of
# `InferenceRequest.parameters`.
RESERVED_PARAMETERS = frozenset({"priority", "timeout", "binary_data_output", "headers"})
# Triton's reserved sequence parameters (`sequence_id`, `sequence_start`, `sequence_end`) stay in `parameters`:
# the sequence batcher reads them there (backends/sequence.py `sequence_params`), an ensemble hands
# them on to its steps, and a python model sees them as correlation_id() and flags(), not in parameters().
SEQUENCE_PARAMETERS = frozenset({"sequence_id", "sequence_start", "sequence_end"})
# The response parameter that marks the last response of a request in a stream, as Triton names it.
FINAL_RESPONSE = "triton_final_response"
# The request parameter asking for a final response even when it carries no outputs.
EMPTY_FINAL_RESPONSE = "triton_enable_empty_final_response"


@dataclass(frozen=True, slots=True)
class ShmWindow:
    """Bytes of a client's registered shared-memory region: the engine, which holds the regions, reads an input
    from it and writes an output into it."""

    region: str
    offset: int
    byte_size: int


@dataclass(slots=True)
class Tensor:
    name: str
    datatype: str  # KServe name: FP32, INT64, BYTES, ...
    shape: list[int]
    data: npt.NDArray[Any]
    parameters: Parameters = field(default_factory=dict)
    # An input: the window its data is in (`data` is empty until the engine reads it). An output: the window the
    # engine wrote it into (its frontend sends only its metadata).
    shm: ShmWindow | None = None


@dataclass(slots=True)
class RequestedOutput:
    name: str
    # HTTP only: None = decided by the request-level `binary_data_output` parameter.
    binary: bool | None = None
    classification: int = 0
    parameters: Parameters = field(default_factory=dict)
    # The window of a client's shared-memory region the output is to be written into.
    shm: ShmWindow | None = None


@dataclass(slots=True)
class InferenceRequest:
    model_name: str
    model_version: str = ""  # "" = chosen by the version policy
    id: str = ""
    inputs: list[Tensor] = field(default_factory=list)
    # Empty = every output of the model.
    outputs: list[RequestedOutput] = field(default_factory=list)
    parameters: Parameters = field(default_factory=dict)
    # Scheduling parameters (Triton's reserved `priority` and `timeout`): 0 = the model's defaults.
    priority: int = 0
    timeout_us: int = 0
    # The request's trace (modelhost.observability.tracing.Trace) when tracing sampled it; set by the engine.
    trace: Any = None
    # Some input or requested output lies in a client's shared memory (`shm` set): the decoder says so, to spare
    # the engine a look at every tensor of every request.
    shared_memory: bool = False


def request_from_wire(
    model_name: str,
    model_version: str,
    request_id: str,
    inputs: list[Tensor],
    outputs: list[RequestedOutput],
    params: Parameters,
    shared_memory: bool = False,
) -> InferenceRequest:
    """A request as a frontend decoded it: Triton's reserved `priority` and `timeout` parameters become its
    scheduling fields, and the reserved parameters stay out of `parameters` (HTTP and gRPC alike)."""
    return InferenceRequest(
        model_name=model_name,
        model_version=model_version,
        id=request_id,
        inputs=inputs,
        outputs=outputs,
        priority=int(params.get("priority", 0)),
        timeout_us=int(params.get("timeout", 0)),
        parameters={k: v for k, v in params.items() if k not in RESERVED_PARAMETERS},
        shared_memory=shared_memory,
    )


@dataclass(slots=True)
class InferenceResponse:
    model_name: str
    model_version: str
    id: str
    outputs: list[Tensor]
    parameters: Parameters = field(default_factory=dict)
    # A decoupled model's error response in the middle of a stream (the request goes on); None otherwise.
    error: BaseException | None = None


__all__ = [
    "RESERVED_PARAMETERS",
    "SEQUENCE_PARAMETERS",
    "InferenceRequest",
    "InferenceResponse",
    "ParamValue",
    "Parameters",
    "RequestedOutput",
    "ShmWindow",
    "Tensor",
    "request_from_wire",
]

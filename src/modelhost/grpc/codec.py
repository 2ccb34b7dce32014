"""ModelInferRequest / ModelInferResponse <-> core types. Raw contents are read over the message's buffers."""

from __future__ import annotations

from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2

from modelhost.datatypes import WIRE_TO_NUMPY
from modelhost.errors import InvalidArgument, Unsupported
from modelhost.tensor_codec import array_from_raw, element_count, raw_bytes
from modelhost.types import InferenceRequest, InferenceResponse, Parameters, RequestedOutput, Tensor

# Which InferTensorContents field holds each datatype (FP16 and BF16 travel raw only).
_CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
_RESERVED = {"sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "binary_data_output", "headers"}


def parameter_value(param: Any) -> bool | int | float | str:
    which = param.WhichOneof("parameter_choice")
    if which is None:
        return ""
    value: bool | int | float | str = getattr(param, which)
    return value


def _parameters(params: Any, where: str) -> Parameters:
    out: Parameters = {}
    for key, param in params.items():
        if key.startswith("triton_"):
            raise InvalidArgument(
                f"parameter keys starting with 'triton_' are reserved for Triton usage and should not be "
                f"specified: '{key}'"
            )
        out[key] = parameter_value(param)
    return out


def _typed_contents(tensor: Any, shape: list[int]) -> Any:
    name, datatype = tensor.name, tensor.datatype
    field = _CONTENTS_FIELD.get(datatype)
    if field is None:
        raise InvalidArgument(f"input '{name}' of type {datatype} must be sent in raw_input_contents")
    values = getattr(tensor.contents, field)
    count = element_count(name, shape)
    if len(values) != count:
        raise InvalidArgument(
            f"unexpected number of elements for input '{name}': expected {count} for shape {shape}, "
            f"got {len(values)} in {field}"
        )
    if datatype == "BYTES":
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(shape)
    try:
        return np.array(values, dtype=WIRE_TO_NUMPY[datatype]).reshape(shape)
    except OverflowError as e:
        raise InvalidArgument(f"data of input '{name}' does not fit in {datatype}: {e}") from e


def decode_request(msg: Any) -> InferenceRequest:
    raw = msg.raw_input_contents
    if raw and len(raw) != len(msg.inputs):
        raise InvalidArgument(
            f"expected {len(msg.inputs)} raw_input_contents (one per input), got {len(raw)}"
        )
    inputs: list[Tensor] = []
    for i, tensor in enumerate(msg.inputs):
        name, datatype = tensor.name, tensor.datatype
        if datatype not in WIRE_TO_NUMPY:
            raise InvalidArgument(f"invalid datatype '{datatype}' for input '{name}'")
        shape = [int(d) for d in tensor.shape]
        element_count(name, shape)
        if "shared_memory_region" in tensor.parameters:
            raise Unsupported("the system shared memory extension is not supported yet")
        if raw:
            if tensor.HasField("contents"):
                raise InvalidArgument(
                    f"contents field must not be specified when using raw_input_contents for '{name}' "
                    f"for model '{msg.model_name}'"
                )
            data = array_from_raw(name, datatype, shape, memoryview(raw[i]))
        else:
            data = _typed_contents(tensor, shape)
        inputs.append(Tensor(name, datatype, shape, data))
    outputs: list[RequestedOutput] = []
    for out in msg.outputs:
        if "shared_memory_region" in out.parameters:
            raise Unsupported("the system shared memory extension is not supported yet")
        count = 0
        if "classification" in out.parameters:
            value = parameter_value(out.parameters["classification"])
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidArgument(f"'classification' of output '{out.name}' must be an integer")
            count = value
        outputs.append(RequestedOutput(out.name, None, count))
    params = _parameters(msg.parameters, "the request")
    return InferenceRequest(
        model_name=msg.model_name,
        model_version=msg.model_version,
        id=msg.id,
        inputs=inputs,
        outputs=outputs,
        parameters={k: v for k, v in params.items() if k not in _RESERVED},
    )


def encode_response(response: InferenceResponse) -> Any:
    msg = service_pb2.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    for tensor in response.outputs:
        out = msg.outputs.add()
        out.name = tensor.name
        out.datatype = tensor.datatype
        out.shape.extend(tensor.shape)
        msg.raw_output_contents.append(raw_bytes(tensor.datatype, tensor.data))
    for key, value in response.parameters.items():
        param = msg.parameters[key]
        if isinstance(value, bool):
            param.bool_param = value
        elif isinstance(value, int):
            param.int64_param = value
        elif isinstance(value, float):
            param.double_param = value
        else:
            param.string_param = value
    return msg

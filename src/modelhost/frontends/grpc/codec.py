"""ModelInferRequest / ModelInferResponse <-> core types. Raw contents are read over the message's buffers.

Malformed requests are refused with Triton's gRPC frontend wording (grpc/infer_handler.cc), checked in its order.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2

from modelhost.datatypes import WIRE_ELEMENT_SIZE, WIRE_TO_NUMPY
from modelhost.errors import InvalidArgument
from modelhost.tensor_codec import (
    array_from_raw,
    byte_size_mismatch,
    element_count,
    raw_bytes,
    string_count_mismatch,
)
from modelhost.types import (
    InferenceRequest,
    InferenceResponse,
    Parameters,
    RequestedOutput,
    ShmWindow,
    Tensor,
    request_from_wire,
)

# The data of an input in shared memory until the engine reads it.
_UNREAD = np.empty(0, dtype=np.uint8)
# The InferTensorContents fields in the order Triton reads them, each with the datatype its values carry
# (int_contents and uint_contents also carry the 8- and 16-bit types). FP16 and BF16 travel raw only.
_CONTENTS_FIELDS = (
    "bool_contents",
    "int_contents",
    "int64_contents",
    "uint_contents",
    "uint64_contents",
    "fp32_contents",
    "fp64_contents",
    "bytes_contents",
)
_FIELD_TYPE = {
    "bool_contents": "BOOL",
    "int_contents": "INT32",
    "int64_contents": "INT64",
    "uint_contents": "UINT32",
    "uint64_contents": "UINT64",
    "fp32_contents": "FP32",
    "fp64_contents": "FP64",
    "bytes_contents": "BYTES",
}
_NARROW = {
    "INT8": "int_contents",
    "INT16": "int_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
}
# Read by the streaming frontend; the one `triton_` request parameter a client may set.
_ALLOWED_TRITON = {"triton_enable_empty_final_response"}
# What std::stol accepts: leading blanks, a sign, digits (Triton parses model_version with it).
_VERSION = re.compile(r"\s*([+-]?\d+)\s*")


def parameter_value(param: Any) -> bool | int | float | str:
    which = param.WhichOneof("parameter_choice")
    if which is None:
        return ""
    value: bool | int | float | str = getattr(param, which)
    return value


def _wrong_type(key: str, expected: str) -> InvalidArgument:
    return InvalidArgument(f"invalid value type for '{key}' parameter, expected {expected}.")


def _parameters(params: Any) -> Parameters:
    """The request's parameters, with the value types Triton requires of its reserved ones."""
    out: Parameters = {}
    for key, param in params.items():
        which = param.WhichOneof("parameter_choice")
        if key == "sequence_id":
            if which not in ("int64_param", "string_param"):
                raise _wrong_type(key, "int64_param or string_param")
        elif key in ("sequence_start", "sequence_end"):
            if which != "bool_param":
                raise _wrong_type(key, "bool_param")
        elif key == "priority":
            if which not in ("int64_param", "uint64_param"):
                raise _wrong_type(key, "int64_param or uint64_param")
            if param.int64_param < 0:
                raise InvalidArgument("invalid value for 'priority', expected value >= 0.")
        elif key == "timeout":
            if which != "int64_param":
                raise _wrong_type(key, "int64_param")
        elif key.startswith("triton_") and key not in _ALLOWED_TRITON:
            raise _triton_reserved()
        elif which not in ("int64_param", "bool_param", "string_param", "double_param"):
            raise _wrong_type(key, "int64_param, bool_param, or string_param")
        out[key] = parameter_value(param)
    return out


def _check_input(name: str, datatype: str, tensor_params: Any) -> None:
    """An input's own parameters hold no `triton_` key, and its datatype is one modelhost knows."""
    for key in tensor_params:
        if key.startswith("triton_"):
            raise _triton_reserved(request_level=False)
    if datatype not in WIRE_TO_NUMPY:
        raise InvalidArgument(f"invalid datatype for input {name}")


def _triton_reserved(request_level: bool = True) -> InvalidArgument:
    if not request_level:
        # Triton checks only the request's own parameters; those of inputs and outputs are reserved alike here.
        return InvalidArgument(
            "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."
        )
    return InvalidArgument(
        "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting "
        f"with 'triton_' are allowed: {', '.join(sorted(_ALLOWED_TRITON))}"
    )


def parse_model_version(text: str) -> str:
    """The model version as Triton reads it (any RPC naming one): "" for the policy's choice, else an integer >= 0."""
    if not text:
        return ""
    m = _VERSION.fullmatch(text)
    if m is None or not -(2**63) <= int(m.group(1)) < 2**63:
        raise InvalidArgument(
            f"failed to get model version from specified version string '{text}' (details: stol), version "
            "should be an integral value > 0"
        )
    version = int(m.group(1))
    if version < 0:
        raise InvalidArgument(
            f"invalid model version specified '{text}' , version should be an integral value > 0"
        )
    return str(version)


def _typed_contents(tensor: Any, shape: list[int], model: str, request_id: str) -> Any:
    """Data from the typed `contents` fields, checked as Triton checks them: one field, of the input's type."""
    name, datatype = tensor.name, tensor.datatype
    field: str | None = None
    for candidate in _CONTENTS_FIELDS:
        if not len(getattr(tensor.contents, candidate)):
            continue
        if field is not None:
            raise InvalidArgument(
                f"unexpected explicit tensor data for input tensor '{name}' for model '{model}', binary data "
                "was already supplied."
            )
        carried = datatype if _NARROW.get(datatype) == candidate else _FIELD_TYPE[candidate]
        if carried != datatype:
            raise InvalidArgument(
                f"unexpected explicit tensor data for input tensor '{name}' for model '{model}' of type "
                f"'{carried}', expected datatype '{datatype}'"
            )
        field = candidate
    count = element_count(name, shape, model, request_id)
    values = getattr(tensor.contents, field)[:] if field is not None else []  # a list: see decode_request
    if datatype == "BYTES":
        if len(values) != count:
            raise string_count_mismatch(name, count, len(values), model, request_id)
        array = np.empty(count, dtype=object)
        array[:] = values
        return array.reshape(shape)
    itemsize = WIRE_ELEMENT_SIZE[datatype]
    assert itemsize is not None
    if len(values) != count:
        raise byte_size_mismatch(name, count * itemsize, len(values) * itemsize, model, request_id)
    try:
        return np.array(values, dtype=WIRE_TO_NUMPY[datatype]).reshape(shape)
    except OverflowError as e:
        # Triton keeps the low bytes of an int_contents value for INT8/INT16 (300 becomes 44 as UINT8);
        # a value that does not fit is refused instead.
        raise InvalidArgument(f"a value of input '{name}' is out of range for {datatype}") from e


_SHM_KEYS = ("shared_memory_region", "shared_memory_offset", "shared_memory_byte_size")


def _shm_window(params: Any, tensor: str) -> ShmWindow | None:
    """The region, offset and byte size a tensor's parameters name (None: not in shared memory), checked in
    Triton's words (grpc/infer_handler.cc)."""
    if not any(k in params for k in _SHM_KEYS):
        return None
    values: dict[str, Any] = {}
    for key in _SHM_KEYS:
        if key in params:
            expected = "string_param" if key == "shared_memory_region" else "int64_param"
            param = params[key]
            if param.WhichOneof("parameter_choice") != expected:
                raise InvalidArgument(
                    f"invalid value type for '{key}' parameter for tensor '{tensor}', expected {expected}."
                )
            values[key] = getattr(param, expected)
    if "shared_memory_region" not in values:
        key = "shared_memory_offset" if "shared_memory_offset" in values else "shared_memory_byte_size"
        raise InvalidArgument(
            f"'{key}' can not be specified without 'shared_memory_region' parameter for tensor '{tensor}'"
        )
    if "shared_memory_byte_size" not in values:
        raise InvalidArgument(
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor "
            f"'{tensor}'"
        )
    region = values["shared_memory_region"]
    offset = values.get("shared_memory_offset", 0)
    byte_size = values["shared_memory_byte_size"]
    # Triton reads these as size_t: a negative value is a huge one.
    if offset < 0:
        raise InvalidArgument(f"Invalid offset for shared memory region: '{region}'")
    if byte_size < 0:
        raise InvalidArgument(f"Invalid offset + byte size for shared memory region: '{region}'")
    return ShmWindow(region, offset, byte_size)


def decode_request(msg: Any) -> InferenceRequest:
    """Inputs and outputs in shared memory come out as `ShmWindow` refs, which the engine resolves."""
    # The hot path of every gRPC inference: each protobuf field is read once (a read builds a Python object), the
    # per-tensor checks of parameters run only when there are parameters at all, and repeated fields are sliced
    # into lists rather than iterated (iterating a upb container ends on a formatted IndexError, ~1 us each).
    model, request_id = msg.model_name, msg.id
    version = parse_model_version(msg.model_version)
    # Parameters before data, as Triton sets a request's metadata before its inputs.
    params = _parameters(msg.parameters) if msg.parameters else {}
    raw = msg.raw_input_contents
    tensors = msg.inputs[:]
    n_raw = len(raw)
    if n_raw > len(tensors):
        # Triton ignores the extra blobs; more data than inputs is a client's mistake worth naming.
        raise InvalidArgument(
            f"unexpected additional input data for model '{model}': {n_raw} raw_input_contents for "
            f"{len(tensors)} inputs"
        )
    inputs: list[Tensor] = []
    shared_memory = False
    i = -1  # the raw_input_contents entry of the input: inputs in shared memory have none
    for tensor in tensors:
        name, datatype, tensor_params = tensor.name, tensor.datatype, tensor.parameters
        window = _shm_window(tensor_params, name) if tensor_params else None
        has_contents = tensor.HasField("contents")
        if window is not None:
            if has_contents:
                raise InvalidArgument(
                    f"unexpected 'content' provided when using shared memory for input tensor '{name}' for model "
                    f"'{model}'"
                )
            _check_input(name, datatype, tensor_params)
            inputs.append(Tensor(name, datatype, tensor.shape[:], _UNREAD, shm=window))
            shared_memory = True
            continue
        i += 1
        if has_contents and n_raw:
            raise InvalidArgument(
                f"contents field must not be specified when using raw_input_contents for '{name}' "
                f"for model '{model}'"
            )
        if not has_contents and i >= n_raw:
            raise InvalidArgument(
                f"unable to find data for input tensor '{name}' for model '{model}' in request."
            )
        _check_input(name, datatype, tensor_params)
        shape = tensor.shape[:]  # a list of Python ints
        if n_raw:
            # raw[i] is the one copy out of the message (upb hands bytes fields out as new bytes objects); numpy
            # and the BYTES parser read it in place (a memoryview would make the BYTES parser copy it again).
            data = array_from_raw(name, datatype, shape, raw[i], model, request_id)
        else:
            data = _typed_contents(tensor, shape, model, request_id)
        inputs.append(Tensor(name, datatype, shape, data))
    outputs: list[RequestedOutput] = []
    for out in msg.outputs[:]:
        out_params = out.parameters
        count = 0
        window = None
        if out_params:
            window = _shm_window(out_params, out.name)
            if window is not None:
                if "classification" in out_params:
                    raise InvalidArgument("output can't set both 'shared_memory_region' and 'classification'")
                shared_memory = True
            for key in out_params:
                if key.startswith("triton_"):
                    raise _triton_reserved(request_level=False)
            if "classification" in out_params:
                param = out_params["classification"]
                if param.WhichOneof("parameter_choice") != "int64_param":
                    raise InvalidArgument(
                        "invalid value type for 'classification' parameter, expected int64_param"
                    )
                count = param.int64_param
                if count < 0:
                    raise InvalidArgument("invalid value for 'classification' parameter, expected >= 0")
        outputs.append(RequestedOutput(out.name, None, count, shm=window))
    return request_from_wire(model, version, request_id, inputs, outputs, params, shared_memory)


def encode_response(response: InferenceResponse) -> Any:
    """An output the engine wrote into shared memory has its raw_output_contents entry left empty (as in
    Triton: the entries keep their indices)."""
    msg = service_pb2.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    for tensor in response.outputs:
        out = msg.outputs.add()
        out.name = tensor.name
        out.datatype = tensor.datatype
        out.shape.extend(tensor.shape)
        if tensor.shm is not None:
            msg.raw_output_contents.append(b"")
        else:
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

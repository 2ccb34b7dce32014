"""KServe v2 inference bodies over HTTP: JSON, the binary tensor data extension, and raw binary requests.

Decoded once into core types (tensors over the received buffer, never Python lists on the binary path) and
encoded once from them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import orjson

from modelhost.datatypes import WIRE_ELEMENT_SIZE, WIRE_TO_NUMPY
from modelhost.engine_api import ModelSignature
from modelhost.errors import InvalidArgument
from modelhost.io_specs import format_shape
from modelhost.tensor_codec import array_from_raw, byte_size_mismatch, element_count, id_prefix, raw_bytes
from modelhost.types import (
    InferenceRequest,
    InferenceResponse,
    Parameters,
    RequestedOutput,
    ShmWindow,
    Tensor,
    request_from_wire,
)

# The JSON type each reserved request parameter must have.
_BOOLEAN_PARAMS = {"sequence_start", "sequence_end", "binary_data_output"}
_UNSIGNED_PARAMS = {"priority", "timeout"}
_NO_JSON = {"FP16", "BF16"}
# The data of an input in shared memory until the engine reads it.
_UNREAD: npt.NDArray[Any] = np.empty(0, dtype=np.uint8)
_TRITON_PREFIX_RESERVED = (
    "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."
)


@dataclass(slots=True)
class DecodedInfer:
    request: InferenceRequest
    # Outputs answered as binary: None = every output (raw binary requests and binary_data_output).
    binary_all: bool


def _parse_error(field: str, reason: str) -> InvalidArgument:
    # Triton answers these with 500 "Unable to parse '<field>': <rapidjson's complaint>"; a client's malformed
    # request is a 400 here, under the same prefix so that code matching on it still matches.
    return InvalidArgument(f"Unable to parse '{field}': {reason}")


def _is_unsigned(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64


def _object(value: Any, field: str, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _parse_error(field, f"{where} must be a JSON object")
    return value


def _no_triton_keys(params: dict[str, Any]) -> None:
    # Triton checks only the request's own parameters; those of inputs and outputs are reserved alike here.
    for key in params:
        if key.startswith("triton_"):
            raise InvalidArgument(_TRITON_PREFIX_RESERVED)


def _request_parameters(raw: Any) -> Parameters:
    params = _object(raw, "parameters", "the request's 'parameters'")
    _no_triton_keys(params)
    for key, value in params.items():
        if key in _BOOLEAN_PARAMS:
            if not isinstance(value, bool):
                raise _parse_error(key, "expected a boolean")
        elif key in _UNSIGNED_PARAMS:
            if not _is_unsigned(value):
                raise _parse_error(key, "expected an unsigned integer")
        elif key == "sequence_id":
            if not (_is_unsigned(value) or isinstance(value, str)):
                raise _parse_error(key, "expected an unsigned integer or a string")
        elif not isinstance(value, bool | int | float | str):
            raise InvalidArgument(
                f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
            )
    return params


def _shape(name: str, raw: Any) -> list[int]:
    if not isinstance(raw, list) or not all(_is_unsigned(d) and d < 2**63 for d in raw):
        raise _parse_error("shape", f"the shape of input '{name}' must be an array of non-negative integers")
    return raw


def _data_mismatch(name: str, shape: list[int], count: int) -> InvalidArgument:
    return _parse_error(
        "data",
        f"Shape does not match true shape of 'data' field: input '{name}' of shape {format_shape(shape)} "
        f"needs {count} elements",
    )


def _out_of_range(name: str, datatype: str) -> InvalidArgument:
    return _parse_error("data", f"a value of input '{name}' is out of range for {datatype}")


def _json_data(
    name: str, datatype: str, shape: list[int], data: Any, model: str, request_id: str
) -> npt.NDArray[Any]:
    if datatype in _NO_JSON:
        raise InvalidArgument(
            f"receiving {datatype} data via JSON is not supported. Please use the binary data format for input "
            f"{name}"
        )
    count = element_count(name, shape, model, request_id)
    if not isinstance(data, list):
        raise _parse_error("data", f"the data of input '{name}' must be a JSON array")
    if datatype == "BYTES":
        try:
            flat = np.asarray(data, dtype=object).ravel()
        except ValueError as e:
            raise _data_mismatch(name, shape, count) from e
        if flat.size != count:
            raise _data_mismatch(name, shape, count)
        out = np.empty(count, dtype=object)
        for i, item in enumerate(flat):
            if not isinstance(item, str):
                raise _parse_error("data", f"the data of BYTES input '{name}' must be strings")
            out[i] = item.encode("utf-8")
        return out.reshape(shape)
    try:
        loose = np.asarray(data)
    except ValueError as e:  # ragged nesting
        raise _data_mismatch(name, shape, count) from e
    if loose.size != count:
        raise _data_mismatch(name, shape, count)
    if count == 0:
        return np.empty(shape, dtype=WIRE_TO_NUMPY[datatype])
    target = WIRE_TO_NUMPY[datatype]
    kind = loose.dtype.kind
    if target.kind == "b":
        if kind != "b":
            raise _parse_error("data", f"the data of BOOL input '{name}' must be true or false")
    elif target.kind in "iu":
        info = np.iinfo(cast("np.dtype[np.integer[Any]]", target))
        if kind not in "iu":
            # Mixing negative and past-int64 integers gives float64 (or objects past 64 bits): when every value
            # is an integer in JSON, they are checked one by one.
            values = np.asarray(data, dtype=object).ravel() if kind in "fO" else None
            if values is None or not all(type(v) is int for v in values):
                raise _parse_error("data", f"the data of {datatype} input '{name}' must be integers")
            if min(values) < info.min or max(values) > info.max:
                raise _out_of_range(name, datatype)
            return np.array(values.tolist(), dtype=target).reshape(shape)
        # numpy would wrap 300 into a UINT8 silently (as Triton does): a value that does not fit is refused.
        if loose.min() < info.min or loose.max() > info.max:
            raise _out_of_range(name, datatype)
    elif kind not in "iuf":
        raise _parse_error("data", f"the data of {datatype} input '{name}' must be numbers")
    return np.asarray(loose, dtype=target).reshape(shape)


def _shm_parameter(params: dict[str, Any], key: str, default: int | None = None) -> int | None:
    value = params.get(key, default)
    if value is not None and not _is_unsigned(value):
        raise _parse_error(key, "attempt to access JSON non-unsigned-integer as unsigned-integer")
    return value


def _shm_window(params: dict[str, Any], tensor: str) -> ShmWindow:
    """The region, offset and byte size a tensor's parameters name, checked as Triton checks them (the engine,
    which holds the regions, checks the region and the window)."""
    region = params["shared_memory_region"]
    if not isinstance(region, str):
        raise _parse_error("shared_memory_region", "attempt to access JSON non-string as string")
    offset = _shm_parameter(params, "shared_memory_offset", 0)
    byte_size = _shm_parameter(params, "shared_memory_byte_size")
    if byte_size is None:
        raise InvalidArgument(
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor "
            f"'{tensor}'"
        )
    assert offset is not None
    return ShmWindow(region, offset, byte_size)


# Decoded request headers kept for reuse, by (model, version, header bytes): perf_analyzer, tritonclient loops and
# most services send the same JSON header with every request, only the binary tensors after it change. Validating
# a header cost more than the rest of decoding (benchmarks/README.md, issue 33). Headers are kept up to
# `_PLAN_HEADER_BYTES` each, and `_PLAN_COUNT` of them: the cache is emptied when it is full, so a client that
# never repeats a header costs one insertion per request and memory stays bounded (a few MiB at most: a header's
# JSON data decoded is kept with it).
_PLAN_HEADER_BYTES = 4096
_PLAN_COUNT = 256
_plans: dict[tuple[str, str, bytes], _HeaderPlan] = {}


@dataclass(slots=True)
class _InputPlan:
    name: str
    datatype: str
    shape: list[int]
    # Exactly one of the three: the bytes it takes from the binary part, its JSON data (decoded), or its window.
    binary_size: int = -1
    data: npt.NDArray[Any] | None = None
    window: ShmWindow | None = None
    # For a fixed-size datatype whose shape is valid: the byte size that shape needs, and its numpy type (None:
    # array_from_raw runs, and raises, on each request).
    expected_size: int = -1
    dtype: np.dtype[Any] | None = None


@dataclass(slots=True)
class _HeaderPlan:
    """A request's JSON header, validated: what each request with the same header is built from."""

    model_name: str
    version: str
    request_id: str
    inputs: list[_InputPlan]
    outputs: list[tuple[str, bool | None, int, ShmWindow | None]]
    params: Parameters
    binary_all: bool
    shared_memory: bool

    def request(self, binary: memoryview | None) -> DecodedInfer:
        """A new request from the header and this request's binary part (its own tensors and objects: the
        engine and frontends may change them)."""
        model_name, request_id = self.model_name, self.request_id
        available = 0 if binary is None else len(binary)
        offset = 0
        inputs: list[Tensor] = []
        for plan in self.inputs:
            name = plan.name
            if plan.window is not None:
                inputs.append(Tensor(name, plan.datatype, list(plan.shape), _UNREAD, shm=plan.window))
                continue
            if plan.data is not None:
                data = plan.data.copy()
            else:
                size = plan.binary_size
                if offset + size > available:
                    raise InvalidArgument(
                        f"unexpected size for input '{name}', expecting {offset + size - available} additional "
                        f"bytes for model '{model_name}'"
                    )
                assert binary is not None
                if plan.dtype is None:
                    data = array_from_raw(
                        name,
                        plan.datatype,
                        plan.shape,
                        binary[offset : offset + size],
                        model_name,
                        request_id,
                    )
                elif size != plan.expected_size:
                    raise byte_size_mismatch(name, plan.expected_size, size, model_name, request_id)
                else:
                    data = np.frombuffer(binary[offset : offset + size], dtype=plan.dtype).reshape(plan.shape)
                offset += size
            inputs.append(Tensor(name, plan.datatype, list(plan.shape), data))
        if offset != available:
            raise InvalidArgument(f"unexpected additional input data for model '{model_name}'")
        outputs = [
            RequestedOutput(name, binary_, count, shm=window) for name, binary_, count, window in self.outputs
        ]
        request = request_from_wire(
            model_name, self.version, request_id, inputs, outputs, self.params, self.shared_memory
        )
        return DecodedInfer(request, self.binary_all)


def decode_json_request(
    model_name: str,
    version: str,
    header: bytes | memoryview,
    binary: memoryview | None,
) -> DecodedInfer:
    """Inputs and outputs in shared memory come out as `ShmWindow` refs, which the engine resolves."""
    if len(header) > _PLAN_HEADER_BYTES:
        return _plan_header(model_name, version, header).request(binary)
    key = (model_name, version, bytes(header))
    plan = _plans.get(key)
    if plan is None:
        plan = _plan_header(model_name, version, header)
        if len(_plans) >= _PLAN_COUNT:
            _plans.clear()
        _plans[key] = plan
    return plan.request(binary)


def _plan_header(model_name: str, version: str, header: bytes | memoryview) -> _HeaderPlan:
    """The header checked as Triton checks it (a JSON "data" input decoded); the binary part is checked per
    request."""
    try:
        doc = orjson.loads(header)
    except orjson.JSONDecodeError as e:
        raise InvalidArgument(f"failed to parse the request JSON buffer: {e}") from e
    if not isinstance(doc, dict):
        raise _parse_error("inputs", "the request must be a JSON object")
    request_id = doc.get("id", "")
    if not isinstance(request_id, str):
        raise _parse_error("id", "expected a string")
    params = _request_parameters(doc.get("parameters"))
    binary_all = params.get("binary_data_output") is True
    raw_inputs = doc.get("inputs")
    if not isinstance(raw_inputs, list):
        raise _parse_error("inputs", "the request must hold an 'inputs' array")
    shared_memory = False
    inputs: list[_InputPlan] = []
    for raw in raw_inputs:
        if not isinstance(raw, dict):
            raise _parse_error("inputs", "each input must be a JSON object")
        name = raw.get("name")
        if not isinstance(name, str):
            raise _parse_error("name", "each input must have a string 'name'")
        datatype = raw.get("datatype")
        if not isinstance(datatype, str):
            raise _parse_error("datatype", f"input '{name}' must have a string 'datatype'")
        if datatype not in WIRE_TO_NUMPY:
            raise InvalidArgument(f"invalid datatype for input {name}")
        shape = _shape(name, raw.get("shape"))
        in_params = _object(raw.get("parameters"), "parameters", f"the 'parameters' of input '{name}'")
        _no_triton_keys(in_params)
        # A JSON null counts as absent, as in Triton.
        sources = ["data"] if raw.get("data") is not None else []
        sources += [k for k in ("binary_data_size", "shared_memory_region") if k in in_params]
        if len(sources) != 1:
            but = "But set " + " ".join(f"'{k}'" for k in sources) if sources else "But no field is set"
            raise InvalidArgument(
                "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
                f"'shared_memory_region' in 'parameters'. {but}"
            )
        if sources[0] == "shared_memory_region":
            inputs.append(_InputPlan(name, datatype, shape, window=_shm_window(in_params, name)))
            shared_memory = True
        elif sources[0] == "data":
            data = _json_data(name, datatype, shape, raw["data"], model_name, request_id)
            inputs.append(_InputPlan(name, datatype, shape, data=data))
        else:
            size = in_params["binary_data_size"]
            if not _is_unsigned(size):
                raise _parse_error("binary_data_size", f"expected an unsigned integer for input '{name}'")
            inputs.append(_binary_input(name, datatype, shape, size, model_name, request_id))
    outputs: list[tuple[str, bool | None, int, ShmWindow | None]] = []
    raw_outputs = doc.get("outputs")
    if raw_outputs is None:
        raw_outputs = []
    if not isinstance(raw_outputs, list):
        raise _parse_error("outputs", "expected a JSON array")
    for raw in raw_outputs:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise _parse_error("name", "each requested output must be a JSON object with a string 'name'")
        out_name = raw["name"]
        out_params = _object(raw.get("parameters"), "parameters", f"the 'parameters' of output '{out_name}'")
        _no_triton_keys(out_params)
        want_binary = out_params.get("binary_data")
        if want_binary is not None and not isinstance(want_binary, bool):
            raise _parse_error("binary_data", f"expected a boolean for output '{out_name}'")
        count = out_params.get("classification", 0)
        if not _is_unsigned(count):
            raise _parse_error("classification", f"expected an unsigned integer for output '{out_name}'")
        window = None
        if "shared_memory_region" in out_params:
            window = _shm_window(out_params, out_name)
            if "classification" in out_params:
                raise InvalidArgument("Output can't set both 'shared_memory_region' and 'classification'")
            if want_binary:
                raise InvalidArgument("Output can't set both 'shared_memory_region' and 'binary_data'")
            shared_memory = True
        outputs.append((out_name, want_binary, count, window))
    return _HeaderPlan(model_name, version, request_id, inputs, outputs, params, binary_all, shared_memory)


def _binary_input(
    name: str, datatype: str, shape: list[int], size: int, model_name: str, request_id: str
) -> _InputPlan:
    plan = _InputPlan(name, datatype, shape, binary_size=size)
    itemsize = WIRE_ELEMENT_SIZE[datatype]
    if itemsize is not None:  # BYTES is split per request; a shape that cannot be is refused per request
        try:
            plan.expected_size = element_count(name, shape, model_name, request_id) * itemsize
        except InvalidArgument:
            return plan
        plan.dtype = WIRE_TO_NUMPY[datatype]
    return plan


def decode_raw_request(model: ModelSignature, version: str, body: bytes) -> DecodedInfer:
    """`Inference-Header-Content-Length: 0`: the whole body is the one input of a one-input model.

    The shape is deduced from the config as Triton does (batch 1, the one variable dim from the body size),
    with Triton's messages when it cannot be.
    """
    prefix = id_prefix("")
    if len(model.inputs) != 1:
        raise InvalidArgument(
            prefix
            + f"Raw request must only have 1 input (found 1) to be deduced but got {len(model.inputs)} "
            f"inputs in '{model.name}' model configuration"
        )
    spec = next(iter(model.inputs.values()))
    dims = list(spec.dims)
    batch = [1] if model.max_batch_size > 0 else []
    if dims.count(-1) > 1:
        raise InvalidArgument(
            prefix
            + f"The shape of the raw input '{spec.name}' can not be deduced because there are more than "
            "one variable-sized dimension"
        )
    known = math.prod(d for d in dims if d != -1)
    if spec.datatype == "BYTES":
        if -1 in dims or known != 1:
            raise InvalidArgument(
                prefix + f"For BYTE datatype raw input '{spec.name}', the model must have input shape [1]"
            )
        # The body is the one element itself, without the length prefix of the binary format.
        data = np.empty(1, dtype=object)
        data[0] = bytes(body)
        shape = batch + dims
        tensor = Tensor(spec.name, "BYTES", shape, data.reshape(shape))
    else:
        if -1 in dims:
            itemsize = spec.dtype.itemsize
            dims[dims.index(-1)] = len(body) // (known * itemsize) if known else 0
        shape = batch + dims
        data = array_from_raw(spec.name, spec.datatype, shape, memoryview(body), model.name)
        tensor = Tensor(spec.name, spec.datatype, shape, data)
    request = InferenceRequest(model_name=model.name, model_version=version, inputs=[tensor])
    return DecodedInfer(request, binary_all=True)


def encode_response(
    response: InferenceResponse, request: InferenceRequest, binary_all: bool
) -> tuple[bytes, int | None]:
    """The response body, and the JSON header length when binary outputs follow it (else None).

    An output requested in shared memory is written there and answered with its metadata only, as Triton does.
    """
    wanted = {o.name: o.binary for o in request.outputs}
    outputs: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for tensor in response.outputs:
        choice = wanted.get(tensor.name)
        binary = binary_all if choice is None else choice
        entry: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": tensor.shape}
        if tensor.shm is not None:
            pass  # the engine wrote it into the region
        elif binary:
            blob = raw_bytes(tensor.datatype, tensor.data)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        elif tensor.datatype in _NO_JSON:
            raise InvalidArgument(
                f"sending {tensor.datatype} data via JSON is not supported. Please use the binary data format for "
                "output"
            )
        elif tensor.datatype == "BYTES":
            entry["data"] = [
                b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b) for b in tensor.data.ravel()
            ]
        else:
            entry["data"] = np.ascontiguousarray(tensor.data).ravel()
        outputs.append(entry)
    doc: dict[str, Any] = {}
    if response.id:
        doc["id"] = response.id
    doc["model_name"] = response.model_name
    doc["model_version"] = response.model_version
    if response.parameters:
        doc["parameters"] = response.parameters
    doc["outputs"] = outputs
    header = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    if not blobs:
        return header, None
    return b"".join([header, *blobs]), len(header)

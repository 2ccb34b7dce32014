"""KServe v2 inference bodies over HTTP: JSON, the binary tensor data extension, and raw binary requests.

Decoded once into core types (tensors over the received buffer, never Python lists on the binary path) and
encoded once from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from modelhost.datatypes import WIRE_TO_NUMPY
from modelhost.errors import InvalidArgument, Unsupported
from modelhost.model import LoadedModel
from modelhost.tensor_codec import array_from_raw, element_count, parse_shape, raw_bytes
from modelhost.types import InferenceRequest, InferenceResponse, Parameters, RequestedOutput, Tensor

# Request parameters the server itself interprets (Triton's reserved names).
_RESERVED = {"sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "binary_data_output", "headers"}
_NO_JSON = {"FP16", "BF16"}


@dataclass(slots=True)
class DecodedInfer:
    request: InferenceRequest
    # Outputs answered as binary: None = every output (raw binary requests and binary_data_output).
    binary_all: bool


def _check_parameters(params: Any, where: str) -> Parameters:
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise InvalidArgument(f"'parameters' of {where} must be a JSON object")
    for key, value in params.items():
        if key.startswith("triton_"):
            raise InvalidArgument(
                f"parameter keys starting with 'triton_' are reserved for Triton usage and should not be "
                f"specified: '{key}'"
            )
        if not isinstance(value, bool | int | float | str):
            raise InvalidArgument(f"parameter '{key}' of {where} must be a string, number or boolean")
    return params


def _json_data(name: str, datatype: str, shape: list[int], data: Any) -> npt.NDArray[Any]:
    if datatype in _NO_JSON:
        raise InvalidArgument(
            f"receiving input '{name}' of type {datatype} via JSON is not supported. "
            "Please use the binary data format for input"
        )
    count = element_count(name, shape)
    if not isinstance(data, list):
        data = [data]
    try:
        if datatype == "BYTES":
            flat = np.asarray(data, dtype=object).ravel()
            if flat.size != count:
                raise ValueError
            out = np.empty(count, dtype=object)
            for i, item in enumerate(flat):
                if not isinstance(item, str):
                    raise InvalidArgument(f"data of BYTES input '{name}' must be strings")
                out[i] = item.encode("utf-8")
            return out.reshape(shape)
        loose = np.asarray(data)
        kind = loose.dtype.kind
        target = WIRE_TO_NUMPY[datatype]
        if loose.size != count:
            raise ValueError
        if target.kind == "b" and kind != "b" and loose.size:
            raise InvalidArgument(f"data of BOOL input '{name}' must be true or false")
        if target.kind in "iu" and kind not in "iub" and loose.size:
            raise InvalidArgument(f"data of {datatype} input '{name}' must be integers")
        if target.kind == "f" and kind not in "iubf" and loose.size:
            raise InvalidArgument(f"data of {datatype} input '{name}' must be numbers")
        return np.asarray(loose, dtype=target).reshape(shape)
    except InvalidArgument:
        raise
    except OverflowError as e:
        raise InvalidArgument(f"data of input '{name}' does not fit in {datatype}: {e}") from e
    except (ValueError, TypeError) as e:
        raise InvalidArgument(
            f"unable to parse 'data' of input '{name}': expected {count} elements of {datatype} "
            f"for shape {shape}"
        ) from e


def decode_json_request(
    model_name: str, version: str, header: bytes | memoryview, binary: memoryview | None
) -> DecodedInfer:
    try:
        doc = orjson.loads(header)
    except orjson.JSONDecodeError as e:
        raise InvalidArgument(f"failed to parse the request JSON buffer: {e}") from e
    if not isinstance(doc, dict):
        raise InvalidArgument("the request JSON must be an object")
    request_id = doc.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgument("request 'id' must be a string")
    params = _check_parameters(doc.get("parameters"), "the request")
    binary_all = params.get("binary_data_output") is True
    raw_inputs = doc.get("inputs")
    if not isinstance(raw_inputs, list):
        raise InvalidArgument("the request JSON must hold an 'inputs' array")
    offset = 0
    inputs: list[Tensor] = []
    for raw in raw_inputs:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise InvalidArgument("each input must be an object with a string 'name'")
        name = raw["name"]
        datatype = raw.get("datatype")
        if not isinstance(datatype, str) or datatype not in WIRE_TO_NUMPY:
            raise InvalidArgument(f"invalid datatype '{datatype}' for input '{name}'")
        shape = parse_shape(name, raw.get("shape"))
        in_params = raw.get("parameters") or {}
        if not isinstance(in_params, dict):
            raise InvalidArgument(f"'parameters' of input '{name}' must be a JSON object")
        sources = [k for k in ("data",) if k in raw] + [
            k for k in ("binary_data_size", "shared_memory_region") if k in in_params
        ]
        if len(sources) != 1:
            raise InvalidArgument(
                f"Input '{name}' must set only one of the following fields: 'data', 'binary_data_size' in "
                "'parameters', 'shared_memory_region' in 'parameters'"
            )
        if sources[0] == "shared_memory_region":
            raise Unsupported("the system shared memory extension is not supported yet")
        if sources[0] == "data":
            data = _json_data(name, datatype, shape, raw["data"])
        else:
            size = in_params["binary_data_size"]
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise InvalidArgument(f"'binary_data_size' of input '{name}' must be a non-negative integer")
            if binary is None or offset + size > len(binary):
                raise InvalidArgument(
                    f"unexpected binary data size for input '{name}': the body holds "
                    f"{0 if binary is None else len(binary) - offset} more bytes, binary_data_size is {size}"
                )
            data = array_from_raw(name, datatype, shape, binary[offset : offset + size])
            offset += size
        inputs.append(Tensor(name, datatype, shape, data))
    if binary is not None and offset != len(binary):
        raise InvalidArgument(
            f"unexpected additional input data for model '{model_name}': the body holds {len(binary) - offset} "
            "bytes past the inputs' binary_data_size"
        )
    outputs: list[RequestedOutput] = []
    raw_outputs = doc.get("outputs") or []
    if not isinstance(raw_outputs, list):
        raise InvalidArgument("'outputs' must be an array")
    for raw in raw_outputs:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise InvalidArgument("each requested output must be an object with a string 'name'")
        out_params = raw.get("parameters") or {}
        if not isinstance(out_params, dict):
            raise InvalidArgument(f"'parameters' of output '{raw['name']}' must be a JSON object")
        if "shared_memory_region" in out_params:
            raise Unsupported("the system shared memory extension is not supported yet")
        want_binary = out_params.get("binary_data")
        count = out_params.get("classification", 0)
        if not isinstance(count, int) or isinstance(count, bool):
            raise InvalidArgument(f"'classification' of output '{raw['name']}' must be an integer")
        outputs.append(RequestedOutput(raw["name"], want_binary if isinstance(want_binary, bool) else None, count))
    request = InferenceRequest(
        model_name=model_name,
        model_version=version,
        id=request_id,
        inputs=inputs,
        outputs=outputs,
        parameters={k: v for k, v in params.items() if k not in _RESERVED},
    )
    return DecodedInfer(request, binary_all)


def decode_raw_request(model: LoadedModel, version: str, body: bytes) -> DecodedInfer:
    """`Inference-Header-Content-Length: 0`: the whole body is the one input of a one-input model."""
    if len(model.inputs) != 1:
        raise InvalidArgument(
            f"raw binary request body is only supported for models with exactly one input, and model "
            f"'{model.name}' has {len(model.inputs)}"
        )
    spec = next(iter(model.inputs.values()))
    dims = list(spec.dims)
    if spec.datatype == "BYTES":
        shape = [1]
    else:
        if dims.count(-1) > 1:
            raise InvalidArgument(
                f"raw binary request body needs at most one variable dimension in input '{spec.name}'"
            )
        if -1 in dims:
            known = int(np.prod([d for d in dims if d != -1])) * spec.dtype.itemsize
            if known == 0 or len(body) % known:
                raise InvalidArgument(
                    f"raw binary request body of {len(body)} bytes does not fit input '{spec.name}'"
                )
            dims[dims.index(-1)] = len(body) // known
        shape = dims
    if model.max_batch_size > 0 and spec.datatype != "BYTES":
        shape = [1, *shape]
    if spec.datatype == "BYTES":
        data = np.array([bytes(body)], dtype=object).reshape([1, 1] if model.max_batch_size > 0 else [1])
        shape = list(data.shape)
    else:
        data = array_from_raw(spec.name, spec.datatype, shape, memoryview(body))
    request = InferenceRequest(model_name=model.name, model_version=version, inputs=[Tensor(spec.name, spec.datatype, shape, data)])
    return DecodedInfer(request, binary_all=True)


def encode_response(
    response: InferenceResponse, request: InferenceRequest, binary_all: bool
) -> tuple[bytes, int | None]:
    """The response body, and the JSON header length when binary outputs follow it (else None)."""
    wanted = {o.name: o.binary for o in request.outputs}
    outputs: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for tensor in response.outputs:
        choice = wanted.get(tensor.name)
        binary = binary_all if choice is None else choice
        entry: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": tensor.shape}
        if binary:
            blob = raw_bytes(tensor.datatype, tensor.data)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        elif tensor.datatype in _NO_JSON:
            raise InvalidArgument(
                f"sending output '{tensor.name}' of type {tensor.datatype} via JSON is not supported. "
                "Please use the binary data format for output"
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

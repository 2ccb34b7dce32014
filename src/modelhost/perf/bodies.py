"""Requests built once per run: raw HTTP/1.1 bytes (binary tensor extension or JSON) and serialized gRPC
`ModelInferRequest`s, one per input-data entry, sent round-robin by the load generators."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from modelhost.perf.client import ModelInfo
from modelhost.perf.inputs import Entry
from modelhost.perf.options import PerfOptions
from modelhost.perf.shm import ShmRefs

GRPC_INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"
GRPC_STREAM_METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"


def infer_path(model: str, version: str) -> str:
    path = f"/v2/models/{quote(model, safe='')}"
    if version:
        path += f"/versions/{quote(version, safe='')}"
    return path + "/infer"


# A sequence request's id is written into a prebuilt HTTP request at a known offset, right-aligned in this many
# characters (JSON allows the spaces; uint64 has at most 20 digits).
SEQUENCE_ID_WIDTH = 20
_ID_SENTINEL = 918273645546372819
Flags = tuple[bool, bool] | None  # sequence (start, end), or None for a model without sequences


def _shm_parameters(region: str, offset: int, byte_size: int) -> dict[str, Any]:
    return {
        "shared_memory_region": region,
        "shared_memory_offset": offset,
        "shared_memory_byte_size": byte_size,
    }


def http_body(
    entry: Entry, options: PerfOptions, shm: ShmRefs | None = None, index: int = 0, flags: Flags = None
) -> tuple[bytes, dict[str, str]]:
    """The body of one HTTP infer request and its content headers."""
    body, headers, _ = http_body_template(entry, options, shm, index, flags)
    return body, headers


def http_body_template(
    entry: Entry, options: PerfOptions, shm: ShmRefs | None = None, index: int = 0, flags: Flags = None
) -> tuple[bytes, dict[str, str], int]:
    """The body, its headers, and the offset of the sequence id's field in the body (-1 without flags).

    With `shm` (the regions of this process) the inputs of data entry `index` and every output are referenced in
    shared memory, in a JSON body."""
    header: dict[str, Any] = {}
    binary = options.input_format == "binary" and shm is None
    if shm is not None:
        header["inputs"] = [
            {
                "name": t.name,
                "shape": t.shape,
                "datatype": t.datatype,
                "parameters": _shm_parameters(shm.input_region, offset, size),
            }
            for t, (offset, size) in zip(entry, shm.layout.inputs[index], strict=True)
        ]
        header["outputs"] = [
            {"name": name, "parameters": _shm_parameters(shm.output_region, offset, size)}
            for name, offset, size in shm.layout.outputs
        ]
    elif binary:
        header["inputs"] = [
            {
                "name": t.name,
                "shape": t.shape,
                "datatype": t.datatype,
                "parameters": {"binary_data_size": len(t.raw)},
            }
            for t in entry
        ]
    else:
        header["inputs"] = [
            {"name": t.name, "shape": t.shape, "datatype": t.datatype, "data": t.values} for t in entry
        ]
    parameters: dict[str, Any] = {}
    if flags is not None:
        parameters.update(sequence_id=_ID_SENTINEL, sequence_start=flags[0], sequence_end=flags[1])
    if options.output_format == "binary" and shm is None:
        parameters["binary_data_output"] = True
    if parameters:
        header["parameters"] = parameters
    head = json.dumps(header, separators=(",", ":")).encode()
    id_offset = -1
    if flags is not None:
        sentinel = str(_ID_SENTINEL).encode()
        id_offset = head.index(sentinel)
        head = head.replace(sentinel, sentinel.rjust(SEQUENCE_ID_WIDTH))
    if binary:
        body = head + b"".join(t.raw for t in entry)
        return (
            body,
            {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(head))},
            id_offset,
        )
    return head, {"Content-Type": "application/json"}, id_offset


def http_request(entry: Entry, options: PerfOptions, info: ModelInfo, host: str) -> bytes:
    return http_template(entry, options, info, host)[0]


def http_template(
    entry: Entry,
    options: PerfOptions,
    info: ModelInfo,
    host: str,
    shm: ShmRefs | None = None,
    index: int = 0,
    flags: Flags = None,
) -> tuple[bytes, int]:
    """A whole HTTP/1.1 request, and the offset of the sequence id's field in it (-1 without flags)."""
    body, headers, id_offset = http_body_template(entry, options, shm, index, flags)
    lines = [
        f"POST {infer_path(info.name, info.version)} HTTP/1.1",
        f"Host: {host}",
        *(f"{k}: {v}" for k, v in headers.items()),
        f"Content-Length: {len(body)}",
        "",
        "",
    ]
    head = "\r\n".join(lines).encode()
    return head + body, (len(head) + id_offset if id_offset >= 0 else -1)


def with_sequence_id(template: bytes, id_offset: int, sequence_id: int) -> bytes:
    """A prebuilt HTTP request with its sequence id filled in."""
    field = str(sequence_id).encode().rjust(SEQUENCE_ID_WIDTH)
    return template[:id_offset] + field + template[id_offset + SEQUENCE_ID_WIDTH :]


def grpc_request(
    entry: Entry,
    info: ModelInfo,
    shm: ShmRefs | None = None,
    index: int = 0,
    flags: Flags = None,
    empty_final_response: bool = False,
) -> bytes:
    """A serialized ModelInferRequest. With flags, the sequence start/end parameters are in it; the id is
    appended per request by `grpc_sequence_id` (concatenated protobuf messages merge, map entries included)."""
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=info.name, model_version=info.version)
    refs = shm.layout.inputs[index] if shm is not None else [(0, 0)] * len(entry)
    for t, (offset, size) in zip(entry, refs, strict=True):
        tensor = request.inputs.add()
        tensor.name = t.name
        tensor.datatype = t.datatype
        tensor.shape.extend(t.shape)
        if shm is not None:
            tensor.parameters["shared_memory_region"].string_param = shm.input_region
            tensor.parameters["shared_memory_offset"].int64_param = offset
            tensor.parameters["shared_memory_byte_size"].int64_param = size
        else:
            request.raw_input_contents.append(t.raw)
    if shm is not None:
        for name, offset, size in shm.layout.outputs:
            output = request.outputs.add()
            output.name = name
            output.parameters["shared_memory_region"].string_param = shm.output_region
            output.parameters["shared_memory_offset"].int64_param = offset
            output.parameters["shared_memory_byte_size"].int64_param = size
    if flags is not None:
        request.parameters["sequence_start"].bool_param = flags[0]
        request.parameters["sequence_end"].bool_param = flags[1]
    if empty_final_response:
        request.parameters["triton_enable_empty_final_response"].bool_param = True
    return bytes(request.SerializeToString())


def grpc_sequence_id(sequence_id: int) -> bytes:
    """The serialized `parameters {"sequence_id": sequence_id}` to append to a request built with flags."""
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest()
    request.parameters["sequence_id"].int64_param = sequence_id
    return bytes(request.SerializeToString())

"""Requests built once per run: raw HTTP/1.1 bytes (binary tensor extension or JSON) and serialized gRPC
`ModelInferRequest`s, one per input-data entry, sent round-robin by the load generators."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from modelhost.perf.client import ModelInfo
from modelhost.perf.inputs import Entry
from modelhost.perf.options import PerfOptions

GRPC_INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"


def infer_path(model: str, version: str) -> str:
    path = f"/v2/models/{quote(model, safe='')}"
    if version:
        path += f"/versions/{quote(version, safe='')}"
    return path + "/infer"


def http_body(entry: Entry, options: PerfOptions) -> tuple[bytes, dict[str, str]]:
    """The body of one HTTP infer request and its content headers."""
    header: dict[str, Any] = {}
    if options.input_format == "binary":
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
    if options.output_format == "binary":
        header["parameters"] = {"binary_data_output": True}
    head = json.dumps(header, separators=(",", ":")).encode()
    if options.input_format == "binary":
        body = head + b"".join(t.raw for t in entry)
        return body, {
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(head)),
        }
    return head, {"Content-Type": "application/json"}


def http_request(entry: Entry, options: PerfOptions, info: ModelInfo, host: str) -> bytes:
    body, headers = http_body(entry, options)
    lines = [
        f"POST {infer_path(info.name, info.version)} HTTP/1.1",
        f"Host: {host}",
        *(f"{k}: {v}" for k, v in headers.items()),
        f"Content-Length: {len(body)}",
        "",
        "",
    ]
    return "\r\n".join(lines).encode() + body


def grpc_request(entry: Entry, info: ModelInfo) -> bytes:
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=info.name, model_version=info.version)
    for t in entry:
        tensor = request.inputs.add()
        tensor.name = t.name
        tensor.datatype = t.datatype
        tensor.shape.extend(t.shape)
        request.raw_input_contents.append(t.raw)
    return bytes(request.SerializeToString())

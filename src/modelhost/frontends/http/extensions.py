"""Triton's extensions over HTTP: shared memory (system and CUDA), trace settings, logging settings and the model
repository, with Triton's messages. Each reads its JSON body through `read_json` (decompressed and checked by the
routes) only once its method and path are known to be right, as Triton orders its errors."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable

from modelhost.engine_api import CUDA_SHM, SYSTEM_SHM, EngineAPI, ShmKind
from modelhost.errors import InvalidArgument
from modelhost.frontends.http.messages import (
    HttpRequest,
    HttpResponse,
    error_response,
    json_response,
    method_not_allowed,
    ok,
)
from modelhost.host.cuda_runtime import IPC_HANDLE_SIZE

# The request's body as a JSON object, `what` naming it in the error when it is not one.
ReadJson = Callable[[str], dict[str, object]]


async def shared_memory(
    engine: EngineAPI, request: HttpRequest, read_json: ReadJson, kind: ShmKind, region: str, action: str
) -> HttpResponse:
    """The system_shared_memory and cuda_shared_memory extensions."""
    if request.method != ("GET" if action == "status" else "POST"):
        return method_not_allowed()
    if action == "status":
        return json_response(await engine.shared_memory_status(kind, region))
    if action == "unregister":
        await engine.unregister_shared_memory(kind, region)
        return ok()
    await engine.check_shared_memory(SYSTEM_SHM)  # the extension is on
    if not region:
        raise InvalidArgument(f"'region name' is necessary to register {kind} shared memory region")
    if kind == CUDA_SHM:
        await engine.check_shared_memory(kind)  # without a GPU: 501 with the reason, whatever the body
        handle, device_id, byte_size = _cuda_register_body(read_json("shared memory register request"))
        await engine.register_cuda_shared_memory(region, handle, device_id, byte_size)
        return ok()
    doc = read_json("shared memory register request")
    key = doc.get("key")
    if key is None:
        raise InvalidArgument("Shared memory register request has no 'key' field")
    if not isinstance(key, str):
        raise InvalidArgument("Unable to parse 'key': attempt to access JSON non-string as string")
    if doc.get("byte_size") is None:
        raise InvalidArgument("Shared memory register request has no 'byte_size' field")
    await engine.register_system_shared_memory(
        region, key, _unsigned(doc, "offset", 0), _unsigned(doc, "byte_size")
    )
    return ok()


async def trace_settings(
    engine: EngineAPI, request: HttpRequest, read_json: ReadJson, model: str = ""
) -> HttpResponse:
    """The trace extension: GET or POST /v2[/models/{m}]/trace/setting."""
    if request.method == "GET":
        return json_response(await engine.trace_settings(model))
    if request.method != "POST":
        return method_not_allowed()
    return json_response(await engine.trace_settings(model, read_json("trace settings")))


async def logging_settings(engine: EngineAPI, request: HttpRequest, read_json: ReadJson) -> HttpResponse:
    """The logging extension: GET or POST /v2/logging."""
    if request.method == "GET":
        return json_response(await engine.logging_settings())
    if request.method != "POST":
        return method_not_allowed()
    return json_response(await engine.logging_settings(read_json("logging settings")))


async def repository(
    engine: EngineAPI, request: HttpRequest, read_json: ReadJson, repo: str | None, action: str, name: str
) -> HttpResponse:
    """The model repository extension: the index, load and unload."""
    if request.method != "POST":
        return method_not_allowed()
    if repo is not None:
        return error_response(501, "'repository_name' specification is not supported")
    doc = read_json("repository request")
    if action == "index":
        ready = doc.get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidArgument("'ready' must be a boolean")
        return json_response(await engine.repository_index(ready))
    parameters = doc.get("parameters", {})
    if not isinstance(parameters, dict):
        raise InvalidArgument("'parameters' must be a JSON object")
    if action == "load":
        await engine.load_model(name, parameters, files_base64=True)
    else:
        await engine.unload_model(name, parameters)
    return ok()


def _unsigned(doc: dict[str, object], field: str, default: int | None = None) -> int:
    """A uint64 member of a JSON request (absent: `default`, or Triton's error)."""
    value = doc.get(field, default)
    if value is None:
        raise InvalidArgument(
            f"Unable to parse '{field}': attempt to access non-existing object member '{field}'"
        )
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        raise InvalidArgument(
            f"Unable to parse '{field}': attempt to access JSON non-unsigned-integer as unsigned-integer"
        )
    return value


def _cuda_register_body(doc: dict[str, object]) -> tuple[bytes, int, int]:
    """The raw IPC handle, device id and byte size of a CUDA register request:
    `{"raw_handle": {"b64": "<base64 of the 64 handle bytes>"}, "device_id": 0, "byte_size": N}`."""
    raw = doc.get("raw_handle")
    if raw is None:
        raise InvalidArgument("Shared memory register request has no 'raw_handle' field")
    if not isinstance(raw, dict):
        raise InvalidArgument(
            "Unable to parse 'raw_handle': attempt to access non-existing object member 'b64'"
        )
    b64 = raw.get("b64")
    if b64 is None:
        raise InvalidArgument(
            "Unable to parse 'raw_handle': attempt to access non-existing object member 'b64'"
        )
    if not isinstance(b64, str):
        raise InvalidArgument("Unable to parse 'b64': attempt to access JSON non-string as string")
    byte_size = _unsigned(doc, "byte_size")
    device_id = _unsigned(doc, "device_id")
    try:
        handle = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        handle = b""
    if len(handle) != IPC_HANDLE_SIZE:
        raise InvalidArgument("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
    return handle, device_id, byte_size

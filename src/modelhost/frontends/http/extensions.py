"""Triton's extensions over HTTP that read their bodies: shared memory registration (system and CUDA) and the model
repository, with Triton's messages. Each reads its JSON body through `read_json` (inflated and checked by the
routes) only once it has checked what Triton checks first, as Triton orders its errors."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable

from modelhost.engine_api import CUDA_SHM, SYSTEM_SHM, EngineAPI, ShmKind
from modelhost.errors import InvalidArgument
from modelhost.frontends.http.messages import HttpResponse, error_response, json_response, ok
from modelhost.host.cuda_runtime import IPC_HANDLE_SIZE

# The request's body as a JSON object, `what` naming it in the error when it is not one.
ReadJson = Callable[[str], dict[str, object]]


async def register_shared_memory(engine: EngineAPI, kind: ShmKind, region: str, read_json: ReadJson) -> None:
    """POST /v2/{system,cuda}sharedmemory/region/{region}/register."""
    await engine.check_shared_memory(SYSTEM_SHM)  # the extension is on
    if not region:
        raise InvalidArgument(f"'region name' is necessary to register {kind} shared memory region")
    if kind == CUDA_SHM:
        await engine.check_shared_memory(kind)  # without a GPU: 501 with the reason, whatever the body
        handle, device_id, byte_size = _cuda_register_body(read_json("shared memory register request"))
        await engine.register_cuda_shared_memory(region, handle, device_id, byte_size)
        return
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


async def repository_index(engine: EngineAPI, repository: str, read_json: ReadJson) -> HttpResponse:
    """POST /v2/repository[/{repository}]/index."""
    if repository:
        return _no_repository_names()
    ready = read_json("repository request").get("ready", False)
    if not isinstance(ready, bool):
        raise InvalidArgument("'ready' must be a boolean")
    return json_response(await engine.repository_index(ready))


async def load_or_unload(
    engine: EngineAPI, repository: str, action: str, name: str, read_json: ReadJson
) -> HttpResponse:
    """POST /v2/repository[/{repository}]/models/{name}/load (`action`), or /unload."""
    if repository:
        return _no_repository_names()
    parameters = read_json("repository request").get("parameters", {})
    if not isinstance(parameters, dict):
        raise InvalidArgument("'parameters' must be a JSON object")
    if action == "load":
        await engine.load_model(name, parameters, files_base64=True)
    else:
        await engine.unload_model(name, parameters)
    return ok()


def _no_repository_names() -> HttpResponse:
    return error_response(501, "'repository_name' specification is not supported")


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

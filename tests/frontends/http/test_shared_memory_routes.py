"""The shared-memory endpoints of the HTTP routes, driven in process with a stand-in for CUDA's IPC: the CUDA
register body, its errors in Triton's words, status and unregister per kind."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import orjson
import pytest

from cuda_stand_in import HostIpc
from modelhost.backends.api import BackendServices
from modelhost.engine.engine import Engine
from modelhost.engine.registry.registry import ModelRegistry
from modelhost.engine.shared_memory import SharedMemoryRegistry
from modelhost.engine.shm_cuda import CUDA
from modelhost.frontends.http.messages import HttpRequest, HttpResponse
from modelhost.frontends.http.routes import HttpRoutes

BASE = "/v2/cudasharedmemory"


@pytest.fixture
def ipc() -> HostIpc:
    return HostIpc()


@pytest.fixture
def registry(ipc: HostIpc) -> Iterator[SharedMemoryRegistry]:
    r = SharedMemoryRegistry(allowed=True, cuda_ipc=ipc)
    yield r
    r.close()


@pytest.fixture
def routes(registry: SharedMemoryRegistry) -> HttpRoutes:
    # The shared-memory endpoints use nothing of the engine but its shared-memory registry.
    no_models = cast(ModelRegistry, SimpleNamespace(services=BackendServices(), table=None))
    engine = Engine(no_models, shared_memory=registry)
    return HttpRoutes(engine, max_input_size=1 << 20)


def call(routes: HttpRoutes, method: str, path: str, body: Any = None) -> HttpResponse:
    raw = b"" if body is None else body if isinstance(body, bytes) else orjson.dumps(body)
    return asyncio.run(routes(HttpRequest(method, path, "", {}, raw)))


def error(response: HttpResponse) -> str:
    return str(orjson.loads(response.body)["error"])


def b64(handle: bytes) -> str:
    return base64.b64encode(handle).decode()


def test_register_status_unregister(routes: HttpRoutes, ipc: HostIpc, registry: SharedMemoryRegistry) -> None:
    handle = ipc.allocate(bytes(32))
    body = {"raw_handle": {"b64": b64(handle)}, "device_id": 0, "byte_size": 32}
    assert call(routes, "POST", f"{BASE}/region/c/register", body).status == 200
    status = call(routes, "GET", f"{BASE}/status")
    assert orjson.loads(status.body) == [{"name": "c", "device_id": 0, "byte_size": 32}]
    assert orjson.loads(call(routes, "GET", f"{BASE}/region/c/status").body) == orjson.loads(status.body)
    assert orjson.loads(call(routes, "GET", "/v2/systemsharedmemory/status").body) == []
    wrong = call(routes, "GET", "/v2/systemsharedmemory/region/c/status")
    assert (wrong.status, error(wrong)) == (
        404,
        "The region named 'c' is registered as CUDA shared memory, not system shared memory",
    )
    again = call(routes, "POST", f"{BASE}/region/c/register", body)
    assert (again.status, error(again)) == (400, "shared memory region 'c' already in manager")
    assert call(routes, "POST", "/v2/systemsharedmemory/region/c/unregister").status == 200
    assert registry.status(kind=CUDA) != []  # the system endpoint leaves a CUDA region alone
    assert call(routes, "POST", f"{BASE}/region/c/unregister").status == 200
    assert registry.status(kind=CUDA) == []
    missing = call(routes, "GET", f"{BASE}/region/c/status")
    assert (missing.status, error(missing)) == (404, "Unable to find cuda shared memory region: 'c'")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"device_id": 0, "byte_size": 8}, "Shared memory register request has no 'raw_handle' field"),
        (
            {"raw_handle": {}, "device_id": 0, "byte_size": 8},
            "Unable to parse 'raw_handle': attempt to access non-existing object member 'b64'",
        ),
        (
            {"raw_handle": "AAAA", "device_id": 0, "byte_size": 8},
            "Unable to parse 'raw_handle': attempt to access non-existing object member 'b64'",
        ),
        (
            {"raw_handle": {"b64": 7}, "device_id": 0, "byte_size": 8},
            "Unable to parse 'b64': attempt to access JSON non-string as string",
        ),
        (
            {"raw_handle": {"b64": b64(bytes(64))}, "device_id": 0},
            "Unable to parse 'byte_size': attempt to access non-existing object member 'byte_size'",
        ),
        (
            {"raw_handle": {"b64": b64(bytes(64))}, "byte_size": 8},
            "Unable to parse 'device_id': attempt to access non-existing object member 'device_id'",
        ),
        (
            {"raw_handle": {"b64": b64(bytes(64))}, "device_id": -1, "byte_size": 8},
            "Unable to parse 'device_id': attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
        (
            {"raw_handle": {"b64": b64(bytes(63))}, "device_id": 0, "byte_size": 8},
            "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t",
        ),
        (
            {"raw_handle": {"b64": "not base64!"}, "device_id": 0, "byte_size": 8},
            "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t",
        ),
        (
            {"raw_handle": {"b64": b64(bytes(64))}, "device_id": 0, "byte_size": 8},
            "failed to register shared memory region: invalid args",  # a handle CUDA cannot open
        ),
        (b"{not json", "failed to parse the request JSON buffer"),
    ],
)
def test_register_errors(routes: HttpRoutes, registry: SharedMemoryRegistry, body: Any, message: str) -> None:
    response = call(routes, "POST", f"{BASE}/region/c/register", body)
    assert response.status == 400
    assert message in error(response)
    assert registry.status(kind=CUDA) == []


def test_register_needs_a_region_name_and_the_right_methods(routes: HttpRoutes) -> None:
    response = call(routes, "POST", f"{BASE}/register", {})
    assert (response.status, error(response)) == (
        400,
        "'region name' is necessary to register cuda shared memory region",
    )
    assert call(routes, "GET", f"{BASE}/region/c/register").status == 405
    assert call(routes, "POST", f"{BASE}/status").status == 405

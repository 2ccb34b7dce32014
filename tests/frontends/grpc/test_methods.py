"""The method table (`methods.py`): how each RPC of a service descriptor is served."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from grpc_health.v1 import health_pb2
from tritonclient.grpc import service_pb2

from fake_engine import FakeEngine
from modelhost.frontends.grpc.calls import AbortError
from modelhost.frontends.grpc.calls import CallContext as GrpcCall
from modelhost.frontends.grpc.methods import methods_of
from modelhost.frontends.grpc.service import HealthService


def test_a_server_streaming_call_without_its_request_message_is_invalid() -> None:
    """Health/Watch is served as a streaming call that reads its one message; a client that half-closes without
    sending it gets INVALID_ARGUMENT, not a hang."""
    method = methods_of(health_pb2.DESCRIPTOR.services_by_name["Health"], HealthService(FakeEngine()))[
        b"/grpc.health.v1.Health/Watch"
    ]
    assert method.streaming

    async def main() -> list[Any]:
        async def nothing() -> AsyncIterator[Any]:
            return
            yield

        return [answer async for answer in method.handler(nothing(), GrpcCall([]))]

    with pytest.raises(AbortError) as aborted:
        asyncio.run(asyncio.wait_for(main(), 10))
    assert aborted.value.code.name == "INVALID_ARGUMENT"


class Live:
    async def ServerLive(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerLiveResponse(live=True)


def test_a_method_is_served_under_its_path_only_when_the_servicer_has_it() -> None:
    table = methods_of(service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"], Live())
    assert list(table) == [b"/inference.GRPCInferenceService/ServerLive"]
    method = table[b"/inference.GRPCInferenceService/ServerLive"]
    assert method.name == "ServerLive" and not method.streaming
    request = method.decode(service_pb2.ServerLiveRequest().SerializeToString())
    response = asyncio.run(method.handler(request, GrpcCall([])))
    assert service_pb2.ServerLiveResponse.FromString(method.encode(response)).live


class Memory:
    async def SharedMemoryStatus(self, request: Any, context: Any) -> Any:
        return service_pb2.CudaSharedMemoryStatusResponse()


def test_a_prefix_serves_the_methods_named_with_it_by_the_rest_of_their_names() -> None:
    table = methods_of(service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"], Memory(), prefix="Cuda")
    assert list(table) == [b"/inference.GRPCInferenceService/CudaSharedMemoryStatus"]
    assert table[b"/inference.GRPCInferenceService/CudaSharedMemoryStatus"].name == "CudaSharedMemoryStatus"

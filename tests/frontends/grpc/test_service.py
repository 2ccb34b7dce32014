"""The gRPC service against the fake engine, in process: what a stream answers when the server itself fails, and
the shared-memory RPCs of each kind."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from tritonclient.grpc import service_pb2

from fake_engine import MODEL, FakeEngine
from modelhost.engine_api import CallContext, ShmKind
from modelhost.errors import NotFound
from modelhost.frontends.grpc.calls import AbortError
from modelhost.frontends.grpc.calls import CallContext as GrpcCall
from modelhost.frontends.grpc.server import GrpcServer
from modelhost.frontends.grpc.service import GrpcService
from modelhost.types import InferenceRequest, InferenceResponse


class BuggyEngine(FakeEngine):
    """Fails with a fault of its own (not a ModelhostError) on requests whose id is "bug"."""

    async def infer_stream(
        self, request: InferenceRequest, context: CallContext | None = None
    ) -> AsyncIterator[InferenceResponse]:
        if request.id == "bug":
            raise RuntimeError("a bug in the engine")
        async for response in super().infer_stream(request, context):
            yield response


def _request(request_id: str) -> Any:
    message = service_pb2.ModelInferRequest(model_name=MODEL, id=request_id)
    tensor = message.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 2])
    tensor.contents.fp32_contents.extend([1.0, 2.0])
    return message


def test_a_fault_in_one_streamed_request_is_answered_and_the_stream_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> list[Any]:
        async def requests() -> AsyncIterator[Any]:
            for request_id in ("first", "bug", "last"):
                yield _request(request_id)

        service = GrpcService(BuggyEngine())
        stream = service.ModelStreamInfer(requests(), GrpcCall([]))
        return [answer async for answer in stream]

    answers = asyncio.run(asyncio.wait_for(main(), 10))
    assert (
        len(answers) == 3
    )  # once, the stream never answered the faulty request, and its client waited forever
    assert sorted(a.infer_response.id for a in answers if not a.error_message) == ["first", "last"]
    assert [a.error_message for a in answers if a.error_message] == ["internal server error"]
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and errors[0].exc_info is not None  # logged once, with its traceback


class ShmEngine(FakeEngine):
    """Regions of both kinds; the region "nope" is unknown."""

    async def shared_memory_status(self, kind: ShmKind, name: str = "") -> list[dict[str, Any]]:
        if name == "nope":
            raise NotFound(f"Unable to find shared memory region: '{name}'")
        if kind == "cuda":
            return [{"name": name or "c", "device_id": 1, "byte_size": 8}]
        return [{"name": name or "s", "key": "/k", "offset": 0, "byte_size": 8}]

    async def unregister_shared_memory(self, kind: ShmKind, name: str = "") -> None:
        if name == "nope":
            raise NotFound(f"Unable to find shared memory region: '{name}'")
        await super().unregister_shared_memory(kind, name)


def call(server: GrpcServer, rpc: str, request: Any) -> Any:
    method = server.methods[f"/inference.GRPCInferenceService/{rpc}".encode()]
    return asyncio.run(method.handler(request, GrpcCall([])))


def test_each_kind_of_shared_memory_is_served_under_its_own_rpcs() -> None:
    engine = ShmEngine()
    server = GrpcServer(engine)
    system = call(server, "SystemSharedMemoryStatus", service_pb2.SystemSharedMemoryStatusRequest())
    assert isinstance(system, service_pb2.SystemSharedMemoryStatusResponse)
    assert system.regions["s"].key == "/k" and system.regions["s"].byte_size == 8
    cuda = call(server, "CudaSharedMemoryStatus", service_pb2.CudaSharedMemoryStatusRequest(name="g"))
    assert isinstance(cuda, service_pb2.CudaSharedMemoryStatusResponse) and cuda.regions["g"].device_id == 1
    registered = call(
        server,
        "SystemSharedMemoryRegister",
        service_pb2.SystemSharedMemoryRegisterRequest(name="s", key="/k", offset=4, byte_size=8),
    )
    assert isinstance(registered, service_pb2.SystemSharedMemoryRegisterResponse)
    registered = call(
        server,
        "CudaSharedMemoryRegister",
        service_pb2.CudaSharedMemoryRegisterRequest(name="g", raw_handle=b"h", device_id=1, byte_size=8),
    )
    assert isinstance(registered, service_pb2.CudaSharedMemoryRegisterResponse)
    unregistered = call(server, "CudaSharedMemoryUnregister", service_pb2.CudaSharedMemoryUnregisterRequest())
    assert isinstance(unregistered, service_pb2.CudaSharedMemoryUnregisterResponse)
    assert engine.calls == [
        ("register_system_shared_memory", ("s", "/k", 4, 8)),
        ("register_cuda_shared_memory", ("g", b"h", 1, 8)),
        ("unregister_shared_memory", ("cuda", "")),
    ]


def test_a_shared_memory_failure_is_answered_with_its_status_and_logged_naming_the_region(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = GrpcServer(ShmEngine())
    caplog.set_level(logging.INFO, "modelhost.grpc")
    for rpc, request, logged in (
        ("SystemSharedMemoryStatus", service_pb2.SystemSharedMemoryStatusRequest, "system shared memory status"),
        (
            "CudaSharedMemoryUnregister",
            service_pb2.CudaSharedMemoryUnregisterRequest,
            "unregistration of CUDA shared memory region 'nope'",
        ),
        (
            "SystemSharedMemoryUnregister",
            service_pb2.SystemSharedMemoryUnregisterRequest,
            "unregistration of shared memory region 'nope'",
        ),
    ):
        with pytest.raises(AbortError) as aborted:
            call(server, rpc, request(name="nope"))
        assert aborted.value.code is grpc.StatusCode.NOT_FOUND
        assert aborted.value.message == "Unable to find shared memory region: 'nope'"
        assert f"{logged} failed: Unable to find shared memory region: 'nope'" in caplog.text

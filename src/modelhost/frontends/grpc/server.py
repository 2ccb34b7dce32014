"""The gRPC server: `GRPCInferenceService` and `grpc.health.v1.Health` over HTTP/2 (h2c) on the event loop."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from ssl import SSLContext
from typing import Any

import grpc
from grpc_health.v1 import health_pb2
from tritonclient.grpc import service_pb2

from modelhost.engine_api import CUDA_SHM, SYSTEM_SHM, EngineAPI
from modelhost.frontends.grpc.calls import AbortError
from modelhost.frontends.grpc.connection import GrpcConnection
from modelhost.frontends.grpc.methods import Method, methods_of
from modelhost.frontends.grpc.service import GrpcService, HealthService, SharedMemoryService
from modelhost.frontends.restrictions import Restrictions, refusal
from modelhost.options.limits import GrpcLimits

log = logging.getLogger("modelhost.grpc")


# The restricted-protocol category of each method of the inference service (grpc_server.cc, infer_handler.cc);
# grpc.health.v1 has none.
_CATEGORIES = {
    "ServerLive": "health",
    "ServerReady": "health",
    "ModelReady": "health",
    "ServerMetadata": "metadata",
    "ModelMetadata": "metadata",
    "ModelConfig": "model-config",
    "ModelStatistics": "statistics",
    "TraceSetting": "trace",
    "LogSettings": "logging",
    "RepositoryIndex": "model-repository",
    "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "ModelInfer": "inference",
    "ModelStreamInfer": "inference",
    **{
        f"{kind}SharedMemory{action}": "shared-memory"
        for kind in ("System", "Cuda")
        for action in ("Status", "Register", "Unregister")
    },
}


def _restricted(method: Method, restrictions: Restrictions) -> Method:
    """`method`, refusing a call without the metadata its category is restricted by (UNAVAILABLE, Triton's words)
    before its handler runs."""
    category = _CATEGORIES.get(method.name, "")
    if category not in restrictions:
        return method
    handler = method.handler

    def check(context: Any) -> None:
        why = refusal(restrictions, category, lambda key: dict(context.invocation_metadata()).get(key))
        if why:
            log.info("refused a gRPC call to %s: this protocol is restricted, %s", method.name, why)
            raise AbortError(grpc.StatusCode.UNAVAILABLE, f"This protocol is restricted, {why}")

    if method.streaming:

        async def streaming(requests: Any, context: Any) -> Any:
            check(context)
            async for answer in handler(requests, context):
                yield answer

        return dataclasses.replace(method, handler=streaming)

    async def unary(request: Any, context: Any) -> Any:
        check(context)
        return await handler(request, context)

    return dataclasses.replace(method, handler=unary)


def _debug_response_delay() -> int:
    """TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC: Triton's testing hook (in its release builds too) that holds
    every gRPC answer but inference's for that many seconds; its qa suites set it to test client timeouts."""
    value = os.environ.get("TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC", "")
    try:
        return max(0, int(value)) if value else 0
    except ValueError:
        log.warning("TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC=%r is not a whole number: ignored", value)
        return 0


def _debug_process_delay() -> float:
    """TRITONSERVER_DELAY_GRPC_PROCESS: Triton's testing hook that holds each ModelInfer call that many
    milliseconds before it is processed (its qa suites cancel calls meanwhile)."""
    value = os.environ.get("TRITONSERVER_DELAY_GRPC_PROCESS", "")
    try:
        return max(0, int(value)) / 1000 if value else 0.0
    except ValueError:
        log.warning("TRITONSERVER_DELAY_GRPC_PROCESS=%r is not a whole number: ignored", value)
        return 0.0


def _delayed(method: Method, delay_s: int, process_delay_s: float) -> Method:
    if method.streaming:
        return method
    wait = process_delay_s if method.name == "ModelInfer" else delay_s
    if not wait:
        return method
    handler = method.handler

    async def delayed(request: Any, context: Any) -> Any:
        if method.name == "ModelInfer":
            log.info("Delaying the Process execution by %d ms...", round(wait * 1000))  # Triton's line
        await asyncio.sleep(wait)
        return await handler(request, context)

    return dataclasses.replace(method, handler=delayed)


class GrpcServer:
    def __init__(
        self,
        engine: EngineAPI,
        limits: GrpcLimits | None = None,
        restrictions: Restrictions | None = None,
        header_forward_pattern: str = "",
    ) -> None:
        """`header_forward_pattern`: --grpc-header-forward-pattern ("" forwards no metadata)."""
        self.health = HealthService(engine)
        inference = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
        self.methods: dict[bytes, Method] = methods_of(inference, GrpcService(engine, header_forward_pattern))
        for kind in (SYSTEM_SHM, CUDA_SHM):
            shared_memory = SharedMemoryService(engine, kind)
            self.methods.update(methods_of(inference, shared_memory, prefix=shared_memory.prefix))
        self.methods.update(methods_of(health_pb2.DESCRIPTOR.services_by_name["Health"], self.health))
        delay_s, process_delay_s = _debug_response_delay(), _debug_process_delay()
        if delay_s or process_delay_s:
            self.methods = {path: _delayed(m, delay_s, process_delay_s) for path, m in self.methods.items()}
        if restrictions:
            self.methods = {path: _restricted(m, restrictions) for path, m in self.methods.items()}
        self.limits = limits or GrpcLimits()
        self.connections: set[GrpcConnection] = set()
        self.listener: asyncio.Server | None = None

    async def start(
        self, host: str, port: int, *, reuse_port: bool = False, ssl: SSLContext | None = None
    ) -> int:
        """Listen; the port bound (the one picked when `port` is 0). `ssl`: serve over TLS with this context."""

        def factory() -> GrpcConnection:
            return GrpcConnection(self.methods, self.limits, self.connections)

        loop = asyncio.get_running_loop()
        try:
            self.listener = await loop.create_server(
                factory,
                host=host,
                port=port,
                reuse_address=True,
                reuse_port=reuse_port or None,
                backlog=2048,
                ssl=ssl,
            )
        except OSError as e:
            raise OSError(f"failed to bind the gRPC server to {host}:{port}: {e.strerror or e}") from e
        bound: int = self.listener.sockets[0].getsockname()[1]
        return bound

    def stop_accepting(self) -> None:
        """No new connections, and GOAWAY on the open ones: their clients send new calls elsewhere or later;
        Health/Watch calls say NOT_SERVING and end."""
        self.health.stopping.set()
        if self.listener is not None:
            self.listener.close()
        for connection in self.connections:
            connection.go_away()

    async def stop(self, grace: float) -> None:
        """Give the calls in flight up to `grace` s, then close every connection."""
        self.stop_accepting()
        connections = list(self.connections)
        if connections:
            await asyncio.gather(*(c.drain(grace) for c in connections))
        for connection in connections:
            connection.close()

"""The RPCs of `inference.GRPCInferenceService` and `grpc.health.v1.Health`, answered from the core with Triton's
status codes. `server.py` serves them over HTTP/2."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn

from google.protobuf import json_format  # type: ignore[import-untyped]
from grpc_health.v1 import health_pb2
from tritonclient.grpc import service_pb2

from modelhost.engine_api import CUDA_SHM, SYSTEM_SHM, CallContext, EngineAPI, ShmKind
from modelhost.errors import (
    DecoupledModel,
    InternalError,
    InvalidArgument,
    ModelhostError,
    Unsupported,
    request_failure_level,
)
from modelhost.frontends.grpc.calls import AbortError
from modelhost.frontends.grpc.calls import CallContext as GrpcCall
from modelhost.frontends.grpc.codec import decode_request, encode_response, parse_model_version
from modelhost.frontends.grpc.statuses import grpc_code
from modelhost.frontends.header_forwarding import forwarded_parameters
from modelhost.frontends.tracing import sending
from modelhost.options import compile_forward_pattern
from modelhost.types import EMPTY_FINAL_RESPONSE, InferenceRequest, Parameters

# How often a Health/Watch call reads the server's readiness.
WATCH_INTERVAL_S = 0.5

# The repository index rows' fields that RepositoryIndexResponse.ModelIndex has (the HTTP JSON has more).
_INDEX_FIELDS = frozenset({"name", "version", "state", "reason"})

log = logging.getLogger("modelhost.grpc")

# Requests of one ModelStreamInfer stream that may be in flight (or answered and not yet sent) at once.
STREAM_WINDOW = 64


async def _fail(context: GrpcCall, what: str, e: ModelhostError) -> NoReturn:
    log.log(request_failure_level(e), "%s failed: %s", what, e)
    await context.abort(grpc_code(e), str(e))
    raise e  # unreachable: abort raises


Rpc = Callable[[Any, Any, GrpcCall], Awaitable[Any]]


def _answered(what: Callable[[Any], str]) -> Callable[[Rpc], Rpc]:
    """An RPC whose ModelhostError is logged once and answered with its status; `what(request)` names the call in
    the log line."""

    def wrap(method: Rpc) -> Rpc:
        @functools.wraps(method)
        async def rpc(self: Any, request: Any, context: GrpcCall) -> Any:
            try:
                return await method(self, request, context)
            except ModelhostError as e:
                await _fail(context, what(request), e)

        return rpc

    return wrap


def _parameter_values(parameters: Any) -> dict[str, Any]:
    """Parameter messages (a oneof `parameter_choice` of bool, int, string, ...) as plain values."""
    values: dict[str, Any] = {}
    for key, value in parameters.items():
        which = value.WhichOneof("parameter_choice")
        values[key] = getattr(value, which) if which else None
    return values


def _traceparent(context: GrpcCall) -> Callable[[], str]:
    """What reads a call's traceparent metadata: only a traced request's is read."""
    return lambda: str(dict(context.invocation_metadata() or ()).get("traceparent", ""))


class GrpcService:
    def __init__(self, engine: EngineAPI, header_forward_pattern: str = "") -> None:
        self.engine = engine
        # --grpc-header-forward-pattern: the metadata forwarded as request parameters.
        self.header_forward = (
            compile_forward_pattern(header_forward_pattern) if header_forward_pattern else None
        )

    async def ServerLive(self, request: Any, context: GrpcCall) -> Any:
        return service_pb2.ServerLiveResponse(live=await self.engine.is_live())

    async def ServerReady(self, request: Any, context: GrpcCall) -> Any:
        return service_pb2.ServerReadyResponse(ready=await self.engine.is_ready())

    @_answered(lambda request: f"readiness of '{request.name}'")
    async def ModelReady(self, request: Any, context: GrpcCall) -> Any:
        version = parse_model_version(request.version)
        ready = await self.engine.model_ready(request.name, version)
        return service_pb2.ModelReadyResponse(ready=ready)

    async def ServerMetadata(self, request: Any, context: GrpcCall) -> Any:
        return service_pb2.ServerMetadataResponse(**await self.engine.server_metadata())

    @_answered(lambda request: f"metadata of '{request.name}'")
    async def ModelMetadata(self, request: Any, context: GrpcCall) -> Any:
        meta = await self.engine.model_metadata(request.name, parse_model_version(request.version))
        response = service_pb2.ModelMetadataResponse(
            name=meta["name"], versions=meta["versions"], platform=meta["platform"]
        )
        for key, target in (("inputs", response.inputs), ("outputs", response.outputs)):
            for t in meta[key]:
                target.add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
        return response

    @_answered(lambda request: f"config of '{request.name}'")
    async def ModelConfig(self, request: Any, context: GrpcCall) -> Any:
        response = service_pb2.ModelConfigResponse()
        config = await self.engine.model_config(request.name, parse_model_version(request.version))
        response.config.CopyFrom(config)
        return response

    @_answered(lambda request: f"statistics of '{request.name or '*'}'")
    async def ModelStatistics(self, request: Any, context: GrpcCall) -> Any:
        version = parse_model_version(request.version)
        response = service_pb2.ModelStatisticsResponse()
        for stats in await self.engine.statistics(request.name, version):
            # ignore_unknown_fields: the JSON has modelhost's own additions (cold_start), which gRPC lacks.
            json_format.ParseDict(stats, response.model_stats.add(), ignore_unknown_fields=True)
        return response

    @_answered(lambda request: "log settings")
    async def LogSettings(self, request: Any, context: GrpcCall) -> Any:
        settings = await self.engine.logging_settings(_parameter_values(request.settings))
        response = service_pb2.LogSettingsResponse()
        for key, current in settings.items():
            if isinstance(current, bool):
                response.settings[key].bool_param = current
            elif isinstance(current, int):
                response.settings[key].uint32_param = current
            else:
                response.settings[key].string_param = current
        return response

    @_answered(lambda request: "repository index")
    async def RepositoryIndex(self, request: Any, context: GrpcCall) -> Any:
        if request.repository_name:
            raise Unsupported("'repository_name' specification is not supported")
        response = service_pb2.RepositoryIndexResponse()
        for row in await self.engine.repository_index(request.ready):
            response.models.add(**{k: v for k, v in row.items() if k in _INDEX_FIELDS})
        return response

    @_answered(lambda request: f"load of '{request.model_name}'")
    async def RepositoryModelLoad(self, request: Any, context: GrpcCall) -> Any:
        if request.repository_name:
            raise Unsupported("'repository_name' specification is not supported")
        parameters = _parameter_values(request.parameters)
        await self.engine.load_model(request.model_name, parameters, files_base64=False)
        return service_pb2.RepositoryModelLoadResponse()

    @_answered(lambda request: f"unload of '{request.model_name}'")
    async def RepositoryModelUnload(self, request: Any, context: GrpcCall) -> Any:
        if request.repository_name:
            raise Unsupported("'repository_name' specification is not supported")
        parameters = _parameter_values(request.parameters)
        await self.engine.unload_model(request.model_name, parameters)
        return service_pb2.RepositoryModelUnloadResponse()

    async def ModelInfer(self, request: Any, context: GrpcCall) -> Any:
        # The hot path: no closure, no f-string unless it fails (what _answer costs the other RPCs).
        try:
            core = decode_request(request)
            if self.header_forward is not None:
                core.parameters.update(
                    forwarded_parameters(self.header_forward, context.invocation_metadata())
                )
            response = await self.engine.infer(
                core, CallContext("GRPC", time.monotonic_ns(), _traceparent(context))
            )
            if core.trace is None:
                return encode_response(response)
            with sending(self.engine, core):
                return encode_response(response)
        except DecoupledModel as e:
            await _fail(context, f"inference of '{request.model_name}'", DecoupledModel(e.grpc_message))
        except ModelhostError as e:
            await _fail(context, f"inference of '{request.model_name}'", e)

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[Any], context: GrpcCall
    ) -> AsyncIterator[Any]:
        """Requests of one stream run concurrently; each answer (or error) is sent as soon as it is ready.

        At most STREAM_WINDOW requests of a stream are in flight or answered-but-unsent: past that the stream is
        not read, and HTTP/2 flow control holds the client back, so a fast sender cannot grow memory.
        """
        metadata = dict(context.invocation_metadata() or ())
        errors_as_status = str(metadata.get("triton_grpc_error", "")).lower() == "true"
        answers: asyncio.Queue[Any] = asyncio.Queue()
        window = asyncio.Semaphore(STREAM_WINDOW)
        running: set[asyncio.Task[None]] = set()

        traceparent = str(metadata.get("traceparent", ""))
        forward = self.header_forward
        forwarded: Parameters = {}
        forward_error: InvalidArgument | None = None
        if forward is not None:  # the stream's metadata, forwarded into each of its requests
            try:
                forwarded = forwarded_parameters(forward, context.invocation_metadata())
            except InvalidArgument as e:
                forward_error = e

        async def run(request: Any) -> None:
            context = CallContext("GRPC", time.monotonic_ns(), traceparent)
            try:
                core = decode_request(request)
                if forward_error is not None:
                    raise forward_error
                if forwarded:
                    core.parameters.update(forwarded)
                # 0..N responses (exactly one for a model that is not decoupled), each marked final or not; a
                # final response without outputs is sent only when the request asks for it, as Triton does.
                empty_final = core.parameters.get(EMPTY_FINAL_RESPONSE) is True
                async for response in self.engine.infer_stream(core, context):
                    if response.error is not None:  # an error response; the request goes on
                        answers.put_nowait((response.error, False))
                        continue
                    if response.outputs or empty_final:
                        answers.put_nowait((self._streamed(core, response), False))
                answers.put_nowait((None, True))
            except ModelhostError as e:
                log.info("streamed inference of '%s' failed: %s", request.model_name, e)
                answers.put_nowait((e, True))
            except Exception:  # a fault of the server's own: this request is answered, the stream goes on
                log.exception("streamed inference of '%s' failed", request.model_name)
                answers.put_nowait((InternalError("internal server error"), True))

        async def read() -> None:
            try:
                async for request in request_iterator:
                    await window.acquire()
                    task = asyncio.create_task(run(request))
                    running.add(task)
                    task.add_done_callback(running.discard)
            except AbortError as e:  # a request message that does not parse: the stream ends with its status
                answers.put_nowait((e, True))
                return
            while running:
                await asyncio.gather(*list(running))
            answers.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            while (entry := await answers.get()) is not None:
                item, last = entry
                if isinstance(item, AbortError):
                    raise item
                if isinstance(item, ModelhostError):
                    if errors_as_status:
                        await context.abort(grpc_code(item), str(item))
                    yield service_pb2.ModelStreamInferResponse(error_message=str(item))
                elif item is not None:
                    yield item
                if last:  # one window slot per request, however many responses it has
                    window.release()
        finally:
            reader.cancel()
            for task in list(running):
                task.cancel()
            with contextlib.suppress(BaseException):
                await reader

    def _streamed(self, core: InferenceRequest, response: Any) -> Any:
        if core.trace is None:
            return service_pb2.ModelStreamInferResponse(infer_response=encode_response(response))
        with sending(self.engine, core, last=False):
            return service_pb2.ModelStreamInferResponse(infer_response=encode_response(response))

    @_answered(lambda request: "trace settings")
    async def TraceSetting(self, request: Any, context: GrpcCall) -> Any:
        changes: dict[str, Any] | None = None
        if request.settings:
            changes = {}
            for key, setting in request.settings.items():
                values = list(setting.value)
                if key == "trace_level":
                    changes[key] = values or None
                elif len(values) > 1:
                    raise InvalidArgument(f"expect only 1 value for '{key}'")
                else:  # no value: back to the global (model) or startup (global) value, as in Triton
                    changes[key] = values[0] if values else None
        settings = await self.engine.trace_settings(request.model_name, changes)
        response = service_pb2.TraceSettingResponse()
        for key, value in settings.items():
            response.settings[key].value.extend(value if isinstance(value, list) else [value])
        return response


# The response messages of each kind's shared-memory RPCs: status, register, unregister.
_SHM_RESPONSES = {
    SYSTEM_SHM: (
        service_pb2.SystemSharedMemoryStatusResponse,
        service_pb2.SystemSharedMemoryRegisterResponse,
        service_pb2.SystemSharedMemoryUnregisterResponse,
    ),
    CUDA_SHM: (
        service_pb2.CudaSharedMemoryStatusResponse,
        service_pb2.CudaSharedMemoryRegisterResponse,
        service_pb2.CudaSharedMemoryUnregisterResponse,
    ),
}


class SharedMemoryService:
    """The shared-memory RPCs of one kind of region, served under its prefix (`SystemSharedMemoryStatus`,
    `CudaSharedMemoryStatus`, ...): the system and CUDA ones alike but for the fields that register a region."""

    def __init__(self, engine: EngineAPI, kind: ShmKind) -> None:
        self.engine = engine
        self.kind = kind
        cuda = kind == CUDA_SHM
        self.prefix = "Cuda" if cuda else "System"
        # How log lines name the memory and its regions.
        self.memory = "CUDA shared memory" if cuda else "system shared memory"
        self.region = "CUDA shared memory region" if cuda else "shared memory region"
        self.status_response, self.register_response, self.unregister_response = _SHM_RESPONSES[kind]

    async def SharedMemoryStatus(self, request: Any, context: GrpcCall) -> Any:
        """The regions (or the one named) as a status response."""
        response_type = self.status_response
        response = response_type()
        try:
            for region in await self.engine.shared_memory_status(self.kind, request.name):
                response.regions[region["name"]].CopyFrom(response_type.RegionStatus(**region))
        except ModelhostError as e:
            await _fail(context, f"{self.memory} status", e)
        return response

    async def SharedMemoryRegister(self, request: Any, context: GrpcCall) -> Any:
        try:
            if self.kind == CUDA_SHM:
                await self.engine.register_cuda_shared_memory(
                    request.name, request.raw_handle, request.device_id, request.byte_size
                )
            else:
                await self.engine.register_system_shared_memory(
                    request.name, request.key, request.offset, request.byte_size
                )
        except ModelhostError as e:
            await _fail(context, f"registration of {self.region} '{request.name}'", e)
        return self.register_response()

    async def SharedMemoryUnregister(self, request: Any, context: GrpcCall) -> Any:
        try:
            await self.engine.unregister_shared_memory(self.kind, request.name)
        except ModelhostError as e:
            await _fail(context, f"unregistration of {self.region} '{request.name or '*'}'", e)
        return self.unregister_response()


class HealthService:
    """The standard `grpc.health.v1.Health` service: `Check`, which Kubernetes gRPC probes use, answers SERVING
    while the server is ready, NOT_SERVING otherwise, whatever service is named (as Triton answers it). `Watch`
    sends the status at once and again each time it changes (read every WATCH_INTERVAL_S), and ends once the
    server stops accepting, after sending NOT_SERVING: a watcher never holds up the shutdown's drain."""

    def __init__(self, engine: EngineAPI) -> None:
        self.engine = engine
        self.stopping = asyncio.Event()

    async def _status(self) -> int:
        try:
            serving = await self.engine.is_ready()
        except ModelhostError:  # the engine is going away (a frontend process at shutdown)
            serving = False
        if serving and not self.stopping.is_set():
            return int(health_pb2.HealthCheckResponse.SERVING)
        return int(health_pb2.HealthCheckResponse.NOT_SERVING)

    async def Check(self, request: Any, context: GrpcCall) -> Any:
        return health_pb2.HealthCheckResponse(status=await self._status())

    async def Watch(self, request: Any, context: GrpcCall) -> AsyncIterator[Any]:
        sent: int | None = None
        while True:
            status = await self._status()
            if status != sent:
                yield health_pb2.HealthCheckResponse(status=status)
                sent = status
            if self.stopping.is_set():
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), WATCH_INTERVAL_S)

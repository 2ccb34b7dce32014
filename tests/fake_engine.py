"""A stand-in for the engine behind `EngineAPI`: one model, `echo`, whose answer is its inputs (as outputs named
after them), and a record of every call. Route, codec and transport tests drive frontends against it in process,
as Starlette's test client drives an app."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.datatypes import WIRE_TO_NUMPY
from modelhost.engine_api import CallContext, ModelSignature, ShmKind
from modelhost.errors import DecoupledModel, InvalidArgument, NotFound, Unsupported
from modelhost.io_specs import TensorSpec
from modelhost.types import FINAL_RESPONSE, InferenceRequest, InferenceResponse, Tensor

MODEL = "echo"
DECOUPLED = "echo_stream"  # answers each request with one response per input, then an empty final one


def _config(name: str) -> ModelConfig:
    config = ModelConfig(name=name, backend="python", max_batch_size=8)
    config.input.add(name="INPUT0", data_type=11, dims=[-1])  # TYPE_FP32
    return config


class FakeEngine:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.requests: list[InferenceRequest] = []
        self.contexts: list[CallContext | None] = []
        self.ready = True
        self.sent_calls: list[tuple[str, int, bool]] = []
        self.log_settings: dict[str, Any] = {"log_info": True, "log_verbose_level": 0}
        self.registered: dict[str, dict[str, Any]] = {}
        # Set to hold every inference until released (to test cancellation).
        self.hold: asyncio.Event | None = None
        self.cancelled = 0

    def _model(self, name: str) -> None:
        if name not in (MODEL, DECOUPLED):
            raise NotFound(f"Request for unknown model: '{name}' is not found")

    async def is_live(self) -> bool:
        return True

    async def is_ready(self) -> bool:
        return self.ready

    async def server_metadata(self) -> dict[str, Any]:
        return {"name": "fake", "version": "0", "extensions": ["statistics"]}

    async def model_ready(self, name: str, version: str = "") -> bool:
        return name == MODEL

    async def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        self._model(name)
        return {"name": name, "versions": ["1"], "platform": "python", "inputs": [], "outputs": []}

    async def model_config(self, name: str, version: str = "") -> Any:
        self._model(name)
        return _config(name)

    async def model_signature(self, name: str, version: str = "") -> ModelSignature:
        self._model(name)
        spec = TensorSpec("INPUT0", "FP32", WIRE_TO_NUMPY["FP32"], (-1,), None)
        return ModelSignature(name, "1", {"INPUT0": spec}, 8, name == DECOUPLED)

    async def check_request(self, request: InferenceRequest) -> None:
        self.calls.append(("check_request", request.model_name))
        if not request.inputs:
            raise InvalidArgument("expected 1 inputs but got 0 inputs for model")

    def _answer(self, request: InferenceRequest) -> InferenceResponse:
        outputs = [Tensor(t.name, t.datatype, list(t.shape), t.data, shm=t.shm) for t in request.inputs]
        return InferenceResponse(request.model_name, "1", request.id, outputs, {"answered": True})

    async def infer(self, request: InferenceRequest, context: CallContext | None = None) -> InferenceResponse:
        self._model(request.model_name)
        self.requests.append(request)
        self.contexts.append(context)
        if request.model_name == DECOUPLED:
            raise DecoupledModel()
        if request.parameters.get("fail"):
            raise Unsupported(f"asked to fail: {request.parameters['fail']}")
        if self.hold is not None:
            try:
                await self.hold.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return self._answer(request)

    async def infer_stream(
        self, request: InferenceRequest, context: CallContext | None = None
    ) -> AsyncIterator[InferenceResponse]:
        self._model(request.model_name)
        self.requests.append(request)
        self.contexts.append(context)
        if request.model_name == MODEL:
            response = self._answer(request)
            response.parameters[FINAL_RESPONSE] = True
            yield response
            return
        try:
            for i, tensor in enumerate(request.inputs):
                if self.hold is not None:
                    await self.hold.wait()
                one = InferenceResponse(
                    request.model_name, "1", request.id, [tensor], {FINAL_RESPONSE: False}
                )
                if tensor.name == "BAD":
                    one = InferenceResponse(request.model_name, "1", request.id, [], {FINAL_RESPONSE: False})
                    one.error = InvalidArgument(f"bad input {i}")
                yield one
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        yield InferenceResponse(request.model_name, "1", request.id, [], {FINAL_RESPONSE: True})

    def sent(self, request: InferenceRequest, send_started_ns: int, *, last: bool = True) -> None:
        self.sent_calls.append((request.model_name, send_started_ns, last))

    def refused(self, name: str, version: str) -> None:
        self.calls.append(("refused", (name, version)))

    async def statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        if name:
            self._model(name)
        return [{"name": MODEL, "version": "1", "inference_count": len(self.requests)}]

    async def logging_settings(self, changes: dict[str, Any] | None = None) -> dict[str, Any]:
        if changes:
            if "log_file" in changes:
                raise InvalidArgument("log file location can not be updated through network protocol")
            self.log_settings.update(changes)
        return dict(self.log_settings)

    async def trace_settings(self, model: str = "", changes: dict[str, Any] | None = None) -> dict[str, Any]:
        self.calls.append(("trace_settings", (model, changes)))
        return {"trace_level": ["OFF"], "trace_rate": "1000"}

    async def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        return [{"name": MODEL, "version": "1", "state": "READY"}]

    async def load_model(self, name: str, parameters: dict[str, Any], *, files_base64: bool) -> None:
        self.calls.append(("load_model", (name, parameters, files_base64)))

    async def unload_model(self, name: str, parameters: dict[str, Any]) -> None:
        self.calls.append(("unload_model", (name, parameters)))

    async def reload_if_evicted(self, name: str) -> None:
        self.calls.append(("reload_if_evicted", name))

    async def register_models(self, alias: str, url: str, names: dict[str, str]) -> None:
        self.registered[alias] = {"target": next(iter(names)), "url": url, "names": list(names)}

    async def forget_models(self, alias: str) -> None:
        self.registered.pop(alias, None)

    async def model_aliases(self, alias: str = "") -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.registered.items() if not alias or k == alias}

    async def settled(self, timeout: float | None = None) -> bool:
        return True

    async def check_shared_memory(self, kind: ShmKind) -> None:
        if kind == "cuda":
            raise Unsupported("CUDA shared memory needs a GPU")

    async def shared_memory_status(self, kind: ShmKind, name: str = "") -> list[dict[str, Any]]:
        return [{"name": name or "r", "key": "/k", "offset": 0, "byte_size": 8}]

    async def register_system_shared_memory(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.calls.append(("register_system_shared_memory", (name, key, offset, byte_size)))

    async def register_cuda_shared_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        self.calls.append(("register_cuda_shared_memory", (name, raw_handle, device_id, byte_size)))

    async def unregister_shared_memory(self, kind: ShmKind, name: str = "") -> None:
        self.calls.append(("unregister_shared_memory", (kind, name)))


def fp32(name: str, values: list[float]) -> Tensor:
    data = np.array(values, dtype=np.float32)
    return Tensor(name, "FP32", [len(values)], data)

"""A python model calling the server: BLS requests (one response, or a decoupled stream of them) and model control
(load, unload, readiness), each answered to the model whatever happens, with Triton's wording and error codes; and
what it tells the server: its log lines, its custom metrics, the activities it reports in a request's trace."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from typing import Any

from modelhost.backends.api import BackendServices
from modelhost.backends.python import ipc
from modelhost.backends.python.ipc import as_refs, put_tensor, read_tensor, shared_blocks
from modelhost.backends.python.process import Stub, StubFailed
from modelhost.backends.sequence import SEQUENCE_END, SEQUENCE_START
from modelhost.errors import (
    AlreadyExists,
    Cancelled,
    InternalError,
    InvalidArgument,
    ModelhostError,
    NotFound,
    Unavailable,
    UnknownError,
    Unsupported,
)
from modelhost.types import InferenceRequest, RequestedOutput, Tensor

log = logging.getLogger("modelhost.python")

# pb_utils.TritonError codes (Triton's enum order) <-> modelhost's errors.
ERRORS_BY_CODE: dict[int, type[ModelhostError]] = {
    0: UnknownError,
    1: InternalError,  # INTERNAL
    2: NotFound,
    3: InvalidArgument,
    4: Unavailable,
    5: Unsupported,
    6: AlreadyExists,
    7: Cancelled,
}
_CODES_BY_ERROR: dict[type[ModelhostError], int] = {
    UnknownError: 0,
    NotFound: 2,
    InvalidArgument: 3,
    Unavailable: 4,
    Unsupported: 5,
    AlreadyExists: 6,
    Cancelled: 7,
}


def error_code(error: ModelhostError) -> int:
    for cls in type(error).__mro__:
        if cls in _CODES_BY_ERROR:
            return _CODES_BY_ERROR[cls]
    return 1


class ModelCalls:
    """The calls one instance's model makes (on the event loop): `name` names the instance in the log."""

    def __init__(self, name: str, services: BackendServices, stub_timeout_s: float) -> None:
        self.name = name
        self.services = services
        self.stub_timeout_s = stub_timeout_s
        # The traces of the traced requests the model is running, by id: its BLS requests that name one (through
        # `trace=request.trace()`) are traced as that trace's children.
        self.traces: dict[int, Any] = {}

    async def on_bls(self, stub: Stub, message: dict[str, Any]) -> None:
        """Run a model's BLS request through the server. Whatever happens, the model gets a final reply (an
        error one, if need be): a model waiting for a reply that never comes would hang its instance."""
        server = self.services.engine
        reply_id, model = message["id"], message["model"]
        child = None
        try:
            request = self._request(stub, message)
            if server is None:
                raise Unavailable("BLS is not available: the model runs outside a server")
            if not server.model_healthy(model, request.model_version):
                raise InternalError(
                    f"Failed for execute the inference request. Model '{model}' is not ready."
                )
            if server.decoupled(model, request.model_version) and not message["decoupled"]:
                raise InternalError(
                    f"Model {model} is using the decoupled. The current BLS request call doesn't support models "
                    "using the decoupled transaction policy. Please use 'decoupled=True' argument to the 'exec' "
                    "or 'async_exec' calls for decoupled models.'"
                )
            parent = self.traces.get(message.get("trace_id") or 0)
            if parent is not None:  # a child of the calling request's trace, as Triton's BLS traces are
                child = request.trace = server.tracer.child(parent, model, request.model_version or "-1")
            if message["decoupled"]:
                async for response in server.infer_stream(request):
                    midway = response.error if isinstance(response.error, ModelhostError) else None
                    self._reply(stub, reply_id, response.outputs, midway, final=False)
                self._reply(stub, reply_id, [], None, final=True)
            else:
                response = await server.infer(request)
                self._reply(stub, reply_id, response.outputs, None, final=True)
            return
        except asyncio.CancelledError:  # the model cancelled its decoupled BLS stream, or its stub went away
            error: ModelhostError = Cancelled(f"the BLS request to model '{model}' was cancelled")
        except ModelhostError as e:
            error = e
        except Exception as e:  # a fault of ours: still an answer for the model, and a trace in the log
            log.exception("BLS request of model instance '%s' to '%s' failed", self.name, model)
            error = InternalError(f"{type(e).__name__}: {e}")
        finally:
            if child is not None and server is not None:
                server.tracer.finish(child)
        # Triton's wording: the model called, then what went wrong; returned to the model, never raised.
        wrapped = type(error)(f"Model {model} - Error when running inference: {error}")
        with contextlib.suppress(StubFailed):  # only if our own stub has gone meanwhile
            self._reply(stub, reply_id, [], wrapped, final=True)

    def _request(self, stub: Stub, message: dict[str, Any]) -> InferenceRequest:
        """The request a BLS message describes, its inputs copied out of the stub's memory (freed at once)."""
        refs = as_refs(message["inputs"])
        try:
            inputs = [
                Tensor(ref.name, ref.datatype, list(ref.shape), read_tensor(stub.segments, ref))
                for ref in refs
            ]
        finally:
            stub.frees.extend(shared_blocks(refs))
        parameters = json.loads(message["parameters"] or "{}")
        if not isinstance(parameters, dict):
            raise InvalidArgument("BLS request parameters must be a JSON object")
        # A stateful BLS request (correlation_id and flags) reaches the sequence batcher as a client's would.
        correlation_id, flags = message.get("correlation_id", 0), int(message.get("flags") or 0)
        if correlation_id not in (0, ""):
            parameters["sequence_id"] = correlation_id
        if flags & SEQUENCE_START:
            parameters["sequence_start"] = True
        if flags & SEQUENCE_END:
            parameters["sequence_end"] = True
        return InferenceRequest(
            model_name=message["model"],
            model_version=message["version"],
            id=message["request_id"],
            inputs=inputs,
            outputs=[RequestedOutput(name) for name in message["outputs"]],
            parameters=parameters,
            timeout_us=int(message["timeout"] or 0),
        )

    def _reply(
        self, stub: Stub, reply_id: int, outputs: list[Tensor], error: ModelhostError | None, final: bool
    ) -> None:
        refs = [put_tensor(stub.arena, t.name, t.data, t.datatype) for t in outputs]
        stub.send(
            {
                "op": "reply",
                "id": reply_id,
                "outputs": refs,
                "error": None if error is None else (str(error), error_code(error)),
                "final": final,
            }
        )

    async def on_control(self, stub: Stub, message: dict[str, Any]) -> None:
        result, error = await self.control(message)
        with contextlib.suppress(StubFailed):
            stub.send({"op": "reply", "id": message["id"], "result": result, "error": error})

    def on_control_while_starting(self, stub: Stub, message: dict[str, Any]) -> None:
        """Model control from `initialize` (Triton serves it: a model may load the models it calls), on the
        loading thread while the stub's socket is not yet the event loop's: the request runs on the loop, the
        answer goes back on the blocking socket. Bounded by the stub timeout: a load that waits on this one (the
        model loading itself) fails instead of waiting forever."""
        loop = self.services.loop
        result: Any = None
        error: str | None = None
        if loop is None:
            error = "model control is not available: the model runs outside a server"
        else:
            future = asyncio.run_coroutine_threadsafe(self.control(message), loop)
            try:
                result, error = future.result(self.stub_timeout_s)
            except TimeoutError:
                future.cancel()
                error = (
                    f"the model control request did not complete within {self.stub_timeout_s:g} s "
                    "(a load waiting for this model's own load?)"
                )
        reply = {"op": "reply", "id": message["id"], "result": result, "error": error}
        with contextlib.suppress(OSError):
            stub.sock.sendall(ipc.encode(reply))

    async def control(self, message: dict[str, Any]) -> tuple[Any, str | None]:
        server = self.services.engine
        kwargs = message.get("kwargs") or {}
        result: Any = None
        error: str | None = None
        try:
            if server is None:
                raise Unavailable("model control is not available: the model runs outside a server")
            op, name = message["control"], message["model"]
            if op == "load":
                parameters: dict[str, Any] = {}
                if kwargs.get("config"):
                    parameters["config"] = kwargs["config"]
                for path, content in (kwargs.get("files") or {}).items():
                    parameters[path] = content
                await server.load_model(name, parameters, files_base64=False)
            elif op == "unload":
                await server.unload_model(name, {"unload_dependents": bool(kwargs.get("unload_dependents"))})
            else:
                result = server.model_healthy(name, str(kwargs.get("model_version") or ""))
        except ModelhostError as e:
            error = str(e)
        except Exception as e:  # still an answer: the model waits for one
            log.exception("model control request of model instance '%s' failed", self.name)
            error = f"{type(e).__name__}: {e}"
        return result, error

    # -- what the model tells the server -----------------------------------------------------------------------

    def on_log(self, message: dict[str, Any]) -> None:
        level = {"INFO": logging.INFO, "WARNING": logging.WARNING, "ERROR": logging.ERROR}.get(
            message["level"], logging.DEBUG
        )
        where = f"{os.path.basename(message.get('file') or 'model.py')}:{message.get('line', 0)}"
        log.log(level, "%s: %s", where, message["message"])

    def on_trace_activity(self, message: dict[str, Any]) -> None:
        """A custom activity, in a request that is still running."""
        trace = self.traces.get(message["trace"])
        if trace is not None:
            trace.stamp(str(message["name"]), int(message["ns"]))

    def on_metric(self, stub: Stub, message: dict[str, Any]) -> None:
        metrics = self.services.custom_metrics
        op = message["op"]
        try:
            if op == "metric_family":
                metrics.register_family(message["name"], message["description"], message["kind"])
            elif op == "metric":
                metrics.register(
                    stub.number, message["metric"], message["family"], message["labels"], message["buckets"]
                )
            elif op == "metric_update":
                metrics.update(stub.number, message["metric"], message["update"], message["value"])
            else:
                value = metrics.value(stub.number, message["metric"])
                stub.send({"op": "reply", "id": message["id"], "value": value})
        except ModelhostError as e:
            log.error("model instance '%s': %s", self.name, e)

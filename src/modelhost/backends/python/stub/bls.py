"""The model's BLS requests from the stub: sent to the server with their inputs in our arena, answered with one
response or a stream of them (a decoupled request), blocking the calling thread or awaited on the model's event
loop; the answers' outputs copied out of the server's memory (onto a GPU where the request preferred one)."""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Awaitable, Iterator
from typing import Any

from modelhost.backends.python import pb_utils
from modelhost.backends.python.ipc import as_refs, put_tensor, read_tensor, shared_blocks, view_tensor
from modelhost.backends.python.stub.connection import Connection
from modelhost.backends.python.stub.model import ModelRunner


class _ResponseStream:
    """The responses of a decoupled BLS request, as they arrive; iterating ends after the final one."""

    def __init__(self, calls: BlsCalls, bls_id: int, device: int | None) -> None:
        self._calls = calls
        self._id = bls_id
        self._device = device  # where its outputs go (a GPU the request preferred), or None
        self.queue: queue.Queue[dict[str, Any]] = calls.connection.stream(bls_id)

    def __iter__(self) -> Iterator[pb_utils.InferenceResponse]:
        while True:
            reply = self._next_reply()
            response = self._calls.response_from_reply(reply, self._device)
            if reply.get("outputs") or reply.get("error"):
                yield response
            if reply.get("final", True):
                return

    def _next_reply(self) -> dict[str, Any]:
        self._calls.connection.wait_until(lambda: not self.queue.empty())
        return self.queue.get_nowait()

    def cancel(self) -> None:
        self._calls.connection.channel_send({"op": "bls_cancel", "id": self._id})


class BlsCalls:
    def __init__(self, connection: Connection, runner: ModelRunner) -> None:
        self.connection = connection
        self.runner = runner

    def _bls_message(
        self, request: pb_utils.InferenceRequest, decoupled: bool, timeout_us: int
    ) -> dict[str, Any]:
        self.connection.check_process("BLS")
        if not self.runner.initialized or self.runner.finalizing:
            raise pb_utils.TritonModelException("BLS is only supported during the 'execute' function.")
        arena = self.connection.arena
        inputs = [put_tensor(arena, t.name(), t._host_array()) for t in request.inputs()]
        version = request.model_version()
        return {
            "op": "bls",
            "model": request.model_name(),
            "version": "" if version in (-1, "", None) else str(version),
            "inputs": inputs,
            "outputs": list(request.requested_output_names()),
            "request_id": request.request_id(),
            "correlation_id": request.correlation_id(),
            "flags": request.flags(),
            "timeout": timeout_us or request.timeout(),
            "parameters": request.parameters(),
            "decoupled": decoupled,
            "trace_id": request.trace()._id,  # a child of that request's trace, when it is traced
        }

    def exec_bls(self, request: pb_utils.InferenceRequest, decoupled: bool, timeout_us: int) -> Any:
        message = self._bls_message(request, decoupled, timeout_us)
        device = _preferred_gpu(request)
        if decoupled:
            waiter_id = self.connection.next_id()
            stream = _ResponseStream(self, waiter_id, device)
            self.connection.channel_send({**message, "id": waiter_id})
            return pb_utils.ResponseIterator(iter(stream), stream.cancel)
        return self.response_from_reply(self.connection.request(message), device)

    def async_exec_bls(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Awaitable[Any]:
        message = self._bls_message(request, decoupled, 0)
        device = _preferred_gpu(request)
        loop = asyncio.get_running_loop()
        waiter_id = self.connection.next_id()
        if decoupled:
            return self._async_stream(loop, waiter_id, message, device)
        future = self.connection.reply_future(waiter_id, loop)
        self.connection.channel_send({**message, "id": waiter_id})
        return self._async_response(future, device)

    async def _async_response(
        self, future: asyncio.Future[dict[str, Any]], device: int | None
    ) -> pb_utils.InferenceResponse:
        return self.response_from_reply(await future, device)

    async def _async_stream(
        self, loop: asyncio.AbstractEventLoop, waiter_id: int, message: dict[str, Any], device: int | None
    ) -> pb_utils.ResponseIterator:
        """As Triton: `await request.async_exec(decoupled=True)` gives an iterator to loop over with `for`; it
        resolves once the last response is in, the model's event loop serving other coroutines meanwhile."""
        stream = _ResponseStream(self, waiter_id, device)
        self.connection.channel_send({**message, "id": waiter_id})
        responses: list[pb_utils.InferenceResponse] = []
        while True:
            reply = await loop.run_in_executor(None, stream.queue.get)
            response = self.response_from_reply(reply, device)  # also frees what the reply carries
            if reply.get("outputs") or reply.get("error"):
                responses.append(response)
            if reply.get("final", True):
                return pb_utils.ResponseIterator(responses, stream.cancel)

    def response_from_reply(
        self, reply: dict[str, Any], device: int | None = None
    ) -> pb_utils.InferenceResponse:
        """A BLS answer as the model sees it: outputs copied out of the server's memory (onto CUDA device `device`
        where the request preferred GPU memory), errors not raised."""
        tensors = []
        refs = as_refs(reply.get("outputs"))
        segments = self.connection.segments
        try:
            for ref in refs:
                if device is None:
                    tensors.append(pb_utils.Tensor(ref.name, read_tensor(segments, ref)))
                else:
                    tensors.append(pb_utils.Tensor._to_gpu(ref.name, view_tensor(segments, ref), device))
        finally:
            self.connection.release_server_blocks(shared_blocks(refs))
        error = reply.get("error")
        if error is not None:
            message, code = error
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))
        return pb_utils.InferenceResponse(output_tensors=tensors, parameters=reply.get("parameters") or {})


def _preferred_gpu(request: pb_utils.InferenceRequest) -> int | None:
    """The CUDA device a BLS request wants its outputs on, or None for host memory."""
    preferred = request._preferred_memory()
    if preferred.preferred_memory_type == pb_utils.MemoryType.TRITONSERVER_MEMORY_GPU:
        return preferred.preferred_device_id
    return None

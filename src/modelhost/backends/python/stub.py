"""The stub process of one python model instance: imports the user's model.py and runs it for the server.

    python -m modelhost.backends.python.stub <socket fd> <shm prefix> <shm default bytes> <shm growth bytes>

Threads: the main thread reads the socket and runs the model (initialize, execute, finalize) one call at a time,
in the order the server sends them. A hand-off to a reader thread cost more than a small model's execute, so
there is none: whichever thread waits for a reply (a BLS result, a metric value; the main thread also for a
coroutine or `is_cancelled()`) reads the socket meanwhile, one at a time (`_reader`), and hands the replies it
reads to their waiters. So a model's own threads get their BLS replies while its main thread is busy in the
model's code (joining those threads, as Triton's BLS qa model does). Calls the server sends (execute, ...) are
run by the main thread only. An event loop thread runs `async def execute` and `async_exec`. The process ends
when the server closes its end of the socket, or after finalize.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import inspect
import itertools
import json
import os
import queue
import select
import socket
import sys
import threading
import traceback
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from modelhost.backends.python import gpu_tensors, pb_utils
from modelhost.backends.python.ipc import (
    Arena,
    BlockingChannel,
    SegmentMap,
    as_refs,
    put_tensor,
    read_tensor,
    shared_blocks,
    view_tensor,
)

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class _ServerGone(Exception):
    """The server closed its end (or asked us to finalize): the process ends."""


_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)


class ExecuteError(Exception):
    """A model that broke the execute contract (wrong number of responses, ...): said as Triton says it, without
    an exception type or a traceback of ours."""


def error_text(error: BaseException) -> str:
    """An exception as Triton's python backend words it: the type and message, then where it happened in the
    model's own code (innermost first; the stub's frames are not the user's business)."""
    if isinstance(error, ExecuteError):
        return str(error)
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith(_PACKAGE_DIR)]
    where = "".join(f"  {f.filename}({f.lineno}): {f.name}\n" for f in reversed(frames))
    return f"{type(error).__name__}: {error}" + (f"\n\nAt:\n{where}" if where else "")


class _ResponseStream:
    """The responses of a decoupled BLS request, as they arrive; iterating ends after the final one."""

    def __init__(self, stub: Stub, bls_id: int, device: int | None) -> None:
        self._stub = stub
        self._id = bls_id
        self._device = device  # where its outputs go (a GPU the request preferred), or None
        self.queue: queue.Queue[dict[str, Any]] = queue.Queue()

    def __iter__(self) -> Iterator[pb_utils.InferenceResponse]:
        while True:
            reply = self._next_reply()
            response = self._stub.response_from_reply(reply, self._device)
            if reply.get("outputs") or reply.get("error"):
                yield response
            if reply.get("final", True):
                return

    def _next_reply(self) -> dict[str, Any]:
        self._stub.wait_until(lambda: not self.queue.empty())
        return self.queue.get_nowait()

    def cancel(self) -> None:
        self._stub.channel_send({"op": "bls_cancel", "id": self._id})


class Stub:
    def __init__(self, sock: socket.socket, prefix: str, default_size: int, growth: int) -> None:
        self.channel = BlockingChannel(sock)
        self.arena = Arena(prefix, default_size, growth)
        self.segments = SegmentMap()
        self.model: Any = None
        self.model_name = ""
        self.instance_name = ""
        self.decoupled = False
        # BLS only between initialize and finalize, as Triton (its parent side serves it on the running server).
        self.initialized = False
        self.finalizing = False
        # The CUDA device inputs are given on (FORCE_CPU_ONLY_INPUT_TENSORS "no" on a KIND_GPU instance), or None.
        self.input_device: int | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, concurrent.futures.Future[dict[str, Any]] | _ResponseStream] = {}
        self._async_waiting: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[dict[str, Any]]]] = {}
        self._cancelled: set[int] = set()
        # Input blocks of requests still alive (decoupled ones outlive execute), by request key.
        self._inputs: dict[int, list[tuple[str, int]]] = {}
        self._sent: dict[int, dict[str, Any] | None] = {}  # non-decoupled responses sent through a sender
        self._frees: list[tuple[str, int]] = []  # the server's blocks we are done with
        self._frees_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main = threading.get_ident()
        self._pid = os.getpid()
        self._busy = False
        self._deferred: list[dict[str, Any]] = []
        # Written when what the reading thread waits for ends otherwise than by a message (a coroutine), so that
        # its select() returns.
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)
        # The socket is read by one thread at a time: the one holding `_reader`. `_read` is notified after every
        # read and when the reader lets go, so that the other waiting threads look at their replies or take over.
        self._reader = threading.Lock()
        self._read = threading.Condition()

    # -- messaging ---------------------------------------------------------------------------------------------

    def _check_process(self, what: str) -> None:
        if os.getpid() != self._pid:
            # A process the model forked (multiprocessing) shares this process's one connection and shared
            # memory: its messages and replies, and its blocks, would mix with ours. Refused clearly instead.
            raise pb_utils.TritonModelException(
                f"{what} from a process forked by the model (multiprocessing) is not supported by modelhost's "
                "python backend: use threads, or call the server from the model's own process"
            )

    def channel_send(self, message: dict[str, Any]) -> None:
        self._check_process(f"'{message.get('op')}'")
        with self._frees_lock:
            if self._frees:
                message["free"], self._frees = self._frees, []
        self.channel.send(message)

    def release_server_block(self, segment: str, offset: int) -> None:
        with self._frees_lock:
            self._frees.append((segment, offset))

    def _read_once(self, timeout: float | None) -> None:
        """Read what has arrived (or a wake-up) and route it; the caller holds `_reader`. Replies go to their
        waiters; calls of the server wait for the main thread."""
        readable, _, _ = select.select([self.channel.sock, self._wake_r], [], [], timeout)
        if self._wake_r in readable:
            self._wake_r.recv(4096)
        if self.channel.sock in readable:
            messages = self.channel.receive_once()
            if messages is None:
                raise _ServerGone
            for message in messages:
                if self._route(message) is not None:
                    self._deferred.append(message)  # a call: the main thread runs it, in order

    def _release_reader(self) -> None:
        with self._read:
            self._reader.release()
            self._read.notify_all()

    def wait_until(self, done: Callable[[], bool], timeout: float | None = None) -> None:
        """Wait until `done()` (made true by a reply, or a wake-up), reading the socket meanwhile unless another
        thread does. With `timeout` 0: read what has arrived, if no other thread is reading, and return."""
        while not done():
            if self._reader.acquire(blocking=False):
                try:
                    while not done():
                        self._read_once(timeout)
                        with self._read:
                            self._read.notify_all()
                        if timeout is not None:
                            return
                finally:
                    self._release_reader()
                return
            if timeout is not None:
                return
            with self._read:
                if not done() and self._reader.locked():
                    self._read.wait()

    def _route(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """Handle what any thread may (free lists, cancellations, replies); return a call of the server."""
        for segment, offset in message.pop("free", ()):
            self.arena.free(segment, offset)
        op = message["op"]
        if op == "free":
            return None  # only its free list, handled above
        if op == "cancel":
            self._cancelled.add(message["key"])
            return None
        if op == "reply":
            self._answer(message)
            return None
        return message

    def handle(self, message: dict[str, Any]) -> None:
        """Run a call of the server (on the main thread), or keep it for later while another one runs."""
        if self._route(message) is None:
            return
        op = message["op"]
        if self._busy:
            self._deferred.append(message)  # the server sends one call at a time; kept in order all the same
        else:
            self._busy = True
            try:
                getattr(self, f"on_{op}")(message)
            finally:
                self._busy = False
            if op == "finalize":
                raise _ServerGone

    def _answer(self, message: dict[str, Any]) -> None:
        waiter_id = message["id"]
        asynchronous = self._async_waiting.pop(waiter_id, None)
        if asynchronous is not None:
            loop, future = asynchronous
            loop.call_soon_threadsafe(_resolve, future, message)
            return
        waiter = self._waiting.get(waiter_id)
        if isinstance(waiter, _ResponseStream):
            waiter.queue.put(message)
            if message.get("final", True):
                del self._waiting[waiter_id]
        elif waiter is not None:
            del self._waiting[waiter_id]
            waiter.set_result(message)

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send and wait for the server's reply. The main thread reads the reply itself; another thread of the
        model waits while the main thread (idle or waiting too) reads it."""
        waiter_id = next(self._ids)
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        self._waiting[waiter_id] = future
        self.channel_send({**message, "id": waiter_id})
        reply: dict[str, Any] = self._wait(future)
        return reply

    def _wait(self, future: concurrent.futures.Future[Any]) -> Any:
        # A future another thread completes (a coroutine) wakes the reading thread's select().
        future.add_done_callback(lambda _: self._wake_w.send(b"."))
        self.wait_until(future.done)
        return future.result()

    # -- the main thread ---------------------------------------------------------------------------------------

    def serve(self) -> None:
        """One thread reads and runs everything: a hand-off to another thread costs more than a small model."""
        try:
            while True:
                while self._deferred and not self._busy:
                    self.handle(self._deferred.pop(0))
                if not self._reader.acquire(blocking=False):
                    # A thread of the model reads for its replies: it keeps the calls it reads for us.
                    with self._read:
                        if self._reader.locked() and not self._deferred:
                            self._read.wait()
                    continue
                try:
                    if self._deferred:
                        continue
                    # Idle: nothing but the socket can need us (no coroutine of ours is waited for), so a plain
                    # blocking read, one system call per message instead of select() and read.
                    messages = self.channel.receive_once()
                    if messages is None:
                        raise _ServerGone
                    calls = [m for m in messages if self._route(m) is not None]
                finally:
                    self._release_reader()
                for message in calls:
                    self.handle(message)
        except _ServerGone:
            return

    def on_init(self, message: dict[str, Any]) -> None:
        try:
            self.model_name = message["args"]["model_name"]
            self.instance_name = message["args"]["model_instance_name"]
            self.decoupled = message["decoupled"]
            self.input_device = message.get("input_device")
            if self.input_device is not None:
                # Without torch or CuPy, the load fails here, not every request later.
                pb_utils._gpu(gpu_tensors.framework)
            pb_utils._set_model_dir(str(Path(message["model_file"]).parent))
            module = self._import(message["model_file"])
            self.model = module.TritonPythonModel()
            initialize = getattr(self.model, "initialize", None)
            if initialize is not None:
                # The model is imported: its own initialize may take as long as it takes, as in Triton (the
                # stub timeout bounds the start only). The server stops counting.
                self.channel_send({"op": "initializing"})
                self._call(initialize, message["args"])
            self.initialized = True
        except BaseException as e:
            self.channel_send({"op": "init_done", "error": error_text(e)})
            return
        self.channel_send({"op": "init_done", "error": None, "has_is_ready": hasattr(self.model, "is_ready")})

    def on_auto_complete(self, message: dict[str, Any]) -> None:
        try:
            module = self._import(message["model_file"])
        except BaseException as e:
            self.channel_send({"op": "auto_complete_done", "error": error_text(e), "stage": "import"})
            return
        try:
            cls = module.TritonPythonModel
            config = pb_utils.ModelConfig(json.loads(message["config"]))
            hook = getattr(cls, "auto_complete_config", None)
            if hook is not None:
                config = hook(config)
                if not isinstance(config, pb_utils.ModelConfig):
                    name = json.loads(message["config"]).get("name", "")
                    raise pb_utils.TritonModelException(
                        f"auto_complete_config function in model '{name}' must return a valid pb.ModelConfig "
                        "object."
                    )
            result = json.dumps(config.as_dict())
        except BaseException as e:
            self.channel_send({"op": "auto_complete_done", "error": error_text(e)})
            return
        self.channel_send({"op": "auto_complete_done", "error": None, "config": result})

    def _import(self, model_file: str) -> Any:
        path = Path(model_file)
        sys.path.insert(0, str(path.parent))  # model.py may import its neighbours, as in Triton
        spec = importlib.util.spec_from_file_location("model", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules["model"] = module
        spec.loader.exec_module(module)
        return module

    def _call(self, fn: Any, *args: Any) -> Any:
        """Call a model method; coroutines run on the stub's event loop while this thread waits."""
        result = fn(*args)
        if inspect.isawaitable(result):
            return self._wait(asyncio.run_coroutine_threadsafe(_awaited(result), self.event_loop()))
        return result

    def event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="stub-asyncio", daemon=True).start()
            self._loop = loop
        return self._loop

    def on_is_ready(self, message: dict[str, Any]) -> None:
        check = getattr(self.model, "is_ready", None)
        try:
            ready = True if check is None else bool(self._call(check))
        except BaseException:
            ready = False
        self.channel_send({"op": "ready_done", "id": message["id"], "ready": ready})

    def on_finalize(self, message: dict[str, Any]) -> None:
        self.finalizing = True
        finalize = getattr(self.model, "finalize", None)
        error = None
        if finalize is not None:
            try:
                self._call(finalize)
            except BaseException as e:
                error = error_text(e)
        self.channel_send({"op": "finalized", "error": error})

    # -- execute -----------------------------------------------------------------------------------------------

    def on_execute(self, message: dict[str, Any]) -> None:
        keys = [r["key"] for r in message["requests"]]
        reply: dict[str, Any] = {"op": "executed", "id": message["id"], "error": None, "responses": None}
        executed = False
        try:
            requests = [self._request(r) for r in message["requests"]]  # inputs onto a GPU can fail
            executed = True
            returned = self._call(self.model.execute, requests)
            rescheduled = [
                i
                for i, r in enumerate(requests)
                if r._release_flags() & pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
            ]
            if not self.decoupled:
                reply["responses"] = self._responses(requests, keys, returned, set(rescheduled))
            elif returned is not None:  # its responses go through the senders; these would be lost unsaid
                raise ExecuteError(
                    f"Python model '{self.instance_name}' is using the decoupled mode and the execute function "
                    "must return None."
                )
            if rescheduled:
                reply["rescheduled"] = rescheduled
                for index in rescheduled:  # run again, the server sends its inputs anew
                    self._release_inputs(keys[index])
        except BaseException as e:
            reply["error"] = (
                f"Failed to process the request(s) for model '{self.instance_name}', message: {error_text(e)}"
            )
        finally:
            for key in keys:
                self._sent.pop(key, None)
                self._cancelled.discard(key)
                # A decoupled model's inputs last until its final response.
                if not self.decoupled or not executed:
                    self._release_inputs(key)
        self.channel_send(reply)

    def _request(self, data: dict[str, Any]) -> pb_utils.InferenceRequest:
        refs = as_refs(data["inputs"])
        self._inputs[data["key"]] = shared_blocks(refs)
        if self.input_device is None:
            segments = self.segments
            tensors = [pb_utils.Tensor._in_place(ref.name, view_tensor(segments, ref)) for ref in refs]
        else:
            device = self.input_device
            tensors = [
                pb_utils.Tensor._to_gpu(ref.name, view_tensor(self.segments, ref), device) for ref in refs
            ]
        return pb_utils.InferenceRequest._from_server(
            key=data["key"],
            model_name=self.model_name,
            model_version=data["model_version"],
            inputs=tensors,
            requested_output_names=data["outputs"],
            request_id=data["request_id"],
            correlation_id=data["correlation_id"],
            flags=data["flags"],
            timeout=data["timeout"],
            parameters_json=data["parameters"],
            decoupled=self.decoupled,
            trace_context=data.get("trace_context"),
            trace_id=data.get("trace_id", 0),
        )

    def _release_inputs(self, key: int) -> None:
        blocks = self._inputs.pop(key, None)
        if blocks:
            with self._frees_lock:
                self._frees.extend(blocks)

    def _responses(
        self, requests: list[pb_utils.InferenceRequest], keys: list[int], returned: Any, rescheduled: set[int]
    ) -> list[dict[str, Any] | None]:
        if returned is None and all(k in self._sent or i in rescheduled for i, k in enumerate(keys)):
            return [self._sent.get(k) for k in keys]  # every response went through its sender
        if not isinstance(returned, list | tuple):
            raise ExecuteError(
                f"Expected a list in the execute return, received type '{type(returned).__name__}'."
            )
        if len(returned) != len(keys):
            raise ExecuteError(
                f"Number of InferenceResponse objects do not match the number of InferenceRequest objects. "
                f"InferenceRequest(s) size is:{len(keys)}, and InferenceResponse(s) size is:{len(returned)}\n"
            )
        described: list[dict[str, Any] | None] = []
        for index, (request, key, response) in enumerate(zip(requests, keys, returned, strict=True)):
            if index in rescheduled:
                if response is not None:  # Triton's words, its spelling included
                    raise ExecuteError(
                        "Expected a None object in the execute function return list for reschduled request, got "
                        f"{type(response)}"
                    )
                described.append(None)
                continue
            if response is None:
                described.append(self._sent.get(key))
                continue
            # As Triton: a returned response counts as the request's one response (an error if the model also
            # sent one through the request's sender).
            request.get_response_sender()._update_state(response, FINAL)
            described.append(self.describe(response))
        return described

    def describe(self, response: pb_utils.InferenceResponse) -> dict[str, Any]:
        """A response for the server: its outputs copied into our arena, its error as (message, code)."""
        if not isinstance(response, pb_utils.InferenceResponse):
            raise pb_utils.TritonModelException(
                f"Expected an 'InferenceResponse' object in the execute function return list, found type "
                f"'{type(response).__name__}'."
            )
        error = response.error()
        outputs = (
            []
            if error is not None
            else [put_tensor(self.arena, t.name(), t._host_array()) for t in response.output_tensors()]
        )
        return {
            "outputs": outputs,
            "error": None if error is None else (error.message(), int(error.code())),
            "parameters": response.parameters(),
        }

    # -- the runtime seam of pb_utils --------------------------------------------------------------------------

    def send_response(self, key: int, response: pb_utils.InferenceResponse | None, flags: int) -> None:
        described = None if response is None else self.describe(response)
        if not self.decoupled:
            if described is not None or key not in self._sent:  # send(resp) then send(flags=FINAL): keep resp
                self._sent[key] = described
            return
        self.channel_send({"op": "response", "key": key, "response": described, "flags": flags})
        if flags & FINAL:
            self._release_inputs(key)

    def is_cancelled(self, key: int) -> bool:
        if key not in self._cancelled:
            # Read a cancellation that came meanwhile, unless another thread is reading (it routes it).
            self.wait_until(lambda: key in self._cancelled, timeout=0)
        return key in self._cancelled

    def _bls_message(
        self, request: pb_utils.InferenceRequest, decoupled: bool, timeout_us: int
    ) -> dict[str, Any]:
        self._check_process("BLS")
        if not self.initialized or self.finalizing:
            raise pb_utils.TritonModelException("BLS is only supported during the 'execute' function.")
        inputs = [put_tensor(self.arena, t.name(), t._host_array()) for t in request.inputs()]
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
            waiter_id = next(self._ids)
            stream = _ResponseStream(self, waiter_id, device)
            self._waiting[waiter_id] = stream
            self.channel_send({**message, "id": waiter_id})
            return pb_utils.ResponseIterator(iter(stream), stream.cancel)
        return self.response_from_reply(self.request(message), device)

    def async_exec_bls(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Awaitable[Any]:
        message = self._bls_message(request, decoupled, 0)
        device = _preferred_gpu(request)
        loop = asyncio.get_running_loop()
        waiter_id = next(self._ids)
        if decoupled:
            return self._async_stream(loop, waiter_id, message, device)
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._async_waiting[waiter_id] = (loop, future)
        self.channel_send({**message, "id": waiter_id})
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
        self._waiting[waiter_id] = stream
        self.channel_send({**message, "id": waiter_id})
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
        try:
            for ref in refs:
                if device is None:
                    tensors.append(pb_utils.Tensor(ref.name, read_tensor(self.segments, ref)))
                else:
                    tensors.append(pb_utils.Tensor._to_gpu(ref.name, view_tensor(self.segments, ref), device))
        finally:
            for segment, offset in shared_blocks(refs):
                self.release_server_block(segment, offset)
        error = reply.get("error")
        if error is not None:
            message, code = error
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))
        return pb_utils.InferenceResponse(output_tensors=tensors, parameters=reply.get("parameters") or {})

    def log(self, level: str, message: str, filename: str, line: int) -> None:
        if (
            os.getpid() != self._pid
        ):  # a forked process: its own stderr (the server's log) rather than an error
            print(f"{level} {filename}:{line}] {message}", file=sys.stderr, flush=True)
            return
        self.channel_send({"op": "log", "level": level, "message": message, "file": filename, "line": line})

    def trace_activity(self, trace_id: int, name: str, ns: int) -> None:
        self.channel_send({"op": "trace_activity", "trace": trace_id, "name": name, "ns": ns})

    def register_metric_family(self, name: str, description: str, kind: str) -> None:
        self.channel_send({"op": "metric_family", "name": name, "description": description, "kind": kind})

    def register_metric(self, family: str, labels: dict[str, str], buckets: list[float] | None) -> int:
        metric_id = next(self._ids)
        self.channel_send(
            {"op": "metric", "metric": metric_id, "family": family, "labels": labels, "buckets": buckets}
        )
        return metric_id

    def update_metric(self, metric_id: int, op: str, value: float) -> None:
        self.channel_send({"op": "metric_update", "metric": metric_id, "update": op, "value": value})

    def metric_value(self, metric_id: int) -> float:
        return float(self.request({"op": "metric_value", "metric": metric_id})["value"])

    def model_control(self, op: str, model_name: str, **kwargs: Any) -> Any:
        reply = self.request({"op": "control", "control": op, "model": model_name, "kwargs": kwargs})
        if reply.get("error"):
            raise pb_utils.TritonModelException(reply["error"])
        return reply.get("result")


def _preferred_gpu(request: pb_utils.InferenceRequest) -> int | None:
    """The CUDA device a BLS request wants its outputs on, or None for host memory."""
    preferred = request._preferred_memory()
    if preferred.preferred_memory_type == pb_utils.MemoryType.TRITONSERVER_MEMORY_GPU:
        return preferred.preferred_device_id
    return None


def _resolve(future: asyncio.Future[dict[str, Any]], message: dict[str, Any]) -> None:
    if not future.done():
        future.set_result(message)


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def main(argv: list[str]) -> int:
    fd, prefix, default_size, growth = int(argv[0]), argv[1], int(argv[2]), int(argv[3])
    # The model sees the argv of Triton's embedded interpreter, not the stub's own arguments (a model that runs
    # `unittest.main()`, as Triton's BLS qa models do, would take them for test names).
    sys.argv = [""]
    sock = socket.socket(fileno=fd)
    stub = Stub(sock, prefix, default_size, growth)
    sys.modules["triton_python_backend_utils"] = pb_utils
    pb_utils._set_runtime(stub)
    try:
        stub.serve()
    finally:
        stub.arena.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # threads of the model's own (and the reader) must not keep the process alive


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""One instance of a python model, seen from the server: a stub process, spawned, fed requests, watched (the stub
process itself: process.py; the model's calls into the engine: bls.py).

The instance is created (stub spawned, model initialized) on a loading thread with blocking I/O, then its socket
is handed to the event loop, where everything else happens: execute calls, decoupled responses, the model's BLS
calls into the server, its logs and metrics. A stub that dies fails only what it had in flight; the instance
restarts it and is not healthy (its model not ready) until the new stub has initialized.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import Any

from modelhost.backends.api import Arrays, BackendContext, Job, Outputs, Rescheduled
from modelhost.backends.params import group_kind, param
from modelhost.backends.python import ipc
from modelhost.backends.python.bls import ERRORS_BY_CODE, ModelCalls
from modelhost.backends.python.environments import environment_for
from modelhost.backends.python.ipc import Arena, as_refs, put_tensor, read_tensor, shared_blocks
from modelhost.backends.python.process import (
    FREES_PER_MESSAGE,
    SentBatch,
    Stub,
    StubFailed,
    StubProtocol,
    StubSettings,
    exchange,
    spawn_stub,
    stub_numbers,
)
from modelhost.backends.sequence import sequence_params
from modelhost.config import config_to_json
from modelhost.errors import (
    InternalError,
    InvalidArgument,
    ModelConfigError,
    ModelhostError,
    Unavailable,
)
from modelhost.host.host_policy import bound, placement_of
from modelhost.io_specs import TensorSpec, format_shape, output_specs
from modelhost.types import SEQUENCE_PARAMETERS

log = logging.getLogger("modelhost.python")

FINAL = 1  # TRITONSERVER_RESPONSE_COMPLETE_FINAL
READY_CHECK_TIMEOUT_S = 5.0


def input_device(config: Any, kind: str, device_id: int) -> int | None:
    """The CUDA device the model is given its inputs on, or None for host memory: `FORCE_CPU_ONLY_INPUT_TENSORS`
    "yes" (the default) keeps every input on the host; "no" lets them be on a GPU, as Triton does. Triton then gives
    each input where it last was; modelhost keeps tensors between models in host memory, so "no" gives them on the
    instance's GPU for a KIND_GPU instance, and on the host otherwise (docs/python-backend.md)."""
    value = param(config, "FORCE_CPU_ONLY_INPUT_TENSORS")
    if value is None or value == "yes":
        return None
    if value != "no":
        raise ModelConfigError(
            f"unable to load model '{config.name}': Incorrect value for FORCE_CPU_ONLY_INPUT_TENSORS: '{value}' "
            "(it can be 'yes' or 'no')"
        )
    return device_id if kind == "KIND_GPU" else None


class PythonInstance:
    # Jobs sent to the stub at once: it runs them one after the other (execute is never entered twice), and
    # the second is already in its socket when the first ends, instead of a round trip through the server.
    pipeline_depth = 2

    def __init__(self, ctx: BackendContext, group: Any, index: int, device_id: int, model_file: str) -> None:
        self.ctx = ctx
        self.name = f"{group.name}_{index}"
        self.model_name = ctx.model_name
        self.model_file = model_file
        self.settings = StubSettings.from_backend_config(ctx.backend_config)
        self.environment = environment_for(ctx.config, ctx.model_dir, self.settings.environments)
        # The model's BLS and model-control calls into the engine.
        self.calls = ModelCalls(self.name, ctx.services, self.settings.stub_timeout_seconds, self._send)
        self.decoupled = bool(ctx.config.model_transaction_policy.decoupled)
        self.iterative = bool(ctx.config.sequence_batching.iterative_sequence)
        self.outputs: dict[str, TensorSpec] = output_specs(ctx.config)
        self.max_batch_size = int(ctx.config.max_batch_size)
        kind = group_kind(group)
        self.input_device = input_device(ctx.config, kind, device_id)
        self.args = {
            "model_config": json.dumps(config_to_json(ctx.config)),
            "model_instance_kind": kind.removeprefix("KIND_"),
            "model_instance_name": self.name,
            "model_instance_device_id": str(device_id),
            "model_repository": str(ctx.model_dir),
            "model_version": str(ctx.version),
            "model_name": ctx.model_name,
        }
        self._ids = itertools.count(1)
        self._has_is_ready = False
        self._ready_checks: dict[int, asyncio.Future[bool]] = {}
        self._healthy = threading.Event()
        self._restart: asyncio.Task[None] | None = None
        self._failure: str | None = None
        self._closed = False
        self._stub = self._start_stub()
        self._attach(self._stub)

    # -- health ------------------------------------------------------------------------------------------------

    @property
    def healthy(self) -> bool:
        return self._healthy.is_set() and not self._closed

    # -- starting a stub (blocking: a loading thread, or a worker thread during a restart) ---------------------

    def _start_stub_placed(self) -> Stub:
        # Where the first one was started: the host policy (--host-policy) of this instance, if any.
        with bound(placement_of(self)):
            return self._start_stub()

    def _start_stub(self) -> Stub:
        number = next(stub_numbers)
        settings = self.settings
        process, sock, prefix = spawn_stub(settings, number, self.environment)
        stub = Stub(
            number,
            prefix,
            process,
            sock,
            Arena(prefix + "p_", settings.shm_default_byte_size, settings.shm_growth_byte_size),
        )
        try:
            reply = exchange(
                stub.sock,
                stub.process,
                {
                    "op": "init",
                    "args": self.args,
                    "model_file": self.model_file,
                    "decoupled": self.decoupled,
                    "input_device": self.input_device,
                },
                "init_done",
                settings.stub_timeout_seconds,
                f"model instance '{self.name}' of model '{self.model_name}'",
                lambda message: self._on_message_while_starting(stub, message),
                unbounded_after="initializing",
            )
            if reply.get("error"):
                # Triton's reason, which names the file and line in the model that failed.
                raise StubFailed(f"Internal: {reply['error']}")
            self._has_is_ready = bool(reply.get("has_is_ready"))
        except BaseException:
            self._kill(stub)
            raise
        self._healthy.set()
        return stub

    def _attach(self, stub: Stub) -> None:
        """Hand a new stub's socket to the event loop, from the loading thread."""
        loop = self.ctx.services.loop
        if loop is None:
            self._kill(stub)
            raise StubFailed("the python backend runs only inside a server (no event loop to serve it)")
        future = asyncio.run_coroutine_threadsafe(self._attach_async(stub), loop)
        future.result(self.settings.stub_timeout_seconds)

    async def _attach_async(self, stub: Stub) -> None:
        loop = asyncio.get_running_loop()
        stub.sock.setblocking(False)
        transport, _ = await loop.create_connection(
            lambda: StubProtocol(stub, self.on_message, self.on_stub_lost), sock=stub.sock
        )
        stub.transport = transport

    def _kill(self, stub: Stub) -> None:
        with contextlib.suppress(ProcessLookupError):
            stub.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            stub.process.wait(5)
        stub.sock.close()
        stub.segments.close()
        stub.arena.close()
        self._unlink_stub_segments(stub)

    def _unlink_stub_segments(self, stub: Stub) -> None:
        """The stub's own shared memory, left behind when it dies without cleaning up."""
        prefix = stub.prefix + "s_"
        with contextlib.suppress(OSError):
            for name in os.listdir(ipc.SHM_DIR):
                if name.startswith(prefix):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(ipc.SHM_DIR, name))

    # -- messages from the stub (on the event loop) ------------------------------------------------------------

    def _send(self, stub: Stub, message: dict[str, Any]) -> None:
        if stub.frees:
            message["free"], stub.frees = stub.frees, []
        if stub.transport is None or stub.transport.is_closing():
            raise StubFailed(f"the stub process of model instance '{self.name}' is not running")
        stub.transport.write(ipc.encode(message))

    def _on_message_while_starting(self, stub: Stub, message: dict[str, Any]) -> None:
        if message["op"] == "control":
            self.calls.on_control_while_starting(stub, message)
        else:
            self.on_message(stub, message)

    def on_message(self, stub: Stub, message: dict[str, Any]) -> None:
        for segment, offset in message.pop("free", ()):
            stub.arena.free(segment, offset)
        op = message["op"]
        if op == "executed":
            sent = stub.executing.pop(message["id"], None)
            if sent is not None:
                sent.on_reply(message)
        elif op == "response":
            self._on_response(stub, message)
        elif op == "log":
            self._on_log(message)
        elif op == "trace_activity":  # a custom activity, in a request that is still running
            trace = self.calls.traces.get(message["trace"])
            if trace is not None:
                trace.stamp(str(message["name"]), int(message["ns"]))
        elif op in ("metric_family", "metric", "metric_update", "metric_value"):
            self._on_metric(stub, message)
        elif op in ("bls", "control"):
            handler = self.calls.on_bls if op == "bls" else self.calls.on_control
            task = asyncio.get_running_loop().create_task(handler(stub, message))
            task_id: int = message["id"]
            stub.tasks[task_id] = task
            task.add_done_callback(lambda _: stub.tasks.pop(task_id, None))
        elif op == "finalized":
            if message.get("error"):
                log.error("finalize of model instance '%s' failed: %s", self.name, message["error"])
            stub.finalized.set()
        elif op == "ready_done":
            check = self._ready_checks.pop(message["id"], None)
            if check is not None and not check.done():
                check.set_result(bool(message["ready"]))
        elif op == "bls_cancel":  # the model cancelled a decoupled BLS stream: the called model hears of it
            bls = stub.tasks.get(message["id"])
            if bls is not None:
                bls.cancel()

    def _on_log(self, message: dict[str, Any]) -> None:
        level = {"INFO": logging.INFO, "WARNING": logging.WARNING, "ERROR": logging.ERROR}.get(
            message["level"], logging.DEBUG
        )
        where = f"{os.path.basename(message.get('file') or 'model.py')}:{message.get('line', 0)}"
        log.log(level, "%s: %s", where, message["message"])

    def _on_metric(self, stub: Stub, message: dict[str, Any]) -> None:
        metrics = self.ctx.services.custom_metrics
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
                self._send(stub, {"op": "reply", "id": message["id"], "value": value})
        except ModelhostError as e:
            log.error("model instance '%s': %s", self.name, e)

    # -- execute -----------------------------------------------------------------------------------------------

    def warm_up(self, inputs: Arrays, output_names: list[str]) -> None:
        """A warmup sample, from the loading thread (never the event loop's): as Triton's warmup sends it, one
        request per row of a batching model (a single one otherwise), run as one execution on the stub."""
        loop = self.ctx.services.loop
        if loop is None:
            raise StubFailed("the python backend runs only inside a server (no event loop to serve it)")
        rows = next(iter(inputs.values())).shape[0] if self.max_batch_size > 0 and inputs else 1
        if self.max_batch_size > 0:
            jobs = [
                Job({n: a[i : i + 1] for n, a in inputs.items()}, list(output_names), 1) for i in range(rows)
            ]
        else:
            jobs = [Job(dict(inputs), list(output_names), 1)]
        answered: concurrent.futures.Future[list[Arrays | BaseException]] = concurrent.futures.Future()
        loop.call_soon_threadsafe(self.submit, jobs, answered.set_result)
        for outcome in answered.result():
            if isinstance(outcome, BaseException):
                raise outcome

    def submit(self, jobs: list[Job], done: Callable[[list[Arrays | BaseException]], None]) -> None:
        """Send the requests to the stub now; `done` gets one outcome per job when the stub answers (called
        from the socket's callback, so the pool can start the next job without a trip through the loop)."""
        if self._failure is not None or (self._restart is not None and not self._restart.done()):
            asyncio.get_running_loop().create_task(self._submit_when_ready(jobs, done))
            return
        traced = [j.request.trace.id for j in jobs if j.request is not None and j.request.trace is not None]
        if traced:  # their traces take the model's BLS calls and activities until the batch is answered

            def forget_traces(outcomes: list[Arrays | BaseException], answer: Any = done) -> None:
                for trace_id in traced:
                    self.calls.traces.pop(trace_id, None)
                answer(outcomes)

            done = forget_traces
        stub = self._stub
        batch_id = next(self._ids)
        requests: list[dict[str, Any]] = []
        keys: list[int] = []
        try:
            for job in jobs:
                key = next(self._ids)
                keys.append(key)
                requests.append(self._describe(stub, key, job))
                job.on_cancel = lambda key=key: self._cancel(stub, key)
                if job.sink is not None:
                    stub.sinks[key] = job.sink
                    job.sink.on_cancel = job.on_cancel
        except (TypeError, ValueError) as e:
            done([InvalidArgument(f"model '{self.model_name}': {e}")] * len(jobs))
            return
        timeouts = [j.request.timeout_us for j in jobs if j.request is not None and j.request.timeout_us > 0]
        timer: asyncio.TimerHandle | None = None
        finished = False

        def settle() -> bool:
            """Whether this is the batch's one ending (a reply, a timeout or a resend): the first wins."""
            nonlocal finished
            if finished:
                return False
            finished = True
            if timer is not None:
                timer.cancel()
            return True

        def on_reply(reply: dict[str, Any]) -> None:
            if settle():
                done(self._outcomes(stub, jobs, keys, reply))

        def on_timeout() -> None:
            if not settle():
                return
            stub.executing.pop(batch_id, None)
            self._on_timeout(stub, min(timeouts))
            error = Unavailable(
                f"Request timeout expired: model '{self.model_name}' instance '{self.name}' did not finish "
                f"within {min(timeouts)} us; its stub process is restarted"
            )
            done([error] * len(jobs))

        def resend() -> None:
            if not settle():
                return
            for key in keys:
                stub.sinks.pop(key, None)
            asyncio.get_running_loop().create_task(self._submit_when_ready(jobs, done))

        stub.executing[batch_id] = SentBatch(on_reply, resend)
        try:
            self._send(stub, {"op": "execute", "id": batch_id, "requests": requests})
        except StubFailed as e:
            stub.executing.pop(batch_id, None)
            finished = True
            done([e] * len(jobs))
            return
        if timeouts:
            timer = asyncio.get_running_loop().call_later(min(timeouts) / 1e6, on_timeout)

    async def _submit_when_ready(
        self, jobs: list[Job], done: Callable[[list[Arrays | BaseException]], None]
    ) -> None:
        try:
            await self._ready_stub()
        except ModelhostError as e:
            done([e] * len(jobs))
            return
        self.submit(jobs, done)

    def _outcomes(
        self, stub: Stub, jobs: list[Job], keys: list[int], reply: dict[str, Any]
    ) -> list[Arrays | BaseException]:
        if reply.get("error"):
            for key in keys:
                stub.sinks.pop(key, None)
            failure = InternalError(reply["error"])
            return [failure] * len(jobs)
        rescheduled = set(reply.get("rescheduled") or ())
        outcomes: list[Arrays | BaseException] = []
        for index, (job, key) in enumerate(zip(jobs, keys, strict=True)):
            if index in rescheduled:
                outcomes.append(self._rescheduled(stub, key))
            elif self.decoupled:
                outcomes.append({})  # the responses travel through the job's sink
            else:
                outcomes.append(self._outputs(stub, job, reply["responses"][index]))
        return outcomes

    def _rescheduled(self, stub: Stub, key: int) -> Arrays | BaseException:
        """A request the model handed back: run again by an iterative sequence's batcher (which hands it, and
        its response sink, to the stub anew), refused by any other scheduler."""
        sink = stub.sinks.pop(key, None)
        if self.iterative:
            return Rescheduled()
        error = InternalError(
            f"model '{self.model_name}' released a request with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, which "
            "only an iterative sequence can run again: set sequence_batching { iterative_sequence: true } in its "
            "config"
        )
        if sink is not None:
            sink.put(None, error, final=True)
        return error

    def _describe(self, stub: Stub, key: int, job: Job) -> dict[str, Any]:
        request = job.request
        inputs = [put_tensor(stub.arena, name, array) for name, array in job.inputs.items()]
        parameters = (
            {}
            if request is None or not request.parameters  # most requests: none to look at
            else {
                k: v
                for k, v in request.parameters.items()
                if not k.startswith("triton_") and k not in SEQUENCE_PARAMETERS
            }
        )
        # Triton hands every request its correlation id and flags, sequence model or not; they are not among
        # the request's parameters() there.
        correlation_id, flags = job.sequence if job.sequence is not None else sequence_params(request)
        trace = None if request is None else request.trace
        if trace is not None:  # its BLS requests are traced as its children while it runs
            self.calls.traces[trace.id] = trace
        return {
            "key": key,
            "model_version": self.ctx.version,
            "inputs": inputs,
            "outputs": list(job.output_names),
            "request_id": "" if request is None else request.id,
            "correlation_id": correlation_id,
            "flags": flags,
            "timeout": 0 if request is None else request.timeout_us,
            "parameters": json.dumps(parameters) if parameters else "{}",
            **({} if trace is None else {"trace_id": trace.id, "trace_context": trace_context(trace)}),
        }

    def _cancel(self, stub: Stub, key: int) -> None:
        with contextlib.suppress(StubFailed):
            self._send(stub, {"op": "cancel", "key": key})

    def _outputs(self, stub: Stub, job: Job, response: dict[str, Any] | None) -> Arrays | BaseException:
        if response is None:
            return InternalError(f"model '{self.model_name}' returned no response for the request")
        arrays = self._arrays(stub, response)
        if isinstance(arrays, BaseException):
            return arrays
        checked = self._check_outputs(job, arrays)
        if isinstance(checked, BaseException):
            return checked
        return with_parameters(checked, response)

    def _arrays(self, stub: Stub, response: dict[str, Any]) -> Arrays | BaseException:
        """A response's tensors copied out of the stub's memory (whose blocks then go back), or its error."""
        refs = as_refs(response.get("outputs"))
        arrays: Arrays = {ref.name: read_tensor(stub.segments, ref) for ref in refs}
        stub.frees.extend(shared_blocks(refs))
        if len(stub.frees) >= FREES_PER_MESSAGE:
            # A long stream of responses and no request to carry the frees back: send them on their own, so the
            # stub's memory stays bounded.
            with contextlib.suppress(StubFailed):
                self._send(stub, {"op": "free"})
        error = response.get("error")
        if error is not None:
            message, code = error
            return ERRORS_BY_CODE.get(int(code), InternalError)(message)
        return arrays

    def _check_outputs(self, job: Job, arrays: Arrays) -> Arrays | BaseException:
        """The requested outputs the model returned, as Triton's python backend passes them on: the others are
        dropped (an output the client did not ask for, or that the config does not name), a requested one the
        model left out is left out of the response, and the shape and data type are the model's, whatever the
        config says. Checked, so that the answer on the wire is well-formed (a failure names the model): a data
        type the protocol has, and a shape the config's `reshape` can be applied to."""
        checked: Arrays = {}
        for name in job.output_names:
            array, spec = arrays.get(name), self.outputs.get(name)
            if array is None or spec is None:
                continue
            if ipc.datatype_of(array) is None:
                return InternalError(
                    f"model '{self.model_name}' returned output '{name}' of numpy type {array.dtype}, which has "
                    "no Triton data type"
                )
            if spec.reshape is not None and not self._reshapes(array, spec.dims):
                return InternalError(
                    f"model '{self.model_name}' returned output '{name}' of shape "
                    f"{format_shape(list(array.shape))}, which does not fit the shape its configuration reshapes "
                    f"it to, {format_shape(spec.full_shape(self.max_batch_size))}"
                )
            checked[name] = array
        return checked

    def _reshapes(self, array: Any, dims: tuple[int, ...]) -> bool:
        """Whether an output can take its configured dims (after its batch dimension), as the answer gives it."""
        if self.max_batch_size > 0 and array.ndim == 0:
            return False
        if dims.count(-1) > 1:
            return True  # not reshaped: several sizes cannot be told apart
        try:
            array.reshape(([array.shape[0]] if self.max_batch_size > 0 else []) + list(dims))
        except ValueError:
            return False
        return True

    def _on_response(self, stub: Stub, message: dict[str, Any]) -> None:
        key = message["key"]
        sink = stub.sinks.get(key)
        final = bool(message["flags"] & FINAL)
        described = message.get("response")
        if final:
            stub.sinks.pop(key, None)
        if described is None:
            if sink is not None:
                sink.put(None, None, final)
            return
        arrays = self._arrays(stub, described)
        if sink is None:
            return  # the request is gone (its client went away); the blocks are freed all the same
        if isinstance(arrays, BaseException):
            sink.put(None, arrays, final)
        else:
            sink.put(with_parameters(arrays, described), None, final)

    # -- failures and restarts ---------------------------------------------------------------------------------

    def _on_timeout(self, stub: Stub, timeout_us: int) -> None:
        log.error(
            "model instance '%s' of '%s' exceeded a request timeout of %d us: restarting its stub process",
            self.name,
            self.model_name,
            timeout_us,
        )
        stub.killed_after_answer = True
        with contextlib.suppress(ProcessLookupError):
            stub.process.send_signal(signal.SIGKILL)  # the loss of its connection then restarts it

    def on_stub_lost(self, stub: Stub) -> None:
        if stub.closing or self._closed:
            return
        self._healthy.clear()
        code = stub.process.poll()
        if code is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = stub.process.wait(1)
        error = InternalError(
            f"Failed to process the request(s) for model '{self.model_name}': the stub process of instance "
            f"'{self.name}' exited unexpectedly (exit code {code}); it is being restarted"
        )
        log.error("%s", error)
        # Restarting before the answers below: a job the pool hands over meanwhile then waits for the new stub.
        self._restart = asyncio.get_running_loop().create_task(self._restart_stub())
        sent = list(stub.executing.values())
        stub.executing.clear()
        # The stub runs its batches one at a time in the order sent, so only the oldest can have begun: it fails
        # with its in-flight requests; the rest go to the restarted stub as though never sent. A decoupled model's
        # execute returns before its responses, so its requests already under way are those of `stub.sinks`.
        begun = 0 if stub.killed_after_answer else 1
        for batch in sent[:begun]:
            batch.on_reply({"error": str(error)})
        for batch in sent[begun:]:
            batch.resend()
        for sink in stub.sinks.values():
            sink.put(None, error, final=True)
        stub.sinks.clear()
        for task in list(stub.tasks.values()):
            task.cancel()
        self.ctx.services.custom_metrics.forget_stub(stub.number)
        self._kill(stub)

    async def _restart_stub(self) -> None:
        try:
            stub = await asyncio.to_thread(self._start_stub_placed)
            await self._attach_async(stub)
        except ModelhostError as e:
            self._failure = str(e)
            log.error("model instance '%s' could not be restarted: %s", self.name, e)
            return
        if self._closed:
            self._kill(stub)
            return
        self._stub = stub
        self._failure = None
        log.info("model instance '%s' of '%s' restarted", self.name, self.model_name)

    async def _ready_stub(self) -> Stub:
        if self._restart is not None and not self._restart.done():
            await asyncio.shield(self._restart)
        if self._failure is not None:
            raise StubFailed(self._failure)
        return self._stub

    # -- is_ready and close ------------------------------------------------------------------------------------

    async def check_ready(self) -> bool:
        """The model's own `is_ready()` (when it has one), asked in its process, 5 s at most (as Triton)."""
        if not self.healthy:
            return False
        if not self._has_is_ready:
            return True
        check_id = next(self._ids)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._ready_checks[check_id] = future
        try:
            self._send(self._stub, {"op": "is_ready", "id": check_id})
            return await asyncio.wait_for(future, READY_CHECK_TIMEOUT_S)
        except (TimeoutError, StubFailed):
            return False
        finally:
            self._ready_checks.pop(check_id, None)

    def close(self) -> None:
        """Finalize the model and end its stub (from a worker thread: blocking)."""
        self._closed = True
        stub = self._stub
        stub.closing = True
        loop = self.ctx.services.loop
        if stub.transport is not None and loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._send_finalize, stub)
                stub.finalized.wait(self.settings.stub_timeout_seconds)
            except RuntimeError:  # the loop is gone (server exit)
                pass
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_close_transport, stub)
        self._kill(stub)

    def _send_finalize(self, stub: Stub) -> None:
        try:
            self._send(stub, {"op": "finalize"})
        except StubFailed:
            stub.finalized.set()


def trace_context(trace: Any) -> str | None:
    """What `request.trace().get_context()` gives the model: the W3C context of the client's request (its
    `traceparent`), as Triton's OpenTelemetry mode gives it; None in Triton's mode."""
    if trace.settings.mode != "opentelemetry" or not trace.traceparent:
        return None
    return json.dumps({"traceparent": trace.traceparent})


def with_parameters(arrays: Arrays, response: dict[str, Any]) -> Arrays:
    """The response's tensors with the parameters the model set on it (a JSON object, as pb_utils keeps them).
    Only what both protocols can carry: a value that is not a bool, an int64, a float or a string (which a model
    can set only by passing its own JSON text) is left out."""
    text = response.get("parameters")
    if not text or text == "{}":  # most responses: nothing to decode
        return arrays
    parameters = {
        key: value
        for key, value in json.loads(text).items()
        if isinstance(value, bool | float | str) or (isinstance(value, int) and -(2**63) <= value < 2**63)
    }
    return Outputs(arrays, parameters) if parameters else arrays


def _close_transport(stub: Stub) -> None:
    if stub.transport is not None:
        stub.transport.close()

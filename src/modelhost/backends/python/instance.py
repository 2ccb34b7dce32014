"""One instance of a python model, seen from the server: a stub process, spawned, fed requests, watched (the stub
process itself: process.py; its life, restarts included: lifecycle.py; what it answers: replies.py; the model's
calls into the server: bls.py).

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
from collections.abc import Callable
from typing import Any

from modelhost.backends.api import Arrays, BackendContext, Job
from modelhost.backends.params import group_kind, param
from modelhost.backends.python.bls import ModelCalls
from modelhost.backends.python.environments import environment_for
from modelhost.backends.python.ipc import put_tensor
from modelhost.backends.python.lifecycle import StubSupervisor
from modelhost.backends.python.process import SentBatch, Stub, StubFailed, StubSettings
from modelhost.backends.python.replies import ReplyReader
from modelhost.backends.sequence import sequence_params
from modelhost.config import config_to_json
from modelhost.errors import InvalidArgument, ModelConfigError, ModelhostError, Unavailable
from modelhost.io_specs import output_specs
from modelhost.types import SEQUENCE_PARAMETERS


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
        settings = StubSettings.from_backend_config(ctx.backend_config)
        # The model's BLS and model-control calls into the engine, its logs and metrics.
        self.calls = ModelCalls(self.name, ctx.services, settings.stub_timeout_seconds)
        decoupled = bool(ctx.config.model_transaction_policy.decoupled)
        self.max_batch_size = int(ctx.config.max_batch_size)
        self.replies = ReplyReader(
            self.model_name,
            output_specs(ctx.config),
            self.max_batch_size,
            decoupled,
            bool(ctx.config.sequence_batching.iterative_sequence),
        )
        kind = group_kind(group)
        args = {
            "model_config": json.dumps(config_to_json(ctx.config)),
            "model_instance_kind": kind.removeprefix("KIND_"),
            "model_instance_name": self.name,
            "model_instance_device_id": str(device_id),
            "model_repository": str(ctx.model_dir),
            "model_version": str(ctx.version),
            "model_name": ctx.model_name,
        }
        self._ids = itertools.count(1)
        self.supervisor = StubSupervisor(
            self,
            self.name,
            self.model_name,
            settings,
            environment_for(ctx.config, ctx.model_dir, settings.environments),
            ctx.services,
            self.calls,
            {
                "op": "init",
                "args": args,
                "model_file": model_file,
                "decoupled": decoupled,
                "input_device": input_device(ctx.config, kind, device_id),
            },
            self.on_message,
        )

    @property
    def healthy(self) -> bool:
        return self.supervisor.healthy

    async def check_ready(self) -> bool:
        """The model's own `is_ready()` (when it has one), asked in its process, 5 s at most (as Triton)."""
        return await self.supervisor.check_ready()

    def close(self) -> None:
        """Finalize the model and end its stub (from a worker thread: blocking)."""
        self.supervisor.close()

    # -- messages from the stub (on the event loop) ------------------------------------------------------------

    def on_message(self, stub: Stub, message: dict[str, Any]) -> None:
        for segment, offset in message.pop("free", ()):
            stub.arena.free(segment, offset)
        op = message["op"]
        if op == "executed":
            sent = stub.executing.pop(message["id"], None)
            if sent is not None:
                sent.on_reply(message)
        elif op == "response":
            self.replies.on_response(stub, message)
        elif op == "log":
            self.calls.on_log(message)
        elif op == "trace_activity":
            self.calls.on_trace_activity(message)
        elif op in ("metric_family", "metric", "metric_update", "metric_value"):
            self.calls.on_metric(stub, message)
        elif op in ("bls", "control"):
            handler = self.calls.on_bls if op == "bls" else self.calls.on_control
            task = asyncio.get_running_loop().create_task(handler(stub, message))
            task_id: int = message["id"]
            stub.tasks[task_id] = task
            task.add_done_callback(lambda _: stub.tasks.pop(task_id, None))
        elif op == "finalized":
            self.supervisor.on_finalized(stub, message)
        elif op == "ready_done":
            self.supervisor.on_ready_done(message)
        elif op == "bls_cancel":  # the model cancelled a decoupled BLS stream: the called model hears of it
            bls = stub.tasks.get(message["id"])
            if bls is not None:
                bls.cancel()

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
        supervisor = self.supervisor
        if supervisor.failure is not None or (supervisor.restart is not None and not supervisor.restart.done()):
            asyncio.get_running_loop().create_task(self._submit_when_ready(jobs, done))
            return
        traced = [j.request.trace.id for j in jobs if j.request is not None and j.request.trace is not None]
        if traced:  # their traces take the model's BLS calls and activities until the batch is answered

            def forget_traces(outcomes: list[Arrays | BaseException], answer: Any = done) -> None:
                for trace_id in traced:
                    self.calls.traces.pop(trace_id, None)
                answer(outcomes)

            done = forget_traces
        stub = supervisor.stub
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
                done(self.replies.outcomes(stub, jobs, keys, reply))

        def on_timeout() -> None:
            if not settle():
                return
            stub.executing.pop(batch_id, None)
            supervisor.on_timeout(stub, min(timeouts))
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
            stub.send({"op": "execute", "id": batch_id, "requests": requests})
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
            await self.supervisor.ready_stub()
        except ModelhostError as e:
            done([e] * len(jobs))
            return
        self.submit(jobs, done)

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
            stub.send({"op": "cancel", "key": key})


def trace_context(trace: Any) -> str | None:
    """What `request.trace().get_context()` gives the model: the W3C context of the client's request (its
    `traceparent`), as Triton's OpenTelemetry mode gives it; None in Triton's mode."""
    if trace.settings.mode != "opentelemetry" or not trace.traceparent:
        return None
    return json.dumps({"traceparent": trace.traceparent})


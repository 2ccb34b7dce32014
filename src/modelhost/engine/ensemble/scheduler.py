"""Runs one request through an ensemble: each step is a request to its composing model, sent as soon as the
tensors it needs exist, so independent steps run concurrently.

The scheduling follows Triton's ensemble scheduler:

- Only the steps that the requested outputs depend on run (`EnsemblePlan.needed_steps`).
- Tensors are numpy arrays passed from one step's response to the next step's request as they are: no copies.
- A decoupled step's responses each start a new *iteration*: the steps downstream of it run once per response,
  on that response's tensors, and every iteration that completes the requested outputs is one response of the
  ensemble (which is then decoupled itself). A non-decoupled ensemble answers once.
- A tensor that does not come (an optional input the request leaves out, an output a step's response leaves
  out) is there as no tensor: the steps reading it run without it (the composing model's own checks then say
  whether it may be missing), and a requested output that is not produced is left out of the response, which is
  sent once every requested output is there or known not to come (Triton's placeholder tensors).
- A failed step fails the request with its error prefixed `in ensemble '<name>', `; steps already running are
  let finish (their models count them), no new step starts.
- `max_inflight_requests` bounds, per step and across all requests of the ensemble, how many requests to the
  step's model are in flight; a decoupled producer's responses then wait for room downstream.
- Steps are sent through the server (`services.engine.infer`), so composing models keep their own statistics,
  scheduling and version policy, and a composing model reloaded or unloaded is seen by the next step. A step
  naming a model served elsewhere (`services.external_models`: another deployment of a Ray cluster) is sent
  there instead, and counted there.
"""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

from modelhost.backends.api import Arrays, BackendServices, Job, ResponseSink
from modelhost.engine.ensemble.plan import EnsemblePlan, Step
from modelhost.errors import InvalidArgument, ModelhostError
from modelhost.io_specs import input_specs, output_specs, shape_matches
from modelhost.types import FINAL_RESPONSE, InferenceRequest, InferenceResponse, RequestedOutput, Tensor

# A tensor of the ensemble in one iteration: the tensor (None when its step did not produce it), and the batch
# size it carries (0 when its producer does not batch).
_Value = tuple[Tensor | None, int]


def fit_batch(array: Any, batch_size: int, dims: tuple[int, ...], batching: bool) -> Any:
    """A tensor from a batching model fed to a non-batching one, or the other way round: add or drop the batch
    dimension of 1 where the shape needs it (Triton's ReshapeTensorDims). A view, never a copy."""
    if batching == (batch_size != 0):
        return array
    shape = tuple(array.shape)
    if batching:
        if shape_matches(shape, dims):
            return array.reshape((1, *shape))
    elif batch_size == 1 and not shape_matches(shape, dims):
        return array.reshape(shape[1:])
    return array


def in_ensemble(name: str, error: BaseException) -> BaseException:
    """The error of a step as the ensemble's: same kind, message prefixed; counted as reason OTHER, as Triton
    counts ensemble failures."""
    if not isinstance(error, ModelhostError):
        error = ModelhostError(f"{type(error).__name__}: {error}")
    prefixed = copy.copy(error)
    prefixed.message = f"in ensemble '{name}', {error.message}"
    prefixed.args = (prefixed.message,)
    prefixed.failure_reason = "OTHER"
    return prefixed


class EnsembleScheduler:
    __slots__ = (
        "_routes",
        "batching",
        "elsewhere",
        "input_types",
        "limits",
        "optional_inputs",
        "output_dims",
        "plan",
        "services",
    )

    def __init__(self, plan: EnsemblePlan, config: Any, services: BackendServices) -> None:
        self.plan = plan
        self.services = services
        self.batching = config.max_batch_size > 0
        self.input_types = {n: s.datatype for n, s in input_specs(config).items()}
        self.optional_inputs = [t.name for t in config.input if t.optional]
        self.output_dims = {n: s.dims for n, s in output_specs(config).items()}
        self.limits = (
            [asyncio.Semaphore(plan.max_inflight) for _ in plan.steps] if plan.max_inflight > 0 else None
        )
        self._routes: dict[tuple[str, ...], _Route] = {}
        external = services.external_models
        # Per step: the models served elsewhere that its requests go to (None: this engine).
        self.elsewhere = [
            external if external is not None and external.serves(step.model_name) else None
            for step in plan.steps
        ]

    async def execute(self, job: Job, priority: int = 0, timeout_us: int = 0) -> Arrays:
        """The requested outputs; for a decoupled ensemble, the responses go to `job.sink` and this returns {}
        once the last is sent."""
        started = time.perf_counter_ns()
        try:
            return await _Run(self, job).run()
        finally:
            job.timing.infer_ns += time.perf_counter_ns() - started

    def tracer(self) -> Any:
        """The engine's tracer (modelhost.observability.tracing.Tracer), for the traces of a traced request's
        steps."""
        engine = self.services.engine
        assert engine is not None  # an ensemble runs in an engine
        return engine.tracer

    def route(self, outputs: list[str]) -> _Route:
        key = tuple(outputs)
        route = self._routes.get(key)
        if route is None:
            if len(self._routes) > 64:  # a bounded cache: clients choose the output sets
                self._routes.clear()
            route = self._routes[key] = _Route(self.plan, list(outputs))
        return route

    def queued(self) -> int:
        return 0  # requests wait in their composing models' queues, which count them

    def ready(self) -> bool:
        """Every composing model serves (one unloaded makes the ensemble unable to answer)."""
        server = self.services.engine
        return server is not None and all(
            server.model_healthy(step.model_name, step.model_version)
            if elsewhere is None
            else elsewhere.healthy(step.model_name, step.model_version)
            for step, elsewhere in zip(self.plan.steps, self.elsewhere, strict=True)
        )


class _Route:
    """What a request asking for a given set of outputs does, worked out once per set and kept: the steps it runs,
    how many times each tensor is read, and the outputs asked of each step."""

    __slots__ = ("consumers", "needed", "readers", "requested", "requested_set", "step_outputs")

    def __init__(self, plan: EnsemblePlan, requested: list[str]) -> None:
        self.requested = requested
        self.requested_set = frozenset(requested)
        self.needed = plan.needed_steps(requested)
        self.consumers = {
            tensor: [s for s in steps if s.index in self.needed] for tensor, steps in plan.consumers.items()
        }
        self.readers = {t: len(c) for t, c in self.consumers.items()}
        for tensor in requested:
            self.readers[tensor] = self.readers.get(tensor, 0) + 1
        self.step_outputs = {
            step.index: [o for o, t in step.outputs.items() if self.readers.get(t, 0)]
            for step in plan.steps
            if step.index in self.needed
        }


class _Run:
    """One request's way through the graph. Lives on the event loop: no locking.

    A step whose inputs are complete goes to `ready`. The coroutine that made it ready (the request's own, or the
    one of the step that produced its inputs) runs the first ready step itself and starts a task for each other:
    a chain of steps costs no task at all, and independent steps still run at the same time.
    """

    __slots__ = (
        "answered",
        "done",
        "error",
        "iterations",
        "job",
        "plan",
        "readers",
        "ready",
        "request",
        "result",
        "route",
        "running",
        "scheduler",
        "sink",
        "started",
        "tasks",
        "values",
    )

    def __init__(self, scheduler: EnsembleScheduler, job: Job) -> None:
        self.scheduler = scheduler
        self.plan = scheduler.plan
        self.job = job
        self.request = job.request or InferenceRequest(scheduler.plan.name)
        self.sink: ResponseSink | None = job.sink
        self.route = scheduler.route(job.output_names)
        self.values: dict[tuple[str, int], _Value] = {}
        # How many more times each value will be read (by steps not yet started, and the response): freed at 0.
        self.readers: dict[tuple[str, int], int] = {}
        self.started: set[tuple[int, int]] = set()
        self.ready: list[tuple[Step, int]] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.running = 0  # steps taken from `ready` and not answered yet (inline or in tasks)
        self.iterations = 0
        self.answered: set[int] = set()
        self.result: Arrays | None = None
        self.error: BaseException | None = None
        self.done: asyncio.Future[Arrays] = asyncio.get_running_loop().create_future()

    async def run(self) -> Arrays:
        batch = self.job.batch_size if self.scheduler.batching else 0
        types = self.scheduler.input_types
        for name, array in self.job.inputs.items():
            self._set(name, 0, Tensor(name, types[name], list(array.shape), array), batch)
        given = list(self.job.inputs)
        for name in self.scheduler.optional_inputs:
            if name not in self.job.inputs:
                # An optional input the request left out is there, as no tensor: the steps reading it run
                # without it (as Triton's placeholder for it), instead of waiting for it forever.
                self._set(name, 0, None, batch)
                given.append(name)
        self._advance([(name, 0) for name in given], None)
        try:
            await self._run_ready()
            self._finish_if_idle()
            return await self.done
        except asyncio.CancelledError:
            for task in self.tasks:  # the caller went away: so do the requests made for it
                task.cancel()
            raise

    # -- the graph -------------------------------------------------------------------------------------------

    def _set(self, tensor: str, iteration: int, data: Tensor | None, batch: int) -> None:
        readers = self.route.readers.get(tensor, 0)
        if readers:
            key = (tensor, iteration)
            self.values[key] = (data, batch)
            self.readers[key] = readers

    def _read(self, key: tuple[str, int]) -> _Value:
        value = self.values[key]
        left = self.readers[key] - 1
        if left:
            self.readers[key] = left
        else:
            del self.values[key], self.readers[key]
        return value

    def _advance(self, updated: list[tuple[str, int]], producer: Step | None) -> None:
        """Queue every step whose inputs now all exist, and answer an iteration now complete."""
        complete = -1
        for tensor, iteration in updated:
            if self.error is not None:
                return
            for step in self.route.consumers.get(tensor, ()):
                key = (step.index, iteration)
                if key not in self.started and all(
                    (t, iteration) in self.values for t in step.inputs.values()
                ):
                    self.started.add(key)
                    self.ready.append((step, iteration))
            if tensor in self.route.requested_set:
                complete = iteration
        if complete >= 0:
            # Final when nothing else runs or waits to: the step answering now was the last (a decoupled step
            # still running may send more). Otherwise the end comes alone, once the last step is done.
            last = producer is not None and not producer.decoupled and self.running == 1 and not self.ready
            self._answer(complete, last)

    async def _run_ready(self) -> None:
        """Run the ready steps: the first here, each other in a task of its own; repeat while steps get ready."""
        while self.ready and self.error is None:
            step, iteration = self.ready.pop(0)
            self._spawn_ready()
            self.running += 1
            await self._run_step(step, iteration)
        self.ready.clear()

    def _spawn_ready(self) -> None:
        loop = asyncio.get_running_loop()
        for step, iteration in self.ready:
            self.running += 1  # from now: a step counts as running until it is answered
            task = loop.create_task(self._run_in_task(step, iteration))
            self.tasks.add(task)
            task.add_done_callback(self._task_done)
        self.ready.clear()

    async def _run_in_task(self, step: Step, iteration: int) -> None:
        await self._run_step(step, iteration)
        await self._run_ready()

    def _request(self, step: Step, iteration: int) -> InferenceRequest:
        inputs: list[Tensor] = []
        for model_input, tensor in step.inputs.items():
            data, batch = self._read((tensor, iteration))
            if data is None:
                continue  # not produced upstream: left out, as an optional input is
            array = fit_batch(data.data, batch, step.input_dims.get(model_input, ()), step.batching)
            inputs.append(Tensor(model_input, data.datatype, list(array.shape), array))
        request = self.request
        parent = request.trace
        return InferenceRequest(
            model_name=step.model_name,
            model_version=step.model_version,
            id=request.id,
            inputs=inputs,
            outputs=[RequestedOutput(o) for o in self.route.step_outputs[step.index]],
            parameters=request.parameters,
            priority=request.priority,
            timeout_us=request.timeout_us,
            trace=None
            if parent is None
            else self.scheduler.tracer().child(parent, step.model_name, step.model_version),
        )

    async def _run_step(self, step: Step, iteration: int) -> None:
        """Send one step (counted in `running` by the caller); record its outputs, or its error as the request's."""
        limits = self.scheduler.limits
        limit = limits[step.index] if limits is not None else None
        server = self.scheduler.services.engine
        assert server is not None  # an ensemble runs in an engine
        elsewhere = self.scheduler.elsewhere[step.index]
        request: InferenceRequest | None = None
        try:
            request = self._request(step, iteration)
            if limit is not None:
                await limit.acquire()
            try:
                if step.decoupled:
                    responses = (
                        server.infer_stream(request, internal=True)
                        if elsewhere is None
                        else elsewhere.infer_stream(request)
                    )
                    async for response in responses:
                        if response.error is not None:
                            raise response.error
                        if response.outputs or not response.parameters.get(FINAL_RESPONSE, False):
                            self.iterations += 1
                            self._produced(step, self.iterations, response)
                            self._spawn_ready()  # the stream goes on: what its response feeds runs beside it
                            await self._room_after(step)
                else:
                    answer = (
                        server.infer(request, internal=True)
                        if elsewhere is None
                        else elsewhere.infer(request)
                    )
                    self._produced(step, iteration, await answer)
            finally:
                if limit is not None:
                    limit.release()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if self.error is None:
                self.error = e
        finally:
            self.running -= 1
            if request is not None and request.trace is not None:
                self.scheduler.tracer().finish(request.trace)

    async def _room_after(self, step: Step) -> None:
        """Backpressure on a decoupled step: its next response is taken once the steps it feeds have room."""
        limits = self.scheduler.limits
        if limits is None:
            return
        for tensor in step.outputs.values():
            for consumer in self.route.consumers.get(tensor, ()):
                limit = limits[consumer.index]
                if limit.locked():
                    await limit.acquire()
                    limit.release()

    def _produced(self, step: Step, iteration: int, response: InferenceResponse) -> None:
        outputs = {t.name: t for t in response.outputs}
        updated: list[tuple[str, int]] = []
        for model_output, tensor in step.outputs.items():
            out = outputs.get(model_output)
            batch = (out.shape[0] if out.shape else 0) if out is not None and step.batching else 0
            data = None if out is None else Tensor(tensor, out.datatype, out.shape, out.data)
            self._set(tensor, iteration, data, batch)
            updated.append((tensor, iteration))
        self._advance(updated, step)

    def _answer(self, iteration: int, last: bool) -> None:
        requested = self.route.requested
        if iteration in self.answered or not all((t, iteration) in self.values for t in requested):
            return
        self.answered.add(iteration)
        arrays: Arrays = {}
        for tensor in requested:
            data, batch = self._read((tensor, iteration))
            if data is not None:  # a composing model that did not produce an output: left out, as in Triton
                dims = self.scheduler.output_dims[tensor]
                arrays[tensor] = fit_batch(data.data, batch, dims, self.scheduler.batching)
        if self.sink is not None:
            self.sink.put(arrays, final=last)
        else:
            self.result = arrays

    # -- the end ---------------------------------------------------------------------------------------------

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self._finish_if_idle()

    def _finish_if_idle(self) -> None:
        if self.tasks or self.running or self.done.done():
            return
        if self.error is not None:
            self.done.set_exception(in_ensemble(self.plan.name, self.error))
        elif self.sink is not None:
            self.sink.put(None, final=True)  # ignored when the last response was already final
            self.done.set_result({})
        elif self.result is None:
            self.done.set_exception(
                InvalidArgument(
                    f"in ensemble '{self.plan.name}', unexpected deadlock, at least one output is not set while "
                    "no more ensemble steps can be made"
                )
            )
        else:
            self.done.set_result(self.result)


__all__ = ["EnsembleScheduler", "fit_batch", "in_ensemble"]

"""One loaded model version: checks a request against its config, runs it through its scheduler, shapes the answer.

Everything per model (tensor specs, labels, metadata) is compiled once at load, not per request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from modelhost.backends.api import Arrays, Job, Outputs, ResponseSink
from modelhost.backends.sequence import server_fed_inputs
from modelhost.datatypes import NUMPY_TO_WIRE
from modelhost.engine.classification import classify, read_labels
from modelhost.engine.registry.instance_update import Signature
from modelhost.engine.scheduling.dynamic_batcher import DynamicBatcher
from modelhost.engine.scheduling.instances import InstancePool
from modelhost.engine.scheduling.ragged import RaggedBatching, execute_alone
from modelhost.engine.scheduling.rate_limiter import InstanceNeeds
from modelhost.engine.scheduling.sequence_batcher import SequenceBatcher
from modelhost.errors import DecoupledModel, InvalidArgument
from modelhost.io_specs import TensorSpec, format_shape, input_specs, output_specs, shape_matches
from modelhost.observability.stats import ModelStats, RequestTiming
from modelhost.tensor_codec import id_prefix
from modelhost.types import FINAL_RESPONSE, InferenceRequest, InferenceResponse, Tensor

_BATCH_NOTE = (
    " NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to "
    "each input shape. If you want to specify the full shape including the batch dim in your input dims config, "
    "try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size."
)


class Scheduler(Protocol):
    """What stands between a model's requests and its instances (a batcher), or in place of them (an ensemble)."""

    async def execute(self, job: Job, priority: int, timeout_us: int) -> Arrays: ...

    def queued(self) -> int: ...


class Ensemble(Scheduler, Protocol):
    def ready(self) -> bool: ...


def request_prefix(request: InferenceRequest) -> str:
    return id_prefix(request.id)


def _name_list(names: Iterable[str]) -> str:
    """Names as Triton lists them in messages: ['A','B']."""
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


class LoadedModel:
    def __init__(
        self,
        name: str,
        version: int,
        config: Any,
        model_dir: Path,
        pool: InstancePool,
        ensemble: Ensemble | None = None,
    ) -> None:
        """`ensemble`: for an ensemble, what runs its steps (the pool is then empty)."""
        self.name = name
        self.version = version
        self.version_str = str(version)
        self.config = config
        self.model_dir = model_dir
        self.pool = pool
        self.max_batch_size = int(config.max_batch_size)
        # Control and implicit-state inputs of a sequence model are the server's to feed: a client neither needs
        # nor may send them (Triton: "unexpected inference input"), even where the config lists them as inputs.
        fed = server_fed_inputs(config)
        self.inputs: dict[str, TensorSpec] = {n: s for n, s in input_specs(config).items() if n not in fed}
        self.outputs: dict[str, TensorSpec] = output_specs(config)
        self.required_inputs = [n for n, s in self.inputs.items() if not s.optional]
        # Every input required and none reshaped: a request that sends each once, well typed and shaped, is
        # checked in one pass (`_plain_inputs`), as most are.
        self._inputs_plain = len(self.required_inputs) == len(self.inputs) and all(
            s.reshape is None for s in self.inputs.values()
        )
        self.all_output_names = list(self.outputs)
        self.labels = {n: read_labels(model_dir, s.label_filename) for n, s in self.outputs.items()}
        self.platform = config.platform or config.backend
        # A python model's outputs go out in the data type the model gave them, whatever the config says, as
        # Triton's python backend passes them; other backends' outputs are the config's type.
        self.outputs_typed_by_model = pool.request_level  # python models and python-based backends
        self.decoupled = bool(config.model_transaction_policy.decoupled)
        self.stats = ModelStats(name, self.version_str)
        # What the response cache keys this model's answers by: its name, and under --model-namespacing its
        # repository too (two repositories' models of one name must not share answers).
        self.cache_name = name
        # The scheduler in front of the instances (scheduling/): a request alone on an idle instance, or batched.
        # Triton accepts dynamic_batching on a non-batching model and does not batch it; neither do we.
        batching = config.HasField("dynamic_batching") and self.max_batch_size > 0
        self.ensemble = ensemble
        self.batcher: Scheduler | None = None
        if ensemble is not None:
            self.batcher = ensemble
        elif config.HasField("sequence_batching"):  # with or without batching: sequences need their slots
            self.batcher = SequenceBatcher(pool, config, self.stats, model_dir)
        elif batching:
            self.batcher = DynamicBatcher(pool, config, self.stats)
        batcher = self.batcher
        # Ragged inputs and batch inputs/outputs of a model run without a batcher (a batcher handles its own).
        self.ragged = (
            RaggedBatching(config)
            if batcher is None and RaggedBatching.wanted(config) and not pool.request_level
            else None
        )
        self._in_flight = 0
        self._idle: asyncio.Event | None = None
        # Each instance with its signature (instance_update.py), set by the registry: what a reload that changes
        # only the instance groups matches the new groups against.
        self.placements: list[tuple[Signature, Any]] = []
        # When this version began to serve: what "least recently used" counts from before its first request.
        self.loaded_at_ms = time.time_ns() // 1_000_000
        self.stats.pending = (
            (lambda: batcher.queued() + pool.pending()) if batcher is not None else pool.pending
        )

    def metadata(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "inputs": [
                {"name": s.name, "datatype": s.datatype, "shape": s.full_shape(self.max_batch_size)}
                for s in self.inputs.values()
            ],
            "outputs": [
                {"name": s.name, "datatype": s.datatype, "shape": s.full_shape(self.max_batch_size)}
                for s in self.outputs.values()
            ],
        }

    def _model_inputs(self, request: InferenceRequest) -> tuple[Arrays, int]:
        """Check the inputs against the config; return them model-shaped, and the batch size.

        The checks run in the order of Triton's request normalisation, so that a request with several faults
        gets the error Triton would give: input count, then names and batch sizes, then types and shapes.
        """
        if self._inputs_plain:
            plain = self._plain_inputs(request)
            if plain is not None:
                return plain
        name = self.name
        seen: set[str] = set()
        for tensor in request.inputs:
            if tensor.name in seen:
                raise InvalidArgument(
                    request_prefix(request) + f"input '{tensor.name}' already exists in request"
                )
            seen.add(tensor.name)
        if not len(self.required_inputs) <= len(request.inputs) <= len(self.inputs):
            raise self._count_error(request)
        batch: int | None = None
        for tensor in request.inputs:
            if tensor.name not in self.inputs:
                # Triton's wording, without the request id, as it words it.
                raise InvalidArgument(f"unexpected inference input '{tensor.name}' for model '{name}'")
            if self.max_batch_size > 0:
                if not tensor.shape:
                    raise InvalidArgument(
                        request_prefix(request)
                        + f"input '{tensor.name}' has no shape but model requires batch "
                        f"dimension for '{name}'"
                    )
                if batch is None:
                    batch = tensor.shape[0]
                elif tensor.shape[0] != batch:
                    raise InvalidArgument(
                        request_prefix(request)
                        + f"input '{tensor.name}' batch size does not match other inputs for '{name}'"
                    )
        if any(n not in seen for n in self.required_inputs):
            # Right count and known names, but an optional input stands in for a required one.
            raise self._count_error(request)
        batch = 1 if batch is None else batch
        if self.max_batch_size > 0 and batch > self.max_batch_size:
            raise InvalidArgument(
                request_prefix(request)
                + f"inference request batch-size must be <= {self.max_batch_size} for '{name}'"
            )
        arrays: Arrays = {}
        for tensor in request.inputs:
            spec = self.inputs[tensor.name]
            if tensor.datatype != spec.datatype:
                raise InvalidArgument(
                    request_prefix(request)
                    + f"inference input '{tensor.name}' data-type is '{tensor.datatype}', "
                    f"but model '{name}' expects '{spec.datatype}'"
                )
            shape = tensor.shape
            if not shape_matches(shape[1:] if self.max_batch_size > 0 else shape, spec.dims):
                raise self._shape_error(request, tensor, spec)
            data = tensor.data
            if spec.reshape is not None:
                target = ([batch] if self.max_batch_size > 0 else []) + list(spec.reshape)
                try:
                    data = data.reshape(target)
                except ValueError as e:
                    raise InvalidArgument(
                        request_prefix(request)
                        + f"input '{tensor.name}' of shape {format_shape(shape)} cannot "
                        f"be reshaped to {format_shape(target)} for model '{name}'"
                    ) from e
            arrays[tensor.name] = data
        return arrays, batch

    def _plain_inputs(self, request: InferenceRequest) -> tuple[Arrays, int] | None:
        """`_model_inputs` in one pass for a model whose inputs are all required and none reshaped, given as
        many inputs as it has: the arrays and batch size when every check passes, None when one does not (the
        checks in Triton's order then say which)."""
        specs = self.inputs
        if len(request.inputs) != len(specs):
            return None
        arrays: Arrays = {}
        batch: int | None = None
        batching = self.max_batch_size > 0
        for tensor in request.inputs:
            spec = specs.get(tensor.name)
            if spec is None or tensor.name in arrays or tensor.datatype != spec.datatype:
                return None
            shape = tensor.shape
            if batching:
                if (
                    not shape
                    or (batch is not None and shape[0] != batch)
                    or not shape_matches(shape[1:], spec.dims)
                ):
                    return None
                batch = shape[0]
            elif not shape_matches(shape, spec.dims):
                return None
            arrays[tensor.name] = tensor.data
        if batch is None:
            return arrays, 1
        return (arrays, batch) if batch <= self.max_batch_size else None

    def _count_error(self, request: InferenceRequest) -> InvalidArgument:
        got, expected, required = len(request.inputs), len(self.inputs), len(self.required_inputs)
        names = {t.name for t in request.inputs}
        missing = [n for n in self.required_inputs if n not in names]
        count = (
            f"{expected} inputs"
            if required == expected
            else f"number of inputs between {required} and {expected}"
        )
        return InvalidArgument(
            request_prefix(request) + f"expected {count} but got {got} inputs for model '{self.name}'. Got "
            f"input(s) {_name_list(t.name for t in request.inputs)}, but missing required input(s) "
            f"{_name_list(missing)}. Please provide all required input(s)."
        )

    def _shape_error(self, request: InferenceRequest, tensor: Tensor, spec: TensorSpec) -> InvalidArgument:
        message = (
            request_prefix(request) + f"unexpected shape for input '{tensor.name}' for model '{self.name}'. "
            f"Expected {format_shape(spec.full_shape(self.max_batch_size))}, got {format_shape(tensor.shape)}."
        )
        if self.max_batch_size > 0:
            message += _BATCH_NOTE
        return InvalidArgument(message)

    def _output_names(self, request: InferenceRequest) -> list[str]:
        if not request.outputs:
            return self.all_output_names
        names: list[str] = []
        for out in request.outputs:
            if out.name not in self.outputs:
                # Triton's wording, without the request id, as it words it.
                raise InvalidArgument(f"unexpected inference output '{out.name}' for model '{self.name}'")
            if out.name in names:
                # Triton (2.51) answers the output once; asking twice is a client mistake worth naming.
                raise InvalidArgument(
                    request_prefix(request) + f"output '{out.name}' is requested more than once"
                )
            if out.classification < 0:
                raise InvalidArgument(
                    f"invalid value for 'classification' parameter of output '{out.name}', expected >= 0"
                )
            names.append(out.name)
        return names

    def check_request(self, request: InferenceRequest) -> None:
        """The checks a request passes before it is queued (its inputs and requested outputs against the
        config), raising what `infer` would raise for them: for a frontend that must tell a refused request
        from a failed execution (Triton answers a refused /generate_stream request with JSON, a failure of the
        model with an event)."""
        self._model_inputs(request)
        self._output_names(request)

    async def infer(self, request: InferenceRequest) -> tuple[InferenceResponse, RequestTiming]:
        """The response, and where the request spent its time."""
        # Counted so that an unload or a reload closes this version only once its last request is answered.
        self._in_flight += 1
        try:
            return await self._infer(request)
        finally:
            self._leave()

    def _leave(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0 and self._idle is not None:
            self._idle.set()

    async def _infer(self, request: InferenceRequest) -> tuple[InferenceResponse, RequestTiming]:
        if self.decoupled:
            raise DecoupledModel()
        job = self._job(request)
        try:
            if self.batcher is not None:
                results = await self.batcher.execute(job, request.priority, request.timeout_us)
            elif self.ragged is not None:
                results = await execute_alone(self.ragged, self.pool, job)
            else:
                results = await self.pool.execute(job)
        except asyncio.CancelledError:
            if job.on_cancel is not None:  # the client went away: a python model's is_cancelled() turns true
                job.on_cancel()
            raise
        response = self._response(request, job, results)
        # A batcher records its own executions; an ensemble counts as one execution per request, as in Triton.
        if self.batcher is None or self.ensemble is not None:
            timing = job.timing
            self.stats.executed(job.batch_size, timing.input_ns, timing.infer_ns, timing.output_ns)
        return response, job.timing

    def _job(self, request: InferenceRequest, sink: ResponseSink | None = None) -> Job:
        started = time.perf_counter_ns()
        # Requested outputs first, as Triton checks them.
        output_names = self._output_names(request)
        inputs, batch = self._model_inputs(request)
        job = Job(inputs, output_names, batch, request=request, sink=sink)
        job.timing.input_ns = time.perf_counter_ns() - started
        if request.trace is not None:
            request.trace.timing = job.timing  # how far it got, should it fail
        return job

    def _response(self, request: InferenceRequest, job: Job, results: Arrays) -> InferenceResponse:
        """The answer on the wire: outputs reshaped, classified and typed as the config says."""
        started = time.perf_counter_ns()
        classifications = {o.name: o.classification for o in request.outputs if o.classification > 0}
        outputs: list[Tensor] = []
        for name in job.output_names:
            spec = self.outputs[name]
            array = results.get(name)
            if array is None:
                continue  # a requested output the model (a python one) or an ensemble's steps left out, as Triton
            if spec.reshape is not None and spec.dims.count(-1) <= 1:
                array = array.reshape(([array.shape[0]] if self.max_batch_size > 0 else []) + list(spec.dims))
            datatype = spec.datatype
            count = classifications.get(name, 0)
            if count:
                array = classify(array, datatype, count, self.max_batch_size > 0, self.labels[name])
                datatype = "BYTES"
            elif self.outputs_typed_by_model:
                own = NUMPY_TO_WIRE.get(array.dtype)
                if own is not None and own != datatype and not (datatype == "BF16" and own == "UINT16"):
                    datatype = own
            elif array.dtype != spec.dtype and datatype != "BYTES":
                array = np.asarray(array, dtype=spec.dtype)
            outputs.append(Tensor(name, datatype, list(array.shape), array))
        job.timing.output_ns += time.perf_counter_ns() - started
        parameters = dict(results.parameters) if isinstance(results, Outputs) else {}
        return InferenceResponse(self.name, self.version_str, request.id, outputs, parameters)

    async def infer_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        """The responses of a decoupled model's request, as they come (0..N, then one marked final by the
        `triton_final_response` parameter: an empty response when the model ends without one)."""
        self._in_flight += 1
        sink = ResponseSink()
        clock = self.stats.response_clock(self.config)  # response_stats and the first-response histogram
        running: asyncio.Future[Arrays] | None = None
        try:
            job = self._job(request, sink)
            # The execution runs on while its responses are taken: a decoupled model sends them during execute.
            running = asyncio.ensure_future(
                self.batcher.execute(job, request.priority, request.timeout_us)
                if self.batcher is not None
                else self.pool.execute(job)
            )
            running.add_done_callback(lambda done: _end_on_failure(done, sink))
            while True:
                item = await sink.get()
                clock.arrived()
                if item.error is not None:
                    if item.final:
                        raise item.error
                    clock.done("fail")
                    yield InferenceResponse(self.name, self.version_str, request.id, [], {}, item.error)
                    continue
                if item.outputs is not None:
                    response = self._response(request, job, item.outputs)
                    clock.done("success")
                    response.parameters[FINAL_RESPONSE] = item.final
                    yield response
                elif item.final:
                    clock.done("empty_response")
                    yield InferenceResponse(
                        self.name, self.version_str, request.id, [], {FINAL_RESPONSE: True}
                    )
                if item.final:
                    return
        finally:
            sink.cancel()  # the client went away before the end: the model hears of it
            if running is not None and not running.done():
                running.cancel()  # still queued: it leaves the queue (once running, the model was told above)
            self._leave()

    async def ready(self) -> bool:
        """Healthy, and ready by the model's own account where it has one (a python model's `is_ready()`);
        an ensemble, when every composing model is."""
        if self.ensemble is not None:
            return self.ensemble.ready()
        for instance in self.pool.instances:
            check = getattr(instance, "check_ready", None)
            if check is not None and not await check():
                return False
        return self.healthy

    @property
    def healthy(self) -> bool:
        """Every instance can serve (a python model's stub may be restarting); an ensemble's composing models."""
        if self.ensemble is not None:
            return self.ensemble.ready()
        return all(getattr(i, "healthy", True) for i in self.pool.instances)

    @property
    def in_flight(self) -> int:
        """Requests of this version being served (queued or running); for a sequence model, at least its live
        sequences, as Triton counts them."""
        return max(self._in_flight, self.stats.pending(), self._live_sequences())

    @property
    def busy(self) -> bool:
        """Requests are queued for, or running on, this version, or sequences are live on it."""
        return self._in_flight > 0 or self.stats.pending() > 0 or self._live_sequences() > 0

    def _live_sequences(self) -> int:
        return self.batcher.live_sequences() if isinstance(self.batcher, SequenceBatcher) else 0

    def continues_sequence(self, request: InferenceRequest) -> bool:
        """A later request of a sequence live on this version (the server serves it while it drains)."""
        return isinstance(self.batcher, SequenceBatcher) and self.batcher.continues(request)

    async def drained(self) -> None:
        """Return once no request is running on this version (callers stop sending new ones first)."""
        while self._in_flight:
            if self._idle is None or self._idle.is_set():
                self._idle = asyncio.Event()
            await self._idle.wait()

    # -- instance updates ----------------------------------------------------------------------------------------

    def sequences_by_instance(self) -> dict[int, int]:
        """id(instance) -> the sequences holding one of its slots (none without a sequence batcher)."""
        if not isinstance(self.batcher, SequenceBatcher):
            return {}
        return {id(w.instance): self.batcher.sequences_on(w) for w in self.pool.workers}

    def add_instances(self, instances: list[Any], needs: list[InstanceNeeds] | None) -> None:
        """Put new instances into service now; raises ModelConfigError (nothing changed) when the rate limiter
        cannot serve them."""
        workers = self.pool.add(instances, needs)
        if isinstance(self.batcher, SequenceBatcher):
            self.batcher.add_lanes(workers)

    def retire_instances(self, instances: list[Any]) -> list[asyncio.Task[None]]:
        """Take instances out of service; one task per instance, done once it is closed: after the request it
        runs, and for a sequence model after the last sequence in its slots ends."""
        batcher = self.batcher if isinstance(self.batcher, SequenceBatcher) else None
        workers = {id(w.instance): w for w in self.pool.workers}

        async def closed(instance: Any, emptied: asyncio.Future[None]) -> None:
            await emptied
            await self.pool.retire([instance])

        async def retired(closing: asyncio.Future[list[None]]) -> None:
            await closing

        loop = asyncio.get_running_loop()
        if batcher is None:  # out of service now
            return [loop.create_task(retired(self.pool.retire([i]))) for i in instances]
        # The slots close now (no new sequence goes there), the instance once they are empty.
        return [loop.create_task(closed(i, batcher.retire_lane(workers[id(i)]))) for i in instances]

    def close(self) -> None:
        if isinstance(self.batcher, SequenceBatcher):
            self.batcher.close()  # frees the slots and states of sequences still open
        self.pool.close()


def _end_on_failure(execution: asyncio.Future[Arrays], sink: ResponseSink) -> None:
    """A decoupled execution that failed (rejected while queued, execute raised, the instance died) ends its
    request with that error, unless the model had already sent its final response."""
    if not execution.cancelled() and execution.exception() is not None:
        sink.put(None, execution.exception(), final=True)

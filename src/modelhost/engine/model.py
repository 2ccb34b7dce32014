"""One loaded model version: checks a request against its config (request_checks.py), runs it through its
scheduler, shapes the answer.

Everything per model (tensor specs, labels, metadata) is compiled once at load, not per request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np

from modelhost.backends.api import Arrays, Job, Outputs, ResponseSink
from modelhost.backends.sequence import server_fed_inputs
from modelhost.datatypes import NUMPY_TO_WIRE
from modelhost.engine.classification import classify, read_labels
from modelhost.engine.registry.instance_update import Signature
from modelhost.engine.request_checks import RequestChecks
from modelhost.engine.scheduling.api import Ensemble, Scheduler
from modelhost.engine.scheduling.dynamic_batcher import DynamicBatcher
from modelhost.engine.scheduling.instances import InstancePool
from modelhost.engine.scheduling.ragged import RaggedBatching, execute_alone
from modelhost.engine.scheduling.rate_limiter import InstanceNeeds
from modelhost.engine.scheduling.sequence_batcher import SequenceBatcher
from modelhost.errors import DecoupledModel
from modelhost.io_specs import TensorSpec, input_specs, output_specs
from modelhost.observability.stats import ModelStats, RequestTiming
from modelhost.types import FINAL_RESPONSE, InferenceRequest, InferenceResponse, Tensor


class LoadedModel:
    __slots__ = (
        "_idle",
        "_in_flight",
        "batcher",
        "cache_name",
        "checks",
        "config",
        "decoupled",
        "ensemble",
        "inputs",
        "labels",
        "loaded_at_ms",
        "max_batch_size",
        "model_dir",
        "name",
        "outputs",
        "outputs_typed_by_model",
        "placements",
        "platform",
        "pool",
        "ragged",
        "stats",
        "version",
        "version_str",
    )

    def __init__(
        self,
        name: str,
        version: int,
        config: Any,
        model_dir: Path,
        pool: InstancePool,
        ensemble: Ensemble | None = None,
        *,
        namespace: str = "",
        cached: bool = False,
        placements: list[tuple[Signature, Any]] | None = None,
        inherited_labels: dict[str, list[str]] | None = None,
    ) -> None:
        """`ensemble`: for an ensemble, what runs its steps (the pool is then empty). `namespace`: its
        repository under --model-namespacing; `cached`: its answers go through the server's response cache;
        `placements`: each instance with its signature (instance_update.py), what a reload that changes only the
        instance groups matches the new groups against; `inherited_labels`: labels for outputs that have none of
        their own (an ensemble's, from the composing model's output they come from)."""
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
        self.checks = RequestChecks(name, self.max_batch_size, self.inputs, self.outputs)
        self.labels = {n: read_labels(model_dir, s.label_filename) for n, s in self.outputs.items()}
        for tensor, labels in (inherited_labels or {}).items():
            if tensor in self.labels and not self.labels[tensor]:
                self.labels[tensor] = labels
        self.platform = config.platform or config.backend
        # A python model's outputs go out in the data type the model gave them, whatever the config says, as
        # Triton's python backend passes them; other backends' outputs are the config's type.
        self.outputs_typed_by_model = pool.request_level  # python models and python-based backends
        self.decoupled = bool(config.model_transaction_policy.decoupled)
        self.stats = ModelStats(name, self.version_str)
        self.stats.namespace = namespace
        self.stats.cached = cached
        # What the response cache keys this model's answers by: its name, and under --model-namespacing its
        # repository too (two repositories' models of one name must not share answers).
        self.cache_name = f"{namespace}/{name}" if namespace else name
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
        self.placements = placements if placements is not None else []
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

    def check_request(self, request: InferenceRequest) -> None:
        """The checks a request passes before it is queued (its inputs and requested outputs against the
        config), raising what `infer` would raise for them: for a frontend that must tell a refused request
        from a failed execution (Triton answers a refused /generate_stream request with JSON, a failure of the
        model with an event)."""
        self.checks.inputs_of(request)
        self.checks.output_names(request)

    async def infer(self, request: InferenceRequest) -> tuple[InferenceResponse, RequestTiming]:
        """The response, and where the request spent its time."""
        if self.decoupled:
            raise DecoupledModel()
        # Counted so that an unload or a reload closes this version only once its last request is answered.
        self._in_flight += 1
        try:
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
        finally:
            self._leave()

    def _leave(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0 and self._idle is not None:
            self._idle.set()

    def _job(self, request: InferenceRequest, sink: ResponseSink | None = None) -> Job:
        started = time.perf_counter_ns()
        # Requested outputs first, as Triton checks them.
        output_names = self.checks.output_names(request)
        inputs, batch = self.checks.inputs_of(request)
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

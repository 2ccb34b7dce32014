"""The backend contract: what every backend implements and what the server gives it.

A backend is a class named in backends/registry.py, imported only when a model needs it. The server calls:

- `autocomplete(config, model_dir, *, default_max_batch_size, settings)` (optional, a static method) at config
  time when auto-complete is on: fill in, in place, what the config leaves out, from the model file itself
  (`settings`: the backend's --backend-config settings, as its instances get them);
- `load_instance(ctx, group, index, device_id)` once per instance of a model version: load the model for that
  instance's device, check that the config agrees with the model (backends/model_io.py) and raise
  ModelConfigError naming the field where it does not, so that a contradicting config never becomes READY;
- `instance.execute(inputs, output_names)` per batch, off the event loop, by one worker thread at a time
  (engine/scheduling/instances.py), so instances need no locking of their own; a fault there fails the requests of
  that batch only, and is counted as failure reason BACKEND; or, for a `RequestLevelInstance` (python models),
  `instance.submit(jobs, done)` with the requests of a batch one by one (`Job`), a decoupled request's answers
  going to its `ResponseSink`;
- `instance.close()` at unload: release the model's memory (host and device).

Memory needs are measured, not declared (model_memory.py): the server samples the process tree and the GPUs
around each load. Device needs are the instance group's: `group.kind` and `device_id` say where an instance
runs, and a backend refuses a kind it cannot serve in `load_instance` with the reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy.typing as npt

from modelhost.host.gpu_memory import GpuMemory
from modelhost.observability.custom_metrics import CustomMetrics
from modelhost.observability.stats import RequestTiming
from modelhost.types import InferenceRequest, InferenceResponse

Arrays = dict[str, npt.NDArray[Any]]


class Outputs(dict[str, npt.NDArray[Any]]):
    """A response's tensors with the parameters its model set on it (a python model's
    `InferenceResponse(parameters=...)`): what a backend returns where a plain `Arrays` has no parameters."""

    __slots__ = ("parameters",)

    def __init__(self, arrays: Arrays, parameters: dict[str, bool | int | float | str]) -> None:
        super().__init__(arrays)
        self.parameters = parameters


class Rescheduled(dict[str, npt.NDArray[Any]]):
    """The outcome of a job whose model handed its request back to be run again (a python model's
    `set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)`): no answer yet; the sequence batcher of an
    iterative sequence runs it again."""

    __slots__ = ()


class EngineHandle(Protocol):
    """What a model that calls other models (python BLS, an ensemble's steps) or manages them may ask of the
    engine it runs in. The engine implements it (modelhost.engine.engine.Engine); backends never import the
    engine."""

    @property
    def tracer(self) -> Any:
        """modelhost.observability.tracing.Tracer: an ensemble's steps are traced as its children."""
        ...

    def model_healthy(self, name: str, version: str = "") -> bool: ...

    def decoupled(self, name: str, version: str = "") -> bool: ...

    async def infer(
        self, request: InferenceRequest, context: Any = None, *, internal: bool = False
    ) -> InferenceResponse:
        """`internal`: a request made for one already accepted (an ensemble's step): served while draining."""
        ...

    def infer_stream(
        self, request: InferenceRequest, context: Any = None, *, internal: bool = False
    ) -> AsyncIterator[InferenceResponse]: ...

    async def load_model(self, name: str, parameters: dict[str, Any], *, files_base64: bool) -> None: ...

    async def unload_model(self, name: str, parameters: dict[str, Any]) -> None: ...


class ExternalModels(Protocol):
    """Models served outside this engine that an ensemble's steps may name: on a Ray cluster, the models of the
    other deployments (modelhost.cluster.steps). An ensemble loads with their configurations instead of loading
    them, is ready while they are, and sends its steps for them here."""

    def serves(self, name: str) -> bool:
        """Whether steps naming `name` go here (fixed for the engine's life)."""
        ...

    async def config(self, name: str, versions: set[int]) -> Any:
        """The model's configuration (ModelConfig, as its own server completed it), once it serves these
        versions (-1: any); ModelhostError saying why it cannot."""
        ...

    def healthy(self, name: str, version: str = "") -> bool: ...

    async def infer(self, request: InferenceRequest) -> InferenceResponse: ...

    def infer_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]: ...


@dataclass(slots=True)
class BackendServices:
    """What a backend may use of the running server: its event loop, and the engine for models that call other
    models (python BLS) or manage them. Filled in once the engine exists; empty in unit tests.
    `external_models`: models served elsewhere that ensembles may use (None: every step runs here)."""

    loop: asyncio.AbstractEventLoop | None = None
    engine: EngineHandle | None = None
    custom_metrics: CustomMetrics = field(default_factory=CustomMetrics)
    external_models: ExternalModels | None = None


@dataclass(slots=True)
class StreamItem:
    outputs: Arrays | None  # None: no response, only the end of the request
    error: BaseException | None
    final: bool


class ResponseSink:
    """Where the responses of a decoupled model's request go: 0..N of them, then the end of the request.

    The backend puts each response (outputs, or an error) as it comes; the engine takes them in order until the
    final one. A caller that went away cancels the request, and the backend hears of it (a python model's
    `is_cancelled()` turns true)."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[StreamItem] = asyncio.Queue()
        self.finished = False
        self.on_cancel: Callable[[], None] | None = None

    def put(self, outputs: Arrays | None, error: BaseException | None = None, final: bool = False) -> None:
        if self.finished:
            return  # nothing may follow the final response
        self.finished = final
        self._queue.put_nowait(StreamItem(outputs, error, final))

    async def get(self) -> StreamItem:
        return await self._queue.get()

    def cancel(self) -> None:
        if not self.finished and self.on_cancel is not None:
            self.on_cancel()


@dataclass(slots=True)
class Job:
    """One request's share of an execution, as an instance gets it."""

    inputs: Arrays
    output_names: list[str]
    batch_size: int
    # The pool fills in queue_ns (waiting for an instance) and infer_ns (the execution).
    timing: RequestTiming = field(default_factory=RequestTiming)
    # For backends that see requests, not batches (python): the request (id, parameters, timeout) and, for a
    # decoupled model, where its responses go.
    request: InferenceRequest | None = None
    sink: ResponseSink | None = None
    # Set by a request-level instance while it runs the job: tells the model its caller went away.
    on_cancel: Callable[[], None] | None = None
    # The correlation id and flags the model sees, where the sequence batcher sets them (an iterative sequence's
    # own id; no START once rescheduled); None: the request's own.
    sequence: tuple[int | str, int] | None = None


JobOutcomes = list[Arrays | BaseException]


@dataclass(frozen=True, slots=True)
class BackendContext:
    model_name: str
    version: int
    model_dir: Path
    version_dir: Path
    config: Any  # ModelConfig
    # --backend-config settings for this backend, merged over the global ones.
    backend_config: dict[str, str] = field(default_factory=dict)
    # How many instances of this model version will run side by side (for thread budgets).
    total_instances: int = 1
    gpu_count: int = 0
    # --cuda-memory-pool-byte-size and --model-load-gpu-limit, for KIND_GPU instances.
    gpu_memory: GpuMemory = field(default_factory=GpuMemory)
    services: BackendServices = field(default_factory=BackendServices)


class ModelInstance(Protocol):
    name: str

    def execute(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        """Run the model on model-shaped inputs; return the requested outputs, model-shaped."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class RequestLevelInstance(Protocol):
    """An instance that takes the requests of a batch one by one, each with its own answer or error (python
    models: Triton hands `execute` a list of requests, never a concatenated batch)."""

    name: str

    def submit(self, jobs: list[Job], done: Callable[[JobOutcomes], None]) -> None:
        """Start the jobs; call `done` (on the event loop) with one outcome per job, in order."""
        ...

    def close(self) -> None: ...


class Backend(Protocol):
    name: str

    def load_instance(
        self, ctx: BackendContext, group: Any, index: int, device_id: int
    ) -> ModelInstance | RequestLevelInstance:
        """Build one instance of `group` (an instance_group entry); raise ModelhostError with a clear reason."""
        ...


# A backend whose instances may be built at the same time (each its own process or session) says so with
# `parallel_instances = True`: a model's instances are then built on threads of their own, as Triton builds them
# for the backends that declare parallel instance loading.
#
# A backend may also define the auto-complete hook that backends/registry.py `autocomplete` calls when
# auto-complete is on (`--disable-auto-complete-config` not given):
#
#     @staticmethod
#     def autocomplete(
#         config: ModelConfig, model_dir: Path, *, default_max_batch_size: int, settings: Mapping[str, str]
#     ) -> None:
#         """Fill in what the config leaves out from the model itself, in place."""

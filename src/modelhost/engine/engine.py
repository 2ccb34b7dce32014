"""The engine: it implements `modelhost.engine_api.EngineAPI` for the frontends in its process and for the
engine's end of the link to frontend processes, and answers ensembles and BLS calls directly."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any, Final

from modelhost import TRITON_COMPAT_VERSION
from modelhost.config.normalize import is_ensemble
from modelhost.engine.model import LoadedModel
from modelhost.engine.model_aliases import ModelAliases
from modelhost.engine.redis_cache import RedisCache
from modelhost.engine.registry.registry import ModelRegistry
from modelhost.engine.request_log import log_received, log_succeeded
from modelhost.engine.request_tracing import start_trace, trace_queued, trace_sent
from modelhost.engine.response_cache import ResponseCache, cache_key
from modelhost.engine.shared_memory import SharedMemoryRegistry
from modelhost.engine.shm_lease import Lease
from modelhost.engine_api import CUDA_SHM, CallContext, ModelSignature, ShmKind
from modelhost.errors import InvalidArgument, ModelhostError, NotFound, Unavailable, Unsupported
from modelhost.observability.log_settings import LogSettings
from modelhost.observability.stats import ModelStats, RequestTiming
from modelhost.observability.tracing.tracer import Tracer, stamp_failed_request, stamp_request
from modelhost.options.trace import OpenTelemetrySettings, TraceSettings
from modelhost.repository.overrides import parse_load_parameters
from modelhost.types import FINAL_RESPONSE, InferenceRequest, InferenceResponse

log = logging.getLogger("modelhost.server")

# Inputs larger than this are hashed for the response cache on a worker thread (64 MiB take tens of ms).
_HASH_ON_THREAD_BYTES = 1 << 20

# Extensions listed in server metadata, in Triton's order: only the ones this server implements.
# system_shared_memory only with --allow-client-shm=true; cuda_shared_memory with it where CUDA IPC handles can be
# opened (a GPU and the cuda-bindings package).
EXTENSIONS = [
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
]
_SHM_AFTER = EXTENSIONS.index("model_configuration") + 1


class Engine:
    """The parts given at construction are the server's for its whole life; a bare engine (tests, benchmarks) has
    no logging extension, client shared memory disabled, tracing off and no response cache."""

    __slots__ = (
        "_drained",
        "_in_flight",
        "accepting",
        "aliases",
        "live",
        "log_settings",
        "models",
        "registry",
        "response_cache",
        "server_id",
        "shared_memory",
        "strict_readiness",
        "tracer",
        "tracer_otel",
    )

    def __init__(
        self,
        registry: ModelRegistry,
        *,
        server_id: str = "triton",
        strict_readiness: bool = True,
        log_settings: LogSettings | None = None,
        shared_memory: SharedMemoryRegistry | None = None,
        tracer: Tracer | None = None,
        tracer_otel: OpenTelemetrySettings | None = None,
        response_cache: ResponseCache | RedisCache | None = None,
    ) -> None:
        self.registry: Final = registry
        # The registry's table: a request's model is looked up there directly (one call fewer a request).
        self.models: Final = registry.table
        # The logging extension; None when the server runs without configured logging (in-process tests).
        self.log_settings: Final = log_settings
        self.server_id: Final = server_id
        self.strict_readiness: Final = strict_readiness
        self.live = True
        self.accepting = True
        self._in_flight = 0
        self._drained = asyncio.Event()
        self._drained.set()
        # Client system and CUDA shared memory (--allow-client-shm).
        self.shared_memory: Final = SharedMemoryRegistry() if shared_memory is None else shared_memory
        # The trace extension (--trace-config), and the OpenTelemetry settings its answers show.
        self.tracer: Final = Tracer(TraceSettings(), None) if tracer is None else tracer
        self.tracer_otel: Final = tracer_otel
        # --cache-config: the response cache models with `response_cache { enable: true }` use.
        self.response_cache: Final = response_cache
        # Models loaded under another name (SageMaker's multi-model API).
        self.aliases: Final = ModelAliases(registry)
        # What the registry's backends reach of the server (python BLS calls) is this engine: the one thing
        # built after the registry that its models call, so it completes the registry's services itself.
        registry.services.engine = self

    # -- health and metadata (EngineAPI) -----------------------------------------------------------------------

    async def is_live(self) -> bool:
        return self.live

    async def is_ready(self) -> bool:
        if not (self.live and self.accepting):
            return False
        if not self.strict_readiness:
            return True
        return self.registry.all_ready() and all(m.healthy for m in self.registry.ready_models())

    def model_healthy(self, name: str, version: str = "") -> bool:
        """Whether a version is ready and healthy (the engine's own question: ensembles, BLS)."""
        try:
            model = self.registry.get(name, version)
        except ModelhostError:
            return False
        return model.healthy

    async def model_ready(self, name: str, version: str = "") -> bool:
        """Model readiness for the ready endpoints: also asks a python model's own `is_ready()`."""
        try:
            model = self.registry.get(name, version)
        except ModelhostError:
            return False
        return await model.ready()

    def decoupled(self, name: str, version: str = "") -> bool:
        return self.registry.get(name, version).decoupled

    async def server_metadata(self) -> dict[str, Any]:
        extensions = list(EXTENSIONS)
        if self.shared_memory.allowed:
            shared = ["system_shared_memory"]
            if self.shared_memory.cuda_available():
                shared.append("cuda_shared_memory")
            extensions[_SHM_AFTER:_SHM_AFTER] = shared
        return {"name": self.server_id, "version": TRITON_COMPAT_VERSION, "extensions": extensions}

    async def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        model = self.registry.get(name, version)
        return {"name": name, "versions": self.registry.ready_versions(name), **model.metadata()}

    async def model_config(self, name: str, version: str = "") -> Any:
        return self.registry.get(name, version).config

    async def model_signature(self, name: str, version: str = "") -> ModelSignature:
        model = await self.model_for_request(name, version)
        return ModelSignature(
            model.name, model.version_str, model.inputs, model.max_batch_size, model.decoupled
        )

    async def check_request(self, request: InferenceRequest) -> None:
        model = await self.model_for_request(request.model_name, request.model_version)
        model.check_request(request)

    def refused(self, name: str, version: str) -> None:
        try:
            model = self.registry.get(name, version)
        except ModelhostError:
            return
        model.stats.failed(0, "REJECTED")

    def model_stats(self, name: str = "", version: str = "") -> list[ModelStats]:
        """Statistics of one model version, of every ready version of a model, or of every ready model."""
        if name and version:
            return [self.registry.get(name, version).stats]
        if name:
            self.registry.get(name)  # unknown model or no ready version: Triton's errors
            return [m.stats for m in self.registry.ready_models() if m.name == name]
        return [m.stats for m in self.registry.ready_models()]

    async def statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        return [s.to_json() for s in self.model_stats(name, version)]

    async def logging_settings(self, changes: dict[str, Any] | None = None) -> dict[str, Any]:
        if self.log_settings is None:
            raise Unsupported("the logging extension is not available in this server")
        return self.log_settings.update(changes) if changes else self.log_settings.get()

    async def trace_settings(self, model: str = "", changes: dict[str, Any] | None = None) -> dict[str, Any]:
        """The trace extension: the settings (global, or of a model), changed first when `changes` is given."""
        if model and self.registry.models.get(model) is None:
            raise InvalidArgument(f"Request for unknown model : {model}")
        settings = (
            self.tracer.update(changes, model) if changes is not None else self.tracer.settings_for(model)
        )
        return settings.to_json(self.tracer_otel)

    async def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        return list(self.registry.index(ready_only))

    async def reload_if_evicted(self, name: str) -> None:
        try:
            self.registry.get(name)
        except (NotFound, Unavailable):
            await self.registry.load_on_demand(name, "")

    async def register_models(self, alias: str, url: str, names: dict[str, str]) -> None:
        self.aliases.register(alias, url, names)

    async def forget_models(self, alias: str) -> None:
        self.aliases.forget(alias)

    async def model_aliases(self, alias: str = "") -> dict[str, dict[str, Any]]:
        return self.aliases.get(alias)

    async def settled(self, timeout: float | None = None) -> bool:
        return await self.registry.settled(timeout)

    # -- shared memory (EngineAPI) -----------------------------------------------------------------------------

    async def check_shared_memory(self, kind: ShmKind) -> None:
        self.shared_memory.check_allowed()
        if kind == CUDA_SHM:
            self.shared_memory.cuda_ipc()  # without a GPU: 501 with the reason

    async def shared_memory_status(self, kind: ShmKind, name: str = "") -> list[dict[str, Any]]:
        return self.shared_memory.status(name, kind)

    async def register_system_shared_memory(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.shared_memory.register(name, key, offset, byte_size)

    async def register_cuda_shared_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        # Off the loop: opening a handle maps memory, and the first one creates the CUDA context.
        await asyncio.to_thread(self.shared_memory.register_cuda, name, raw_handle, device_id, byte_size)

    async def unregister_shared_memory(self, kind: ShmKind, name: str = "") -> None:
        self.shared_memory.unregister(name, kind)

    # -- the model repository (EngineAPI) ----------------------------------------------------------------------

    def _check_explicit_mode(self) -> None:
        if self.registry.mode != "explicit":
            # Triton's answer in both the none and the poll mode.
            raise Unavailable("explicit model load / unload is not allowed if polling is enabled")

    async def load_model(self, name: str, parameters: dict[str, Any], *, files_base64: bool) -> None:
        """The repository extension's load: (re)load `name`, with optional config and file overrides."""
        self._check_explicit_mode()
        try:
            override = parse_load_parameters(parameters, files_base64=files_base64)
        except InvalidArgument as e:
            # Triton's prefix for overrides it cannot use (its qa suite L0_lifecycle matches it), then why.
            raise InvalidArgument(
                f"failed to load '{name}', failed to poll from model repository: {e.message}"
            ) from e
        await self.registry.load(name, None if override.empty else override)

    async def unload_model(self, name: str, parameters: dict[str, Any]) -> None:
        """The repository extension's unload. The ensembles using the model are unloaded with it whether or not
        `unload_dependents` is set (as in Triton: they cannot serve without it), and come back with it. With
        `unload_dependents`, an ensemble's composing models loaded only for it are unloaded too."""
        self._check_explicit_mode()
        dependents = parameters.get("unload_dependents", False)
        if not isinstance(dependents, bool):
            raise InvalidArgument("unload parameter 'unload_dependents' must be a boolean")
        await self.registry.unload(name, composing=dependents)

    # -- inference ---------------------------------------------------------------------------------------------

    def _continues_sequence(self, request: InferenceRequest) -> bool:
        """While draining, the later requests of live sequences are still served, as Triton does: a sequence
        begun before the stop can end (or is released once idle)."""
        try:
            model = self.registry.get(request.model_name, request.model_version)
        except ModelhostError:
            return False
        return model.continues_sequence(request)

    def _stopping(self, model_name: str) -> Unavailable:
        """A new request while the server drains: Triton's words, which its scheduler gives (for an ensemble, its
        first step's scheduler, named after the ensemble). Clients and Triton's L0_lifecycle match them."""
        message = "Server is stopping, scheduler for model has stopped accepting new inference requests"
        entry = self.registry.models.get(model_name)
        if entry is not None and entry.config is not None and is_ensemble(entry.config):
            message = f"in ensemble '{model_name}', {message}"
        return Unavailable(message)

    def infer(
        self, request: InferenceRequest, context: CallContext | None = None, *, internal: bool = False
    ) -> Coroutine[Any, Any, InferenceResponse]:
        """`context`: how a frontend received the request, for its trace (a traced request's trace then stays
        open until `sent`). `internal`: a request an ensemble makes of a composing model for a request already
        accepted (it goes on while the server drains).

        A plain call that hands back the coroutine that serves the request: most requests need nothing else of
        it (no shared memory, the server accepting), and so pass through no coroutine of their own here."""
        if self.accepting and not request.shared_memory:
            return self._infer(request, context)
        return self._infer_checked(request, context, internal)

    async def _infer_checked(
        self, request: InferenceRequest, context: CallContext | None, internal: bool
    ) -> InferenceResponse:
        """`infer` while the server drains, or with shared-memory refs to resolve around the request."""
        if not (self.accepting or internal or self._continues_sequence(request)):
            raise self._stopping(request.model_name)
        if not request.shared_memory:
            return await self._infer(request, context)
        lease = Lease(self.shared_memory)
        try:
            lease.read(request)
            return lease.written(await self._infer(request, context))
        finally:
            lease.release()

    async def _infer(self, request: InferenceRequest, context: CallContext | None) -> InferenceResponse:
        try:
            model = self.models.get(request.model_name, request.model_version)
        except (NotFound, Unavailable) as e:
            model = await self._on_demand(request.model_name, request.model_version, e)
        stats = model.stats
        cache = self.response_cache if stats.cached else None
        if cache is not None:
            started = time.perf_counter_ns()
            if sum(t.data.nbytes for t in request.inputs) > _HASH_ON_THREAD_BYTES:  # keep the loop serving
                key = await asyncio.to_thread(cache_key, model.cache_name, model.version_str, request)
            else:
                key = cache_key(model.cache_name, model.version_str, request)
            hit = await cache.lookup(key, request, model.version_str)
            lookup_ns = time.perf_counter_ns() - started
            if hit is not None:
                stats.served_from_cache(time.perf_counter_ns() - started, lookup_ns)
                return hit
        # --log-verbose >= 1: every request, as Triton's verbose log.
        verbose = log.isEnabledFor(logging.DEBUG)
        if verbose:
            log_received(request, model)
        trace = request.trace
        if trace is None and context is not None and self.tracer.enabled:
            trace = start_trace(self.tracer, request, context)
        if trace is not None:
            traced_from = trace_queued(trace, model.version_str, request)
        self._enter()
        started = time.perf_counter_ns()
        try:
            response, timing = await model.infer(request)
        except BaseException as e:
            stats.failed(time.perf_counter_ns() - started, _failure_reason(e))
            if trace is not None:
                stamp_failed_request(trace, traced_from, time.monotonic_ns())
                if context is not None:
                    self.tracer.finish(trace)  # the frontend sends no answer: the trace ends here
            raise
        else:
            stats.succeeded(time.perf_counter_ns() - started, timing)
            if cache is not None:
                inserted = time.perf_counter_ns()
                cache.insert(key, response)
                stats.cache_missed(lookup_ns + time.perf_counter_ns() - inserted)
            if verbose:
                log_succeeded(request, model, time.perf_counter_ns() - started, timing)
            if trace is not None:
                trace.ensemble = model.ensemble is not None
                stamp_request(trace, traced_from, timing, time.monotonic_ns())
                for tensor in response.outputs:
                    trace.tensor("TENSOR_BACKEND_OUTPUT", tensor.name, tensor.datatype, tensor.data)
            return response
        finally:
            self._leave()

    async def model_for_request(self, name: str, version: str = "") -> LoadedModel:
        """The version that serves a request: loaded first with --model-load-on-demand where it is not."""
        try:
            return self.registry.get(name, version)
        except (NotFound, Unavailable) as e:
            return await self._on_demand(name, version, e)

    async def _on_demand(self, name: str, version: str, error: ModelhostError) -> LoadedModel:
        if not self.registry.settings.load_on_demand:
            raise error
        return await self.registry.load_on_demand(name, version)

    def sent(self, request: InferenceRequest, send_started_ns: int, *, last: bool = True) -> None:
        trace_sent(self.tracer, request, send_started_ns, last)

    async def infer_stream(
        self, request: InferenceRequest, context: CallContext | None = None, *, internal: bool = False
    ) -> AsyncIterator[InferenceResponse]:
        """The responses of one request of a stream (several for a decoupled model), each marked final or not."""
        if not (self.accepting or internal or self._continues_sequence(request)):
            raise self._stopping(request.model_name)
        lease = None
        if request.shared_memory:
            lease = Lease(self.shared_memory)
        try:
            if lease is not None:
                lease.read(request)
            trace = None
            if context is not None and self.tracer.enabled:
                trace = start_trace(self.tracer, request, context)
            try:
                async for response in self._infer_stream(request):
                    yield response if lease is None else lease.written(response)
            finally:
                if trace is not None:
                    self.tracer.finish(trace)
        finally:
            if lease is not None:
                lease.release()

    async def _infer_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        model = await self.model_for_request(request.model_name, request.model_version)
        if not model.decoupled:
            response = await self._infer(request, None)
            response.parameters[FINAL_RESPONSE] = True
            yield response
            return
        stats = model.stats
        trace = request.trace
        if trace is not None:  # a decoupled request: its start and end (no queue / compute breakdown)
            trace.stamp("REQUEST_START", trace_queued(trace, model.version_str, request))
        self._enter()
        started = time.perf_counter_ns()
        try:
            async for response in model.infer_stream(request):
                if trace is not None:
                    trace.stamp("INFER_RESPONSE_COMPLETE")
                yield response
        except BaseException as e:
            stats.failed(time.perf_counter_ns() - started, _failure_reason(e))
            raise
        else:
            # Where a decoupled request spent its time is not broken down (queue, compute): only its total.
            stats.succeeded(time.perf_counter_ns() - started, RequestTiming())
        finally:
            if trace is not None:
                trace.stamp("REQUEST_END")
            self._leave()

    def _enter(self) -> None:
        self._in_flight += 1
        if self._in_flight == 1:  # the first in flight: not drained until the last one leaves
            self._drained.clear()

    def _leave(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._drained.set()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def drain(self, timeout: float) -> bool:
        """Stop accepting and wait for in-flight requests; False if some were still running at the timeout."""
        self.accepting = False
        deadline = time.monotonic() + timeout
        if not self._drained.is_set():
            try:
                await asyncio.wait_for(self._drained.wait(), timeout)
            except TimeoutError:
                return False
        # Then the sequences still live (their later requests are served meanwhile), until they end or are
        # released for idleness, as Triton waits for them.
        while self.registry.busy_versions():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        # And the versions a reload or unload is closing in the background (a python model's finalize), which
        # Triton counts among its live models until they are gone (L0_lifecycle: both unloads are logged).
        return await self.registry.settled(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        self.live = False
        self.registry.close()
        self.shared_memory.close()


def _failure_reason(error: BaseException) -> str:
    """The `reason` label of a failed request: the error's own, or CANCELED when the caller went away."""
    return error.failure_reason if isinstance(error, ModelhostError) else "CANCELED"

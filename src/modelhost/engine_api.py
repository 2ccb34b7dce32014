"""The one seam between the frontends and the engine: what a frontend may ask of the engine, in plain data.

Every frontend (HTTP, gRPC, SageMaker) holds an `EngineAPI` and nothing else of the engine: no registry, model,
scheduler, shared-memory region or tracer. Two things implement it: the engine itself
(`modelhost.engine.engine.Engine`, in the same process, no hop) and, in a frontend process,
`modelhost.transport.client.RemoteEngine`, which carries each call over the link to the engine process. The shape
follows vLLM's `EngineClient`, which has the same two implementations.

What crosses the seam is plain data: requests and responses (`modelhost.types`), JSON-shaped dicts for metadata,
statistics and settings, the model configuration as its protobuf message, and errors as `ModelhostError`s whose
`kind` each frontend maps to its own statuses. Tensors in client shared memory travel as `ShmWindow` refs, which
the engine resolves (it owns the regions); outputs it wrote into a region come back with their window set.

Tracing is written once, in the engine: a frontend passes how it received the request (`CallContext`) and, for a
request the engine traced (`request.trace` is then set), reports when it sent the answer (`sent`).
"""

from __future__ import annotations

import typing
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from modelhost.io_specs import TensorSpec
from modelhost.types import InferenceRequest, InferenceResponse

SYSTEM_SHM: Final = "system"
CUDA_SHM: Final = "cuda"
ShmKind = Literal["system", "cuda"]
WireProtocol = Literal["HTTP", "GRPC"]

# The trace activities a frontend's receive and send windows are recorded under, by protocol (Triton's names).
RECEIVE_ACTIVITIES = {
    "HTTP": ("HTTP_RECV_START", "HTTP_RECV_END"),
    "GRPC": ("GRPC_WAITREAD_START", "GRPC_WAITREAD_END"),
}
SEND_ACTIVITIES = {"HTTP": ("HTTP_SEND_START", "HTTP_SEND_END"), "GRPC": ("GRPC_SEND_START", "GRPC_SEND_END")}


@dataclass(
    slots=True
)  # not frozen: one is made per request, and a frozen dataclass costs 5x as much to build
class CallContext:
    """How a frontend received a request: what its trace records of the frontend, when tracing samples it."""

    protocol: WireProtocol
    received_ns: int  # CLOCK_MONOTONIC: the same clock in every process
    # The W3C traceparent header, or what reads it (gRPC reads its metadata only for a sampled request).
    traceparent: str | Callable[[], str] = ""

    def parent(self) -> str:
        return self.traceparent if isinstance(self.traceparent, str) else self.traceparent()


@dataclass(frozen=True, slots=True)
class ModelSignature:
    """What a frontend needs of a model to decode a request that does not describe its own tensors (a raw binary
    body, a generate body): the ready version's inputs (without the ones the server feeds) and batching."""

    name: str
    version: str
    inputs: Mapping[str, TensorSpec]
    max_batch_size: int
    decoupled: bool


class EngineAPI(typing.Protocol):
    """Everything a frontend asks of the engine. Failures raise `modelhost.errors.ModelhostError`."""

    # -- health and metadata -----------------------------------------------------------------------------------

    async def is_live(self) -> bool: ...

    async def is_ready(self) -> bool: ...

    async def server_metadata(self) -> dict[str, Any]: ...

    async def model_ready(self, name: str, version: str = "") -> bool:
        """Readiness of a model version, a python model's own `is_ready()` included."""
        ...

    async def model_metadata(self, name: str, version: str = "") -> dict[str, Any]: ...

    async def model_config(self, name: str, version: str = "") -> Any:
        """The configuration in force, as its `inference.ModelConfig` protobuf message."""
        ...

    async def model_signature(self, name: str, version: str = "") -> ModelSignature:
        """The version that serves a request (loaded first with --model-load-on-demand)."""
        ...

    # -- inference ---------------------------------------------------------------------------------------------

    async def check_request(self, request: InferenceRequest) -> None:
        """Raise what `infer` would raise for this request's inputs and outputs, without running it: for a
        frontend that answers a refused request differently from a failed one (/generate_stream)."""
        ...

    async def infer(self, request: InferenceRequest, context: CallContext | None = None) -> InferenceResponse:
        """One request, one response. With a `context`, a traced request's trace stays open (`request.trace` is
        set) until the frontend calls `sent`."""
        ...

    def infer_stream(
        self, request: InferenceRequest, context: CallContext | None = None
    ) -> AsyncIterator[InferenceResponse]:
        """The responses of one request (several for a decoupled model), each marked final or not; a response
        with `error` set is an error the request goes on after. Closing the iterator cancels the request."""
        ...

    def sent(self, request: InferenceRequest, send_started_ns: int, *, last: bool = True) -> None:
        """A traced request's answer went out: encoded from `send_started_ns` until now. The trace ends with the
        `last` answer of a unary call; a stream's trace ends with the stream."""
        ...

    def refused(self, name: str, version: str) -> None:
        """A request the frontend refused itself (its buffer full): counted as a rejection of the model."""
        ...

    # -- statistics, logging and trace settings -----------------------------------------------------------------

    async def statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]: ...

    async def logging_settings(self, changes: dict[str, Any] | None = None) -> dict[str, Any]: ...

    async def trace_settings(
        self, model: str = "", changes: dict[str, Any] | None = None
    ) -> dict[str, Any]: ...

    # -- the model repository ----------------------------------------------------------------------------------

    async def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]: ...

    async def load_model(self, name: str, parameters: dict[str, Any], *, files_base64: bool) -> None: ...

    async def unload_model(self, name: str, parameters: dict[str, Any]) -> None: ...

    async def reload_if_evicted(self, name: str) -> None:
        """Load `name` again where it was loaded and then unloaded to keep a memory budget or for idleness."""
        ...

    async def register_models(self, alias: str, url: str, names: dict[str, str]) -> None:
        """Serve these model names from these directories under `alias` (SageMaker's multi-model loads; the first
        name is the one loaded), checked against the aliases, the repositories' models and those already
        registered or loaded."""
        ...

    async def forget_models(self, alias: str) -> None:
        """Forget an alias and the names it registered."""
        ...

    async def model_aliases(self, alias: str = "") -> dict[str, dict[str, Any]]:
        """Every alias (or the one named, if known): its `target` model, `url` and registered `names`."""
        ...

    async def settled(self, timeout: float | None = None) -> bool:
        """Wait until no version is being loaded or closed; False at the timeout."""
        ...

    # -- shared memory -----------------------------------------------------------------------------------------

    async def check_shared_memory(self, kind: ShmKind) -> None:
        """Raise why regions of `kind` cannot be registered here (the extension off; no CUDA)."""
        ...

    async def shared_memory_status(self, kind: ShmKind, name: str = "") -> list[dict[str, Any]]: ...

    async def register_system_shared_memory(
        self, name: str, key: str, offset: int, byte_size: int
    ) -> None: ...

    async def register_cuda_shared_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None: ...

    async def unregister_shared_memory(self, kind: ShmKind, name: str = "") -> None: ...

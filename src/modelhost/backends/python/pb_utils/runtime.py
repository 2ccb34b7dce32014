"""The runtime seam: everything in pb_utils that needs the server goes through one object the stub installs with
`set_runtime` (a `Runtime`). Without one (a model file imported by a plain test) BLS, response senders, metrics and
model control raise TritonModelException, and Logger prints to stderr."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import Any, Protocol

from modelhost.backends.python.pb_utils.bls import ResponseIterator
from modelhost.backends.python.pb_utils.errors import TritonModelException
from modelhost.backends.python.pb_utils.responses import InferenceResponse


class Runtime(Protocol):
    """What pb_utils needs from the stub process. Methods may be called from any thread of the model.

    Errors: a failed BLS request is returned as an InferenceResponse whose has_error() is True, never raised. The
    other methods raise TritonModelException with the server's message; pb_utils adds Triton's prefixes
    ("Failed to load model: ", "Error when creating MetricFamily: ", ...).

    `request` is a pb_utils.InferenceRequest, typed Any here: requests.py, which calls the runtime, stands above
    this module (a request calls its runtime; the runtime does not make requests).
    """

    def exec_bls(
        self, request: Any, decoupled: bool, timeout_us: int
    ) -> InferenceResponse | ResponseIterator:
        """Run a BLS request and block until it is answered; decoupled: an iterator of its responses
        (a ResponseIterator, or any iterator: pb_utils wraps it, taking its `cancel` method if it has one)."""
        ...

    def async_exec_bls(
        self, request: Any, decoupled: bool
    ) -> Awaitable[InferenceResponse | AsyncIterator[InferenceResponse]]:
        """Send a BLS request now (called on the model's running event loop) and return what awaits its answer."""
        ...

    def send_response(self, key: int, response: InferenceResponse | None, flags: int) -> None:
        """A response (or just the FINAL flag) for the server request `key`; pb_utils has checked Triton's rules."""
        ...

    def is_cancelled(self, key: int) -> bool: ...

    def log(self, level: str, message: str, filename: str, line: int) -> None:
        """level: "INFO" | "WARNING" | "ERROR" | "VERBOSE"; filename and line are the model's call site."""
        ...

    def register_metric_family(self, name: str, description: str, kind: str) -> None:
        """kind: "COUNTER" | "GAUGE" | "HISTOGRAM"."""
        ...

    def register_metric(self, family: str, labels: dict[str, str], buckets: list[float] | None) -> int:
        """A metric of the family named `family`; returns the id for update_metric and metric_value."""
        ...

    def update_metric(self, metric_id: int, op: str, value: float) -> None:
        """op: "increment" | "set" | "observe" (pb_utils has checked that the family's kind allows it)."""
        ...

    def metric_value(self, metric_id: int) -> float: ...

    def trace_activity(self, trace_id: int, name: str, ns: int) -> None:
        """A custom activity at `ns` (time.monotonic_ns, the server's clock too) in the server's trace `trace_id`."""
        ...

    def model_control(self, op: str, model_name: str, **kwargs: Any) -> Any:
        """op "load" (config: str, files: dict[str, bytes]) -> None; "unload" (unload_dependents: bool) -> None;
        "is_ready" (model_version: str, "" for the latest) -> bool."""
        ...


_runtime: Runtime | None = None
_model_dir: str | None = None


def set_runtime(runtime: Runtime | None) -> None:
    """Install (or, with None, remove) the stub's runtime."""
    global _runtime
    _runtime = runtime


def set_model_dir(path: str | None) -> None:
    """The model's directory, for get_model_dir() (Triton defines that function once the stub is set up)."""
    global _model_dir
    _model_dir = path


def installed_runtime() -> Runtime | None:
    """The stub's runtime, or None outside the python backend."""
    return _runtime


def require_runtime(what: str) -> Runtime:
    runtime = _runtime
    if runtime is None:
        raise TritonModelException(
            f"{what} is only available when the model runs in the python backend (no Triton runtime is installed)"
        )
    return runtime


def get_model_dir() -> str:
    """The directory of the running model's model.py."""
    if _model_dir is None:
        raise TritonModelException(
            "get_model_dir() is only available when the model runs in the python backend"
        )
    return _model_dir

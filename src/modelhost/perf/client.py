"""The control plane of a perf run: model metadata, config and statistics, over HTTP or gRPC.

Only the KServe v2 / Triton APIs are used, so a run works against tritonserver as well as modelhost.
"""

from __future__ import annotations

import http.client
import json
import socket
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import quote

from modelhost.perf.options import PerfOptions


class PerfError(Exception):
    """A run that cannot go on; `modelhost perf` prints the message as one line and exits non-zero."""


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    datatype: str
    shape: list[int]  # as in the metadata: with the batch dimension (-1) when max_batch_size > 0


@dataclass(frozen=True, slots=True)
class ModelInfo:
    name: str
    version: str
    max_batch_size: int
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    sequence: bool = False
    decoupled: bool = False
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ServerStats:
    """The counters of one model version that a window's report needs (cumulative, as the server has them)."""

    inference_count: int = 0
    execution_count: int = 0
    success_count: int = 0
    success_ns: int = 0
    queue_count: int = 0
    queue_ns: int = 0
    compute_input_count: int = 0
    compute_input_ns: int = 0
    compute_infer_count: int = 0
    compute_infer_ns: int = 0
    compute_output_count: int = 0
    compute_output_ns: int = 0

    def __sub__(self, other: ServerStats) -> ServerStats:
        return ServerStats(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(ServerStats)))

    def __add__(self, other: ServerStats) -> ServerStats:
        return ServerStats(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(ServerStats)))

    @classmethod
    def from_json(cls, stats: dict[str, Any]) -> ServerStats:
        """From one entry of `model_stats` (HTTP JSON, or gRPC as JSON where int64 come as strings)."""
        inf = stats.get("inference_stats", {})

        def duration(key: str) -> tuple[int, int]:
            d = inf.get(key, {})
            return int(d.get("count", 0)), int(d.get("ns", 0))

        success, queue = duration("success"), duration("queue")
        cin, cinf, cout = duration("compute_input"), duration("compute_infer"), duration("compute_output")
        return cls(
            int(stats.get("inference_count", 0)),
            int(stats.get("execution_count", 0)),
            *success,
            *queue,
            *cin,
            *cinf,
            *cout,
        )

    @classmethod
    def sum_json(cls, model_stats: list[dict[str, Any]]) -> ServerStats:
        total = cls()
        for entry in model_stats:
            total = total + cls.from_json(entry)
        return total


def split_url(url: str, default_port: int) -> tuple[str, int]:
    text = url.removeprefix("http://").removeprefix("grpc://").rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or "]" in port:
        return text, default_port
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise PerfError(f"bad server address -u {url!r}: expected host:port") from None


class ControlClient:
    """Metadata, config and statistics of the model under test."""

    def __init__(self, options: PerfOptions) -> None:
        self.options = options
        self.model = options.model
        self.version = options.version

    def model_info(self) -> ModelInfo:
        raise NotImplementedError

    def stats(self) -> ServerStats:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def register_system_shm(self, name: str, key: str, byte_size: int) -> None:
        raise NotImplementedError

    def unregister_system_shm(self, name: str) -> None:
        raise NotImplementedError

    def _info(self, metadata: dict[str, Any], config: dict[str, Any]) -> ModelInfo:
        def tensors(key: str) -> list[TensorInfo]:
            return [
                TensorInfo(t["name"], t["datatype"], [int(d) for d in t.get("shape", [])])
                for t in metadata.get(key, [])
            ]

        policy = config.get("model_transaction_policy") or {}
        return ModelInfo(
            name=self.model,
            version=self.version,
            max_batch_size=int(config.get("max_batch_size", 0)),
            inputs=tensors("inputs"),
            outputs=tensors("outputs"),
            sequence="sequence_batching" in config,
            decoupled=bool(policy.get("decoupled", False)),
            config=config,
        )


class HttpControlClient(ControlClient):
    def __init__(self, options: PerfOptions) -> None:
        super().__init__(options)
        self.host, self.port = split_url(options.url, 8000)
        self._conn: http.client.HTTPConnection | None = None
        base = f"/v2/models/{quote(self.model, safe='')}"
        self.base = base + (f"/versions/{quote(self.version, safe='')}" if self.version else "")

    def _get(self, path: str) -> dict[str, Any]:
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            try:
                self._conn.request("GET", path)
                response = self._conn.getresponse()
                body = response.read()
                break
            except (OSError, http.client.HTTPException) as error:
                self.close()
                if attempt:
                    raise PerfError(
                        f"cannot reach the server at {self.host}:{self.port} over HTTP: {_reason(error)}"
                    ) from None
        if response.status != 200:
            raise PerfError(_http_error(response.status, body, self.model))
        try:
            value = json.loads(body)
        except ValueError:
            raise PerfError(f"GET {path}: the server answered something that is not JSON") from None
        if not isinstance(value, dict):
            raise PerfError(f"GET {path}: unexpected answer")
        return value

    def model_info(self) -> ModelInfo:
        metadata = self._get(self.base)
        config = self._get(self.base + "/config")
        return self._info(metadata, config)

    def stats(self) -> ServerStats:
        return ServerStats.sum_json(self._get(self.base + "/stats").get("model_stats", []))

    def _post(self, path: str, document: dict[str, Any]) -> tuple[int, bytes]:
        body = json.dumps(document).encode()
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            try:
                self._conn.request("POST", path, body, {"Content-Type": "application/json"})
                response = self._conn.getresponse()
                return response.status, response.read()
            except (OSError, http.client.HTTPException) as error:
                self.close()
                if attempt:
                    raise PerfError(
                        f"cannot reach the server at {self.host}:{self.port} over HTTP: {_reason(error)}"
                    ) from None
        raise AssertionError("unreachable")

    def register_system_shm(self, name: str, key: str, byte_size: int) -> None:
        path = f"/v2/systemsharedmemory/region/{quote(name, safe='')}/register"
        status, body = self._post(path, {"key": key, "offset": 0, "byte_size": byte_size})
        if status != 200:
            raise PerfError(shm_error(_http_error(status, body, self.model), status == 501))

    def unregister_system_shm(self, name: str) -> None:
        self._post(f"/v2/systemsharedmemory/region/{quote(name, safe='')}/unregister", {})

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class GrpcControlClient(ControlClient):
    def __init__(self, options: PerfOptions) -> None:
        super().__init__(options)
        import tritonclient.grpc as grpcclient

        host, port = split_url(options.url, 8001)
        self.target = f"{host}:{port}"
        self._client = grpcclient.InferenceServerClient(self.target)

    def _call(self, name: str, **kwargs: Any) -> dict[str, Any]:
        from tritonclient.utils import InferenceServerException

        try:
            value = getattr(self._client, name)(self.model, self.version, as_json=True, **kwargs)
        except InferenceServerException as error:
            message = str(error.message() or error)
            if "unavailable" in str(error.status() or "").lower() or "failed to connect" in message.lower():
                raise PerfError(f"cannot reach the server at {self.target} over gRPC: {message}") from None
            raise PerfError(f"model {self.model!r}: {message}") from None
        return dict(value)

    def model_info(self) -> ModelInfo:
        metadata = self._call("get_model_metadata")
        config = self._call("get_model_config").get("config", {})
        return self._info(metadata, config)

    def stats(self) -> ServerStats:
        return ServerStats.sum_json(self._call("get_inference_statistics").get("model_stats", []))

    def register_system_shm(self, name: str, key: str, byte_size: int) -> None:
        from tritonclient.utils import InferenceServerException

        try:
            self._client.register_system_shared_memory(name, key, byte_size)
        except InferenceServerException as error:
            message = str(error.message() or error)
            raise PerfError(shm_error(message, "UNIMPLEMENTED" in str(error.status() or ""))) from None

    def unregister_system_shm(self, name: str) -> None:
        self._client.unregister_system_shared_memory(name)

    def close(self) -> None:
        self._client.close()


def control_client(options: PerfOptions) -> ControlClient:
    return GrpcControlClient(options) if options.protocol == "grpc" else HttpControlClient(options)


def shm_error(message: str, unsupported: bool) -> str:
    """One line for a refused shared-memory registration: says plainly when the server has it disabled."""
    message = " ".join(message.split())
    if unsupported or "disabled" in message.lower():
        return f"--shared-memory system: the server does not allow client shared memory ({message})"
    return f"--shared-memory system: cannot register a shared memory region: {message}"


def _reason(error: BaseException) -> str:
    if isinstance(error, socket.timeout | TimeoutError):
        return "timed out"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


def _http_error(status: int, body: bytes, model: str) -> str:
    try:
        message = str(json.loads(body).get("error", ""))
    except (ValueError, AttributeError):
        message = body.decode(errors="replace")[:200]
    message = " ".join(message.split())
    if status == 404 or (status == 400 and "unknown model" in message.lower()):
        return f"model {model!r}: {message or 'not found'} (HTTP {status})"
    return f"HTTP {status}: {message}"

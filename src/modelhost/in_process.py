"""The in-process Python API: a modelhost server inside a Python program, as Triton's `tritonserver` package
offers one.

    import numpy as np
    import modelhost

    with modelhost.Server(model_repository="/models") as server:
        outputs = server.model("simple").infer({"INPUT0": a, "INPUT1": b})
        print(outputs["OUTPUT0"])

The server runs on an event loop of its own, on a thread of its own, exactly as `modelhost serve` runs it (the
same repository handling, backends, batching and statistics); the program calls it through the `EngineAPI` the
HTTP and gRPC frontends use, with numpy arrays in and out. The frontends start only when asked for (`http_port=`,
`grpc_port=`, `metrics_port=`; 0 picks a free port). Every method may be called from any thread of the program
(not from the server's own loop). Errors are modelhost's (`modelhost.errors`): `NotFound` for an unknown model,
`InvalidArgument` for a bad input, and so on, with the messages the protocols carry.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import queue
import threading
import time
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from modelhost.datatypes import NUMPY_TO_WIRE
from modelhost.engine_api import EngineAPI
from modelhost.errors import InvalidArgument, ModelhostError
from modelhost.options import ServerOptions
from modelhost.types import (
    InferenceRequest,
    InferenceResponse,
    ParamValue,
    RequestedOutput,
    Tensor,
    request_from_wire,
)

T = TypeVar("T")
Arrays = dict[str, npt.NDArray[Any]]
# How long start() waits for the models to load by default.
START_TIMEOUT_S = 600.0
# How often a caller waiting for an answer looks whether the server is still running.
_POLL_S = 0.2


class ServerError(RuntimeError):
    """The server could not start, or has stopped."""


class Server:
    def __init__(
        self,
        model_repository: str | Path | Sequence[str | Path],
        *,
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        **options: Any,
    ) -> None:
        """`model_repository`: one or more repositories (local paths or s3://, gs://, as3:// URLs). The ports:
        None leaves that frontend off, 0 picks a free port. `options`: any other ServerOptions field, under the
        name `modelhost serve`'s flag gives it with underscores (model_control_mode="explicit",
        load_models=["*"], strict_readiness=False, model_memory_budget=..., backend_config={...}, ...).
        Frontends run in this process (frontend_processes=0) unless asked otherwise."""
        repositories = [model_repository] if isinstance(model_repository, str | Path) else model_repository
        fields = {f.name for f in dataclasses.fields(ServerOptions)}
        unknown = sorted(set(options) - fields)
        if unknown:
            raise TypeError(f"unknown server option(s): {', '.join(unknown)}")
        ports: dict[str, Any] = {"allow_http": http_port is not None, "allow_grpc": grpc_port is not None}
        ports["allow_metrics"] = metrics_port is not None
        for name, port in (
            ("http_port", http_port),
            ("grpc_port", grpc_port),
            ("metrics_port", metrics_port),
        ):
            if port is not None:
                ports[name] = port
        try:
            self.options = ServerOptions(
                model_repositories=[str(r) for r in repositories],
                **{"frontend_processes": 0, **ports, **options},
            )
        except ValueError as e:  # the same checks as the command line's
            raise InvalidArgument(str(e)) from None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._control: Any = None
        self._exit_code: int | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self, wait_until_ready: bool = True, timeout: float = START_TIMEOUT_S) -> Server:
        """Start serving: load the models (those `model_control_mode` loads at startup) and start the frontends
        asked for. Raises ServerError if it cannot (the reason is in modelhost's log). `wait_until_ready`: also
        wait until the server is ready (every model loaded)."""
        if self._thread is not None:
            raise ServerError("the server was started already")
        from modelhost.app import ServeControl, serve  # the whole server: imported when one is started

        control = ServeControl()
        started = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)  # this thread's loop (the cleanup below gathers on it)
            self._loop = loop
            started.set()
            try:
                self._exit_code = loop.run_until_complete(serve(self.options, control))
            finally:
                # Calls still under way (another thread's infer or stream) end with the server, not hang.
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._control = control
        self._thread = threading.Thread(target=run, name="modelhost-server", daemon=True)
        self._thread.start()
        started.wait()
        try:
            self._call(_wait_set(control.ready), timeout)
        except TimeoutError:
            self.stop()
            raise ServerError(f"the server did not start within {timeout:g} s") from None
        except ServerError:
            self.stop()
            raise ServerError(
                f"the server did not start (exit code {self._exit_code}); its log says why"
            ) from None
        if wait_until_ready and not self.ready():
            self.stop()  # nothing left running behind the error: stubs, ports, threads
            raise ServerError("the server started but is not ready: a model failed to load (see its log)")
        return self

    def stop(self, timeout: float = 60.0) -> int | None:
        """Stop as SIGTERM stops `modelhost serve` (requests in flight finish, within exit_timeout_secs); the
        exit code `modelhost serve` would have had."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return self._exit_code
        if thread.is_alive():
            with contextlib.suppress(
                RuntimeError
            ):  # its loop closed meanwhile: the server is ending on its own
                loop.call_soon_threadsafe(self._control.stop.set)
            thread.join(timeout)
        self._thread = None
        return self._exit_code

    def __enter__(self) -> Server:
        return self if self._thread is not None else self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def engine(self) -> EngineAPI:
        """The EngineAPI the frontends call; its coroutines run on the server's loop (see `call`)."""
        if self._control is None or self._control.engine is None:
            raise ServerError("the server is not started")
        engine: EngineAPI = self._control.engine
        return engine

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run one of `engine`'s coroutines on the server's loop and wait for its result."""
        return self._call(coroutine, timeout)

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start one of `engine`'s coroutines on the server's loop without waiting: for a program with an event
        loop of its own, which awaits `asyncio.wrap_future(server.submit(...))`. Cancelling the future cancels
        the call."""
        loop, thread = self._loop, self._thread
        if loop is None or loop.is_closed() or thread is None:
            coroutine.close()
            raise ServerError("the server is not running")
        return asyncio.run_coroutine_threadsafe(coroutine, loop)

    def _call(self, coroutine: Coroutine[Any, Any, T], timeout: float | None) -> T:
        thread = self._thread
        future = self.submit(coroutine)
        assert thread is not None  # submit raised otherwise
        deadline = None if timeout is None else time.monotonic() + timeout
        # Waited for in short steps: a server that ends meanwhile (a failed start, a stop) ends the wait.
        while True:
            try:
                return future.result(_POLL_S)
            except concurrent.futures.CancelledError:
                raise ServerError("the server stopped before answering") from None
            except TimeoutError:
                if future.done():
                    raise  # the call's own TimeoutError, not the wait's
            if not thread.is_alive() and not future.done():
                future.cancel()
                raise ServerError(
                    f"the server is not running (exit code {self._exit_code}); its log says why"
                )
            if deadline is not None and time.monotonic() > deadline:
                future.cancel()
                raise TimeoutError(f"no answer within {timeout:g} s")

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def ports(self) -> dict[str, int]:
        """The ports of the frontends started: "http", "grpc", "metrics" (those picked when 0 was asked for)."""
        return dict(self._control.ports) if self._control is not None else {}

    # -- the server ---------------------------------------------------------------------------------------------

    def live(self) -> bool:
        return self.call(self.engine.is_live())

    def ready(self) -> bool:
        return self.call(self.engine.is_ready())

    def metadata(self) -> dict[str, Any]:
        return self.call(self.engine.server_metadata())

    def models(self, ready_only: bool = False) -> list[dict[str, Any]]:
        """The repository index: name, version, state and reason of each model."""
        return self.call(self.engine.repository_index(ready_only))

    def load(self, name: str, config: Mapping[str, Any] | str | None = None) -> Model:
        """Load (or reload) a model; `config`: a config override (JSON text or a dict), as the repository API's
        `config` parameter. Needs model_control_mode="explicit"."""
        parameters: dict[str, Any] = {}
        if config is not None:
            import json

            parameters["config"] = config if isinstance(config, str) else json.dumps(config)
        self.call(self.engine.load_model(name, parameters, files_base64=False))
        return self.model(name)

    def unload(self, name: str, unload_dependents: bool = False) -> None:
        self.call(self.engine.unload_model(name, {"unload_dependents": unload_dependents}))

    def model(self, name: str, version: str = "") -> Model:
        """A handle on a model (it need not be loaded yet; calls fail with NotFound while it is not)."""
        return Model(self, name, version)


class Model:
    def __init__(self, server: Server, name: str, version: str = "") -> None:
        self.server = server
        self.name = name
        self.version = version

    def __repr__(self) -> str:
        return f"Model({self.name!r}, version={self.version!r})"

    def ready(self) -> bool:
        return self.server.call(self.server.engine.model_ready(self.name, self.version))

    def metadata(self) -> dict[str, Any]:
        return self.server.call(self.server.engine.model_metadata(self.name, self.version))

    def config(self) -> dict[str, Any]:
        """The configuration in force, as GET .../config answers it (JSON form)."""
        from google.protobuf import json_format  # type: ignore[import-untyped]

        message = self.server.call(self.server.engine.model_config(self.name, self.version))
        config: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
        return config

    def statistics(self) -> list[dict[str, Any]]:
        return self.server.call(self.server.engine.statistics(self.name, self.version))

    def infer(
        self,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] = (),
        parameters: Mapping[str, ParamValue] | None = None,
        request_id: str = "",
        timeout: float | None = None,
    ) -> Arrays:
        """One inference: `inputs` by name (numpy arrays, or what numpy.asarray takes; str and bytes arrays are
        BYTES tensors), the outputs asked for (all by default). A decoupled model is refused, as over HTTP: use
        `stream`."""
        request = self._request(inputs, outputs, parameters, request_id)
        response = self.server.call(self.server.engine.infer(request), timeout)
        return _arrays(response)

    def stream(
        self,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] = (),
        parameters: Mapping[str, ParamValue] | None = None,
        request_id: str = "",
    ) -> Iterator[Arrays]:
        """The responses of one request as they come: a decoupled model's 0..N, any other model's one. An error
        response of a decoupled model is raised where it comes in the stream."""
        request = self._request(inputs, outputs, parameters, request_id)
        answers: queue.Queue[tuple[str, Any]] = queue.Queue()
        engine = self.server.engine

        async def pump() -> None:
            try:
                async for response in engine.infer_stream(request):
                    answers.put(("response", response))
            except asyncio.CancelledError:  # the server stopped (or the reader left): said as such
                answers.put(("error", ServerError("the server stopped before the stream ended")))
                raise
            except Exception as e:  # handed to the reading thread, which raises it
                answers.put(("error", e))
            else:
                answers.put(("end", None))

        task = self.server.call(_started(pump()))
        try:
            while True:
                try:
                    kind, item = answers.get(timeout=_POLL_S)
                except queue.Empty:
                    if not self.server.running:
                        raise ServerError("the server stopped before the stream ended") from None
                    continue
                if kind == "end":
                    return
                if kind == "error":
                    raise item
                if item.error is not None:
                    raise item.error
                if item.outputs:
                    yield _arrays(item)
        finally:
            loop = self.server._loop
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(
                    task.cancel
                )  # a reader that stopped early: the request is cancelled

    def _request(
        self,
        inputs: Mapping[str, Any],
        outputs: Sequence[str],
        parameters: Mapping[str, ParamValue] | None,
        request_id: str,
    ) -> InferenceRequest:
        tensors = [_tensor(name, value) for name, value in inputs.items()]
        requested = [RequestedOutput(name) for name in outputs]
        # As the frontends build it: `priority` and `timeout` become the request's scheduling fields.
        return request_from_wire(
            self.name, self.version, request_id, tensors, requested, dict(parameters or {})
        )


def _tensor(name: str, value: Any) -> Tensor:
    array = np.asarray(value)
    if array.dtype.kind in "US" or array.dtype == np.object_:
        flat = [v.encode() if isinstance(v, str) else v for v in array.reshape(-1)]
        if not all(isinstance(v, bytes) for v in flat):
            raise InvalidArgument(f"input '{name}': an object array must hold str or bytes")
        data = np.empty(len(flat), dtype=np.object_)
        data[:] = flat
        return Tensor(name, "BYTES", list(array.shape), data.reshape(array.shape))
    native = array.dtype.newbyteorder("=")  # the engine reads tensors in this machine's byte order
    datatype = NUMPY_TO_WIRE.get(native)
    if datatype is None:
        raise InvalidArgument(f"input '{name}': numpy dtype {array.dtype} has no KServe datatype")
    return Tensor(name, datatype, list(array.shape), np.ascontiguousarray(array, dtype=native))


def _arrays(response: InferenceResponse) -> Arrays:
    return {tensor.name: tensor.data for tensor in response.outputs}


async def _wait_set(event: asyncio.Event) -> bool:
    await event.wait()
    return True


async def _started(coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    return asyncio.get_running_loop().create_task(coroutine)


__all__ = ["Model", "ModelhostError", "Server", "ServerError"]

"""The user's model in the stub: its model.py imported, `auto_complete_config` run, initialized, asked `is_ready`,
finalized; and every call of its methods, a coroutine run on the stub's event loop thread while the calling
thread waits (`async def execute`, `async_exec`)."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import sys
import threading
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from modelhost.backends.python import gpu_tensors, pb_utils
from modelhost.backends.python.pb_utils.runtime import set_model_dir
from modelhost.backends.python.pb_utils.tensors import gpu_call
from modelhost.backends.python.stub.connection import Connection
from modelhost.backends.python.stub.errors import error_text


class ModelRunner:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.model: Any = None  # the model's TritonPythonModel
        self.model_name = ""
        self.instance_name = ""
        self.decoupled = False
        # BLS only between initialize and finalize, as Triton (its parent side serves it on the running server).
        self.initialized = False
        self.finalizing = False
        # The CUDA device inputs are given on (FORCE_CPU_ONLY_INPUT_TENSORS "no" on a KIND_GPU instance), or None.
        self.input_device: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def on_init(self, message: dict[str, Any]) -> None:
        send = self.connection.channel_send
        try:
            self.model_name = message["args"]["model_name"]
            self.instance_name = message["args"]["model_instance_name"]
            self.decoupled = message["decoupled"]
            self.input_device = message.get("input_device")
            if self.input_device is not None:
                # Without torch or CuPy, the load fails here, not every request later.
                gpu_call(gpu_tensors.framework)
            set_model_dir(str(Path(message["model_file"]).parent))
            module = self._import(message["model_file"])
            self.model = module.TritonPythonModel()
            initialize = getattr(self.model, "initialize", None)
            if initialize is not None:
                # The model is imported: its own initialize may take as long as it takes, as in Triton (the
                # stub timeout bounds the start only). The server stops counting.
                send({"op": "initializing"})
                self.call(initialize, message["args"])
            self.initialized = True
        except BaseException as e:
            send({"op": "init_done", "error": error_text(e)})
            return
        send({"op": "init_done", "error": None, "has_is_ready": hasattr(self.model, "is_ready")})

    def on_auto_complete(self, message: dict[str, Any]) -> None:
        send = self.connection.channel_send
        try:
            module = self._import(message["model_file"])
        except BaseException as e:
            send({"op": "auto_complete_done", "error": error_text(e), "stage": "import"})
            return
        try:
            cls = module.TritonPythonModel
            config = pb_utils.ModelConfig(json.loads(message["config"]))
            hook = getattr(cls, "auto_complete_config", None)
            if hook is not None:
                config = hook(config)
                if not isinstance(config, pb_utils.ModelConfig):
                    name = json.loads(message["config"]).get("name", "")
                    raise pb_utils.TritonModelException(
                        f"auto_complete_config function in model '{name}' must return a valid pb.ModelConfig "
                        "object."
                    )
            result = json.dumps(config.as_dict())
        except BaseException as e:
            send({"op": "auto_complete_done", "error": error_text(e)})
            return
        send({"op": "auto_complete_done", "error": None, "config": result})

    def _import(self, model_file: str) -> Any:
        path = Path(model_file)
        sys.path.insert(0, str(path.parent))  # model.py may import its neighbours, as in Triton
        spec = importlib.util.spec_from_file_location("model", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules["model"] = module
        spec.loader.exec_module(module)
        return module

    def call(self, fn: Any, *args: Any) -> Any:
        """Call a model method; coroutines run on the stub's event loop while this thread waits."""
        result = fn(*args)
        if inspect.isawaitable(result):
            return self.connection.wait(asyncio.run_coroutine_threadsafe(_awaited(result), self.event_loop()))
        return result

    def event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="stub-asyncio", daemon=True).start()
            self._loop = loop
        return self._loop

    def on_is_ready(self, message: dict[str, Any]) -> None:
        check = getattr(self.model, "is_ready", None)
        try:
            ready = True if check is None else bool(self.call(check))
        except BaseException:
            ready = False
        self.connection.channel_send({"op": "ready_done", "id": message["id"], "ready": ready})

    def on_finalize(self, message: dict[str, Any]) -> None:
        self.finalizing = True
        finalize = getattr(self.model, "finalize", None)
        error = None
        if finalize is not None:
            try:
                self.call(finalize)
            except BaseException as e:
                error = error_text(e)
        self.connection.channel_send({"op": "finalized", "error": error})


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable

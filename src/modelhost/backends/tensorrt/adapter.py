"""The only module that imports `tensorrt`: deserializing plans and describing their engines.

Importing it without the package raises ModuleNotFoundError for 'tensorrt', which backends/registry.py turns
into "pip install 'modelhost[tensorrt]'" for the model being loaded (and auto-completed).
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import threading
from collections.abc import Sequence
from typing import Any

from modelhost.backends.tensorrt import cuda
from modelhost.backends.tensorrt.engine import EngineDescription, EngineTensor, ProfileShapes
from modelhost.backends.tensorrt.executor import GpuExecutor
from modelhost.backends.tensorrt.runtime import EngineExecutor, PlanLoadError
from modelhost.backends.tensorrt.settings import TensorRTSettings

trt: Any = importlib.import_module("tensorrt")  # untyped; fails here when the package is missing

log = logging.getLogger(__name__)

# TensorRT's engine deserialization is not thread-safe (Triton serializes it with a global lock too), and the
# logger's error capture below relies on one deserialization at a time.
_DESERIALIZE_LOCK = threading.Lock()


class _Logger(trt.ILogger):  # type: ignore[misc]  # trt is untyped
    """Forwards TensorRT's log to Python logging and keeps the errors of the current deserialization, which
    say why a plan did not load (another TensorRT version, another GPU, not a plan)."""

    def __init__(self) -> None:
        trt.ILogger.__init__(self)
        self.errors: list[str] = []

    def log(self, severity: Any, msg: str) -> None:
        if severity in (trt.ILogger.Severity.INTERNAL_ERROR, trt.ILogger.Severity.ERROR):
            self.errors.append(msg)
            log.error("TensorRT: %s", msg)
        elif severity == trt.ILogger.Severity.WARNING:
            log.warning("TensorRT: %s", msg)
        elif severity == trt.ILogger.Severity.INFO:
            log.info("TensorRT: %s", msg)
        else:
            log.debug("TensorRT: %s", msg)


def _dims(dims: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in dims)


def _profile(engine: Any, name: str, profile: int, shape: tuple[int, ...]) -> ProfileShapes:
    """An input's (min, opt, max) in a profile. An input without dynamic dimensions takes its one shape in every
    profile, whatever TensorRT reports for it (an engine built without profiles has an implicit one)."""
    if -1 not in shape:
        return ProfileShapes(shape, shape, shape)
    low, opt, high = (_dims(d) for d in engine.get_tensor_profile_shape(name, profile))
    return ProfileShapes(low, opt, high)


def describe(engine: Any) -> EngineDescription:
    """The plain description of a deserialized ICudaEngine."""
    num_profiles = int(engine.num_optimization_profiles)
    tensors = []
    for index in range(int(engine.num_io_tensors)):
        name = str(engine.get_tensor_name(index))
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        is_shape_tensor = bool(engine.is_shape_inference_io(name))
        shape = _dims(engine.get_tensor_shape(name))
        profiles: tuple[ProfileShapes, ...] = ()
        if is_input and not is_shape_tensor:
            profiles = tuple(_profile(engine, name, p, shape) for p in range(num_profiles))
        tensors.append(
            EngineTensor(
                name=name,
                is_input=is_input,
                trt_type=str(engine.get_tensor_dtype(name).name),
                shape=shape,
                profiles=profiles,
                is_shape_tensor=is_shape_tensor,
                linear_format=engine.get_tensor_format(name) == trt.TensorFormat.LINEAR,
            )
        )
    return EngineDescription(tuple(tensors), num_profiles, str(trt.__version__))


class TrtLoadedEngine:
    """A deserialized engine with the runtime it came from (which must outlive it)."""

    def __init__(self, runtime: Any, engine: Any) -> None:
        # Assigned engine first: attributes are released in this order, and an engine must go before its runtime.
        self._engine = engine
        self._runtime = runtime
        self._description = describe(engine)

    @property
    def description(self) -> EngineDescription:
        return self._description

    def create_executor(
        self, profiles: Sequence[int], settings: TensorRTSettings, device_id: int, max_batch_size: int
    ) -> EngineExecutor:
        return GpuExecutor(
            trt, self._engine, self._description, profiles, settings, device_id, max_batch_size
        )


class TensorRTRuntime:
    """modelhost's EngineRuntime over the installed tensorrt package and the CUDA runtime."""

    def __init__(self) -> None:
        self._logger = _Logger()
        self._plugins: set[str] = set()
        self._builtin_plugins = False
        self._lock = threading.Lock()

    @property
    def version(self) -> str:
        return str(trt.__version__)

    def device_count(self) -> int:
        return cuda.device_count()

    def compute_capability(self, device_id: int) -> str:
        return cuda.compute_capability(device_id)

    def load_plugins(self, paths: Sequence[str]) -> None:
        """TensorRT's own plugins once, then each --backend-config plugins library once per process. A library
        that fails to load is logged, as Triton does, and the plan that needs it then fails to deserialize."""
        with self._lock:
            if not self._builtin_plugins:
                self._builtin_plugins = True
                if not trt.init_libnvinfer_plugins(self._logger, ""):
                    log.error("Failed to register TensorRT Plugins")
            for path in paths:
                if path in self._plugins:
                    continue
                self._plugins.add(path)
                try:
                    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)  # its creators register themselves on load
                except OSError as e:
                    log.error("unable to load TensorRT plugin library '%s': %s", path, e)

    def deserialize(self, plan: bytes, device_id: int, *, version_compatible: bool) -> TrtLoadedEngine:
        with _DESERIALIZE_LOCK:
            cuda.set_device(device_id)
            self._logger.errors.clear()
            runtime = trt.Runtime(self._logger)
            if runtime is None:
                raise PlanLoadError(["unable to create TensorRT runtime", *self._logger.errors])
            if version_compatible:
                runtime.engine_host_code_allowed = True
            engine = runtime.deserialize_cuda_engine(plan)
            if engine is None:
                raise PlanLoadError(list(self._logger.errors))
            return TrtLoadedEngine(runtime, engine)


RUNTIME = TensorRTRuntime()


__all__ = ["RUNTIME", "TensorRTRuntime", "TrtLoadedEngine", "describe", "trt"]

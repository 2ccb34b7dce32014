"""Loading TensorRT instances, and auto-completing a config from its plan, through an EngineRuntime.

The steps are Triton's (tensorrt_backend ModelInstanceState::Create): refuse every kind but KIND_GPU, find the
plan (`cc_model_filenames[<compute capability>]`, else `default_model_filename`, else model.plan), deserialize
it on the instance's GPU, check the config against the engine, create one execution context per profile of the
instance group. Instances of an engine without dynamic shapes on the same GPU share one deserialized engine, as
in Triton; an engine with dynamic shapes is deserialized per instance.
"""

from __future__ import annotations

import logging
import weakref
from pathlib import Path
from typing import Any

from modelhost.backends.api import BackendContext
from modelhost.backends.model_io import fed_by_server
from modelhost.backends.params import group_kind
from modelhost.backends.tensorrt.autocomplete import autocomplete_from_engine
from modelhost.backends.tensorrt.checks import check_config_against_engine
from modelhost.backends.tensorrt.instance import TensorRTInstance
from modelhost.backends.tensorrt.profiles import instance_profiles
from modelhost.backends.tensorrt.runtime import (
    EngineRuntime,
    LoadedEngine,
    PlanLoadError,
    plan_failure_message,
)
from modelhost.backends.tensorrt.settings import TensorRTSettings, model_settings
from modelhost.config.constants import TENSORRT_FILENAME
from modelhost.errors import ModelConfigError, ModelhostError
from modelhost.host.gpu_memory import check_load_limit
from modelhost.repository.layout import version_directories

log = logging.getLogger(__name__)


def plan_filename(config: Any, runtime: EngineRuntime, device_id: int) -> str:
    """The plan file of a GPU: its compute capability's entry in cc_model_filenames, else the default."""
    name: str = config.default_model_filename or TENSORRT_FILENAME
    if config.cc_model_filenames:
        capability = runtime.compute_capability(device_id)
        name = config.cc_model_filenames.get(capability, name)
    return name


def deserialize_plan(
    runtime: EngineRuntime, model_name: str, path: Path, device_id: int, settings: TensorRTSettings
) -> LoadedEngine:
    runtime.load_plugins(settings.plugins)
    try:
        plan = path.read_bytes()
    except OSError as e:
        raise ModelConfigError(f"unable to load model '{model_name}': cannot read plan '{path}': {e}") from e
    try:
        return runtime.deserialize(plan, device_id, version_compatible=settings.version_compatible)
    except PlanLoadError as e:
        raise ModelConfigError(
            plan_failure_message(
                model_name, path, e.messages, runtime.version, version_compatible=settings.version_compatible
            )
        ) from e
    except ModelhostError:
        raise
    except Exception as e:  # CudaError (no usable device), RuntimeError from TensorRT
        raise ModelConfigError(
            f"unable to load model '{model_name}': cannot load the plan '{path}': {e}"
        ) from e


class EngineCache:
    """Engines without dynamic shapes, shared by the instances of one model load on one GPU. Held weakly: the
    instances keep their engine alive, and it goes with the last of them."""

    def __init__(self) -> None:
        self._engines: weakref.WeakValueDictionary[tuple[Path, int], Any] = weakref.WeakValueDictionary()

    def get(self, path: Path, device_id: int) -> LoadedEngine | None:
        engine: LoadedEngine | None = self._engines.get((path, device_id))
        return engine

    def put(self, path: Path, device_id: int, engine: LoadedEngine) -> None:
        self._engines[(path, device_id)] = engine


def _cuda_call(model_name: str, what: str, call: Any, *args: Any) -> Any:
    """A runtime call that talks to the driver: a CUDA failure becomes a load error naming the model."""
    try:
        return call(*args)
    except ModelhostError:
        raise
    except Exception as e:  # CudaError, RuntimeError from TensorRT
        raise ModelConfigError(f"unable to load model '{model_name}': {what}: {e}") from e


def _check_device(ctx: BackendContext, runtime: EngineRuntime, group: Any, device_id: int) -> None:
    if group_kind(group) != "KIND_GPU":
        # Triton's message (tensorrt_backend instance_state.cc).
        raise ModelConfigError(
            f"unable to load model '{ctx.model_name}', TensorRT backend supports only GPU device"
        )
    if ctx.gpu_count == 0:
        raise ModelConfigError(
            f"unable to load model '{ctx.model_name}': instance group kind KIND_GPU needs a GPU, and none is "
            "visible"
        )
    visible = _cuda_call(ctx.model_name, "cannot count the CUDA devices", runtime.device_count)
    if not 0 <= device_id < visible:
        raise ModelConfigError(
            f"unable to load model '{ctx.model_name}': GPU {device_id} is not visible to CUDA "
            f"({visible} device(s) visible)"
        )


def load_instance(
    ctx: BackendContext,
    group: Any,
    index: int,
    device_id: int,
    runtime: EngineRuntime,
    cache: EngineCache,
) -> TensorRTInstance:
    name = f"{group.name}_{index}"
    _check_device(ctx, runtime, group, device_id)
    settings = model_settings(ctx.config, ctx.backend_config, ctx.model_name)
    filename = _cuda_call(
        ctx.model_name,
        "cannot read the GPU's compute capability",
        plan_filename,
        ctx.config,
        runtime,
        device_id,
    )
    path = ctx.version_dir / filename
    if not path.is_file():
        raise ModelConfigError(f"unable to find '{path}' for model instance '{name}'")
    loaded = cache.get(path, device_id)
    if loaded is None:
        loaded = deserialize_plan(runtime, ctx.model_name, path, device_id, settings)
    engine = loaded.description
    profiles = instance_profiles(group, engine.num_profiles, name)
    fed = fed_by_server(ctx.config)
    check_config_against_engine(ctx.model_name, ctx.config, engine, profiles, fed)
    if not engine.has_dynamic_shapes:
        cache.put(path, device_id, loaded)
    executor = _cuda_call(
        ctx.model_name,
        "cannot create the TensorRT execution contexts",
        loaded.create_executor,
        profiles,
        settings,
        device_id,
        int(ctx.config.max_batch_size),
    )
    instance = TensorRTInstance(name, ctx.model_name, engine, profiles, executor, keep_alive=loaded)
    try:
        # After the instance exists, as tritonserver checks: its own memory counts against the limit.
        check_load_limit(ctx.gpu_memory, name, device_id)
    except BaseException:
        instance.close()
        raise
    log.info(
        "Created instance %s on GPU %d with stream priority %s and optimization profile%s",
        name,
        device_id,
        settings.priority,
        "".join(f" {p}[{p}];" for p in profiles),
    )
    return instance


# -- auto-complete --------------------------------------------------------------------------------------------


def find_plan(model_dir: Path, filename: str) -> Path | None:
    """The plan auto-complete reads: from the highest version directory holding it."""
    for version_dir in reversed(version_directories(model_dir).values()):
        candidate = version_dir / filename
        if candidate.is_file():
            return candidate
    return None


def autocomplete_plan(config: Any, model_dir: Path, runtime: EngineRuntime) -> None:
    """Complete a TensorRT model's config from its plan, on the first GPU of its first instance group.

    As in Triton, nothing is done unless that group is KIND_GPU: a model that cannot load (no GPU) is not
    completed either. The hook gets no --backend-config, so plugins and version-compatible plans are not
    available here: such models need a complete config (`modelhost convert onnx-to-tensorrt --write-config`).
    """
    model_name = config.name or model_dir.name
    if not config.instance_group or group_kind(config.instance_group[0]) != "KIND_GPU":
        log.info(
            "skipping auto-complete of TensorRT model '%s': its first instance group is not KIND_GPU, and "
            "TensorRT runs on GPUs only",
            model_name,
        )
        return
    group = config.instance_group[0]
    device_id = int(group.gpus[0]) if group.gpus else 0
    filename = _cuda_call(
        model_name, "cannot read the GPU's compute capability", plan_filename, config, runtime, device_id
    )
    path = find_plan(model_dir, filename)
    if path is None:
        raise ModelConfigError(
            f"unable to autofill for '{model_name}': no version directory of {model_dir} contains '{filename}'"
        )
    loaded = deserialize_plan(runtime, model_name, path, device_id, TensorRTSettings())
    autocomplete_from_engine(config, loaded.description, model_name)


__all__ = [
    "EngineCache",
    "autocomplete_plan",
    "deserialize_plan",
    "find_plan",
    "load_instance",
    "plan_filename",
]

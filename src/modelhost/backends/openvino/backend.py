"""OpenVINO backend: one compiled model per model version, shared by its instances, one infer request each.

Triton's backend shares the compiled model the same way, which is what gives NUM_STREAMS its meaning: the
compiled model's streams run the instances' requests side by side (`count: 4` with NUM_STREAMS 4), and the
weights are held once, not once per instance. The version's compiled model goes when its last instance closes.

The load, in order: parameters (settings.py), the instance kind and TARGET_DEVICE against the devices OpenVINO
sees (devices.py), the model file read with any CPU extension (model_file.py), reshaped, checked against the
config and typed (prepare.py), then compiled with the properties settings.py derives.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonclient.grpc.model_config_pb2 import DataType

from modelhost.backends.api import BackendContext
from modelhost.backends.model_io import fed_by_server
from modelhost.backends.openvino.autocomplete import autocomplete_openvino
from modelhost.backends.openvino.devices import (
    available_devices,
    check_instance_kind,
    check_target_device,
    supported_properties,
)
from modelhost.backends.openvino.element_types import casting_writer, tensor_reader, tensor_writer, type_name
from modelhost.backends.openvino.instance import InstancePlan, OpenVINOInstance
from modelhost.backends.openvino.model_file import load_path, new_core, read_model
from modelhost.backends.openvino.prepare import PreparedModel, prepare_model
from modelhost.backends.openvino.settings import OpenVINOSettings, compile_properties, read_settings
from modelhost.errors import ModelConfigError

log = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class _Version:
    """A model version's compiled model and what its instances share; `users` counts its open instances."""

    ctx: BackendContext
    available: list[str]
    compiled: Any
    plan: InstancePlan
    users: int = field(default=0)


def _plan(compiled: Any, config: Any, settings: OpenVINOSettings, prepared: PreparedModel) -> InstancePlan:
    """Ports by name with their converters, for every input and output of the compiled model."""
    configured_in = {t.name: DataType.Name(t.data_type) for t in config.input}
    configured_out = {t.name: DataType.Name(t.data_type) for t in config.output}
    inputs = {}
    for index, port in enumerate(compiled.inputs):
        name = str(port.get_any_name())
        datatype = configured_in.get(name)
        writer = tensor_writer(datatype) if datatype else casting_writer(port.get_element_type())
        inputs[name] = (index, writer)
    outputs = {}
    for index, port in enumerate(compiled.outputs):
        name = str(port.get_any_name())
        element = port.get_element_type()
        outputs[name] = (index, tensor_reader(configured_out.get(name) or _own_datatype(element)))
    return InstancePlan(
        inputs, outputs, prepared.static_batch, settings.batch_padding, _passes_inputs_through(compiled)
    )


def _passes_inputs_through(compiled: Any) -> bool:
    """Whether some output of the compiled model is one of its inputs as is (a Result fed by a Parameter, as
    an identity or a same-type Convert compiles to). OpenVINO 2026.4's CPU plugin then corrupts memory when the
    input comes as a tensor of ours and its shape changes from one run to the next (measured: garbage outputs,
    then a malloc abort), so such a model's inputs are copied into the request's own tensors."""
    try:
        results = compiled.get_runtime_model().get_results()
        return any(r.input_value(0).get_node().get_type_name() == "Parameter" for r in results)
    except Exception:  # a device that does not show its runtime model: copy, which is always safe
        return True


def _own_datatype(element: Any) -> str:
    return {"bf16": "TYPE_BF16", "string": "TYPE_STRING"}.get(type_name(element), "")


def _compile(ctx: BackendContext, group: Any) -> _Version:
    name, config = ctx.model_name, ctx.config
    settings = read_settings(config)
    core = new_core(settings.cpu_extension, name)
    available = available_devices(core)
    check_instance_kind(group, name, available)
    check_target_device(settings.target_device, name, available)
    path = load_path(ctx.version_dir, config.default_model_filename, name, ctx.version)
    model = read_model(core, path, f"unable to load model '{name}' version {ctx.version}")
    prepared = prepare_model(model, config, settings, name, fed_by_server(config))
    properties = compile_properties(
        settings, name, ctx.total_instances, supported_properties(core, settings.target_device)
    )
    try:
        compiled = core.compile_model(prepared.model, settings.target_device, properties)
    except Exception as e:  # RuntimeError from the plugin: an unsupported layer, property or device
        raise ModelConfigError(
            f"unable to load model '{name}' version {ctx.version}: OpenVINO failed to compile it for "
            f"{settings.target_device} with {properties}: {str(e).strip()}"
        ) from e
    if prepared.static_batch is not None and prepared.static_batch > 1 and not settings.batch_padding:
        log.warning(
            "model '%s': its batch dimension is fixed at %d, and smaller batches are refused (set parameter "
            "ENABLE_BATCH_PADDING to YES to pad them)",
            name,
            prepared.static_batch,
        )
    log.info(
        "model '%s' version %d: compiled for OpenVINO device %s with %s, batch dimension %s",
        name,
        ctx.version,
        settings.target_device,
        properties,
        "dynamic" if prepared.static_batch is None else f"fixed at {prepared.static_batch}",
    )
    return _Version(ctx, available, compiled, _plan(compiled, config, settings, prepared))


class OpenVINOBackend:
    name = "openvino"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: dict[int, _Version] = {}

    @staticmethod
    def autocomplete(
        config: Any, model_dir: Path, *, default_max_batch_size: int, settings: Mapping[str, str]
    ) -> None:
        """Batching, inputs and outputs from the model file itself."""
        autocomplete_openvino(config, model_dir, default_max_batch_size=default_max_batch_size)

    def load_instance(self, ctx: BackendContext, group: Any, index: int, device_id: int) -> OpenVINOInstance:
        with self._lock:
            version = self._versions.get(ctx.version)
            if version is None or version.ctx is not ctx:  # a new load of this version compiles afresh
                version = _compile(ctx, group)
                self._versions[ctx.version] = version
            else:
                check_instance_kind(group, ctx.model_name, version.available)
            version.users += 1
        try:
            return OpenVINOInstance(
                f"{group.name}_{index}",
                ctx.model_name,
                version.compiled,
                version.plan,
                self._releaser(version),
            )
        except Exception as e:
            self._release(version)
            raise ModelConfigError(
                f"unable to load model '{ctx.model_name}': OpenVINO failed to create an infer request: {e}"
            ) from e

    def _releaser(self, version: _Version) -> Callable[[], None]:
        return lambda: self._release(version)

    def _release(self, version: _Version) -> None:
        with self._lock:
            version.users -= 1
            if version.users > 0:
                return
            if self._versions.get(version.ctx.version) is version:
                del self._versions[version.ctx.version]
            version.compiled = None  # the last instance is gone: so is the compiled model's memory

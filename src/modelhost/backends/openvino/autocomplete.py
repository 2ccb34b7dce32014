"""OpenVINO auto-complete (Triton's openvino backend, ModelState::AutoCompleteConfig), from the model file of the
highest version.

Batching: the model can batch when every input and output shows a batch dimension first: its layout says N at
position 0, or, where it has no layout (ONNX models and most IR files have none) and the config leaves its
inputs or outputs to fill, its first dimension is dynamic. Triton's backend looks at layouts only, so a model
without layouts never batches there; see docs/backends/openvino.md. When the model can batch, an unset
max_batch_size becomes default-max-batch-size (with Triton's warning), and `dynamic_batching {}` is added when
max_batch_size > 1 and no scheduler is set. When it cannot and max_batch_size is set, Triton's warning only:
the load then judges the config.

Inputs and outputs: a list the config leaves empty is filled from the model, each list on its own (Triton's
rule): name, datatype, and dims (the batch dimension dropped when max_batch_size > 0; -1 for each dynamic
dimension; a scalar per batch item becomes dims [1] with an empty reshape).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import openvino as ov  # type: ignore[import-untyped, unused-ignore]
from tritonclient.grpc.model_config_pb2 import DataType

from modelhost.backends.batching_fill import fill_batching, fill_dims
from modelhost.backends.openvino.element_types import config_type, type_name
from modelhost.backends.openvino.model_file import autocomplete_path, new_core, read_model
from modelhost.backends.openvino.ports import port_dims, port_name
from modelhost.backends.openvino.settings import read_settings
from modelhost.errors import ModelConfigError

log = logging.getLogger(__name__)


def shows_batch(port: Any, *, layouts_only: bool = False) -> bool:
    """Whether a model tensor's first dimension is a batch dimension (see the module docstring)."""
    layout = ov.layout_helpers.get_layout(port)
    if not layout.empty:
        return bool(ov.layout_helpers.has_batch(layout)) and int(ov.layout_helpers.batch_idx(layout)) == 0
    if layouts_only:
        return False
    dims = port_dims(port)
    return bool(dims) and dims is not None and dims[0] == -1


def _fill_batching(
    config: Any, ports: Sequence[Any], name: str, default_max_batch_size: int, *, layouts_only: bool
) -> None:
    if all(shows_batch(port, layouts_only=layouts_only) for port in ports):
        fill_batching(config, name, default_max_batch_size)
    elif config.max_batch_size != 0:
        log.warning(
            "model layout for model %s does not support batching while non-zero max_batch_size is specified",
            name,
        )


def _fill_ios(config: Any, field: str, ports: Sequence[Any], name: str) -> None:
    ios = getattr(config, field)
    if len(ios) > 0:
        log.info(
            "skipping %s model configuration auto-complete for '%s': %s already specified", field, name, field
        )
        return
    batching = config.max_batch_size > 0
    for index, port in enumerate(ports):
        tensor_name = port_name(port, field, index, name)
        datatype = config_type(port.get_element_type())
        if datatype is None:
            raise ModelConfigError(
                f"unable to autofill for '{name}': unsupported OpenVINO element type "
                f"'{type_name(port.get_element_type())}' for {field} '{tensor_name}'"
            )
        dims = port_dims(port)
        if dims is None:
            raise ModelConfigError(
                f"unable to autofill for '{name}': {field} '{tensor_name}' has a dynamic rank; the configuration "
                "must give its dims"
            )
        io = ios.add()
        io.name = tensor_name
        io.data_type = DataType.Value(datatype)
        fill_dims(io, dims, batching, reshape_unbatched=False)


def autocomplete_openvino(config: Any, model_dir: Path, *, default_max_batch_size: int) -> None:
    """Complete an openvino model's config in place from the model file."""
    name = config.name or model_dir.name
    path = autocomplete_path(model_dir, config.default_model_filename)
    if path is None:
        if len(config.input) > 0 and len(config.output) > 0:
            return  # nothing to read it from; the load reports the missing file
        raise ModelConfigError(
            f"unable to autofill for '{name}': no version directory of {model_dir} contains "
            f"'{config.default_model_filename}', and the configuration does not specify both inputs and outputs"
        )
    # Its custom layers may appear in the model, which is read with them as at load.
    core = new_core(read_settings(config).cpu_extension, name)
    model = read_model(core, path, f"unable to autofill for '{name}'")
    # A config that lists both inputs and outputs has said what shapes it means: a dynamic first dimension does
    # not turn it into a batching config behind its back (its max_batch_size 0 cannot be told from unset), only
    # the model's layouts do, as in Triton.
    described = len(config.input) > 0 and len(config.output) > 0
    ports = [*model.inputs, *model.outputs]
    _fill_batching(config, ports, name, default_max_batch_size, layouts_only=described)
    _fill_ios(config, "input", model.inputs, name)
    _fill_ios(config, "output", model.outputs, name)


__all__ = ["autocomplete_openvino", "shows_batch"]

"""Fitting a read model to its config before it is compiled: batch dimension, RESHAPE_IO_LAYERS, datatypes, and
the check that the config does not contradict the model.

Batch dimension (max_batch_size > 0). Triton's backend fixes the model's first dimension at max_batch_size
(`ov::set_batch`) and so refuses, at run time, every batch of another size unless ENABLE_BATCH_PADDING pads it.
We make the first dimension of every input dynamic instead, so any batch up to max_batch_size runs as it is, and
fix it at max_batch_size only where asked (SKIP_OV_DYNAMIC_BATCHSIZE), where max_batch_size is 1, or where the
model cannot take a dynamic batch (the reshape fails, or an output keeps a fixed first dimension): then a smaller
batch is padded (ENABLE_BATCH_PADDING) or refused with Triton's message (instance.py).

RESHAPE_IO_LAYERS: each configured input takes the config's shape (its `reshape` where it has one; -1 becomes a
dynamic dimension), as Triton's backend does; outputs follow from OpenVINO's shape inference.

Datatypes: as in Triton, a configured tensor whose datatype differs from the model's is given a conversion by
OpenVINO's pre/post-processing (a TYPE_UINT8 input feeding an f32 model); a string tensor against a numeric one,
or an element type with no config datatype (u4, nf4, ...), is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import openvino as ov  # type: ignore[import-untyped, unused-ignore]
from tritonclient.grpc.model_config_pb2 import DataType

from modelhost.backends.model_io import TensorInfo, check_io, config_shape
from modelhost.backends.openvino.element_types import config_type, convertible, ov_type, type_name
from modelhost.backends.openvino.ports import port_dims, ports_by_name
from modelhost.backends.openvino.settings import OpenVINOSettings
from modelhost.errors import ModelConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PreparedModel:
    model: Any  # ov.Model, reshaped and typed as the config says
    # The batch size the model's first dimension is fixed at; None: any batch size (or no batching).
    static_batch: int | None


def _config_dims(tensor: Any, model_name: str) -> list[Any]:
    dims = []
    for d in config_shape(tensor):
        if d != -1 and d <= 0:
            raise ModelConfigError(
                f"unable to load model '{model_name}': RESHAPE_IO_LAYERS takes dims of -1 or positive sizes, "
                f"input '{tensor.name}' has {d}"
            )
        dims.append(ov.Dimension() if d == -1 else ov.Dimension(d))
    return dims


def _batch_dim(current: Any, max_batch_size: int, static: bool) -> Any:
    """The first dimension an input is to take: fixed at max_batch_size, or dynamic."""
    if static:
        return ov.Dimension(max_batch_size)
    # Already dynamic: kept, with whatever bounds the model gives it.
    return current if current.is_dynamic else ov.Dimension()


def _new_shapes(
    model: Any, config: Any, settings: OpenVINOSettings, static: bool, name: str
) -> dict[str, Any]:
    """Input name -> the shape it is to take; inputs that keep theirs are left out."""
    configured = {t.name: t for t in config.input}
    batching = config.max_batch_size > 0
    shapes: dict[str, Any] = {}
    for port in model.inputs:
        input_name = str(port.get_any_name())
        current = port.get_partial_shape()
        dims = None if current.rank.is_dynamic else list(current)
        tensor = configured.get(input_name)
        if settings.reshape_io and tensor is not None:
            wanted = _config_dims(tensor, name)
            if batching:
                wanted = [ov.Dimension(), *wanted]
            # Another rank is left for the check below to refuse in Triton's words.
            if dims is None or len(dims) == len(wanted):
                dims = wanted
        if batching and dims:
            dims[0] = _batch_dim(dims[0], int(config.max_batch_size), static)
        if dims is not None and ov.PartialShape(dims) != current:
            shapes[input_name] = ov.PartialShape(dims)
    return shapes


def _outputs_batch(model: Any) -> bool:
    return all(not (dims := port_dims(port)) or dims[0] == -1 for port in model.outputs)


def _reshape(model: Any, config: Any, settings: OpenVINOSettings, name: str) -> int | None:
    """Reshape `model` in place; the static batch size it ends with (None: dynamic or no batching)."""
    max_batch_size = int(config.max_batch_size)
    static = max_batch_size > 0 and (settings.skip_dynamic_batch or max_batch_size == 1)
    while True:
        shapes = _new_shapes(model, config, settings, static, name)
        try:
            if shapes:
                model.reshape(shapes)
        except Exception as e:  # RuntimeError from shape inference; the model keeps its shapes
            if max_batch_size > 0 and not static:
                log.warning(
                    "model '%s': OpenVINO cannot give the model a dynamic batch dimension (%s); its batch "
                    "dimension is fixed at max_batch_size %d",
                    name,
                    str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__,
                    max_batch_size,
                )
                static = True
                continue
            shown = {k: str(v) for k, v in shapes.items()}
            raise ModelConfigError(
                f"unable to load model '{name}': OpenVINO cannot reshape the model's inputs to {shown}: {e}"
            ) from e
        if max_batch_size > 0 and not static and not _outputs_batch(model):
            # The inputs took a dynamic batch but some output did not follow (a fixed Reshape inside): the
            # model only runs at a fixed batch size.
            log.warning(
                "model '%s': an output of the model keeps a fixed first dimension when its inputs take a dynamic "
                "batch dimension; its batch dimension is fixed at max_batch_size %d",
                name,
                max_batch_size,
            )
            static = True
            continue
        return max_batch_size if static else None


def _tensor_info(port: Any, configured: Any | None, static_batch: int | None) -> TensorInfo:
    element = port.get_element_type()
    datatype = config_type(element) or type_name(element)
    if configured is not None and convertible(DataType.Name(configured.data_type), element):
        datatype = DataType.Name(configured.data_type)  # converted below, as Triton does
    dims = port_dims(port)
    if static_batch is not None and dims and dims[0] == static_batch:
        dims[0] = -1  # batches up to the fixed size are padded to it, or refused at run time with the reason
    return TensorInfo(str(port.get_any_name()), datatype, None if dims is None else tuple(dims))


def _check(
    model: Any, config: Any, static_batch: int | None, name: str, fed_by_server: Iterable[str]
) -> None:
    inputs = ports_by_name(model.inputs, "input", name)
    outputs = ports_by_name(model.outputs, "output", name)
    configured_in = {t.name: t for t in config.input}
    configured_out = {t.name: t for t in config.output}
    check_io(
        name,
        config,
        {n: _tensor_info(p, configured_in.get(n), static_batch) for n, (_, p) in inputs.items()},
        {n: _tensor_info(p, configured_out.get(n), static_batch) for n, (_, p) in outputs.items()},
        fed_by_server=fed_by_server,
    )


def _convert_types(model: Any, config: Any, name: str) -> Any:
    """Give each configured tensor the config's datatype where the model's differs (Triton's PrePostProcessor
    `set_element_type`)."""
    ppp = ov.preprocess.PrePostProcessor(model)
    changed = False
    ports: Mapping[str, Any] = {str(p.get_any_name()): p for p in model.inputs}
    for tensor in config.input:
        wanted = DataType.Name(tensor.data_type)
        if config_type(ports[tensor.name].get_element_type()) != wanted:
            ppp.input(tensor.name).tensor().set_element_type(ov_type(wanted))
            changed = True
    ports = {str(p.get_any_name()): p for p in model.outputs}
    for tensor in config.output:
        wanted = DataType.Name(tensor.data_type)
        if config_type(ports[tensor.name].get_element_type()) != wanted:
            ppp.output(tensor.name).tensor().set_element_type(ov_type(wanted))
            changed = True
    if not changed:
        return model
    try:
        return ppp.build()
    except Exception as e:
        raise ModelConfigError(
            f"unable to load model '{name}': OpenVINO cannot convert the model's tensors to the configured "
            f"datatypes: {e}"
        ) from e


def prepare_model(
    model: Any, config: Any, settings: OpenVINOSettings, name: str, fed_by_server: Iterable[str]
) -> PreparedModel:
    """Reshape and type `model` (in place) as `config` says, refusing a config that contradicts it."""
    ports_by_name(model.inputs, "input", name)  # every tensor named, before anything looks them up by name
    ports_by_name(model.outputs, "output", name)
    static_batch = _reshape(model, config, settings, name)
    _check(model, config, static_batch, name, fed_by_server)
    return PreparedModel(_convert_types(model, config, name), static_batch)


__all__ = ["PreparedModel", "prepare_model"]

"""SavedModel auto-complete (Triton's tensorflow_backend AutoCompleteHelper), from the serving signature.

Batching: the signature supports it when every input and output has a known rank >= 1 and a first dimension of
any size (-1). A config that sets max_batch_size > 0 for a signature that cannot batch is refused. With
max_batch_size 0 (unset or "no batching": the config cannot tell), the config's own tensors hint: a listed
tensor whose dims (or reshape) have one dimension fewer than the signature's says batching, as many says not,
and hints that disagree are refused. Batching then sets max_batch_size to the default-max-batch-size (4), and
adds dynamic_batching {} when max_batch_size > 1 and no scheduler is configured.

Tensors: an empty `input` or `output` list is filled from the signature (batch dimension dropped when
max_batch_size > 0; a tensor with no dimension left gets dims [1] and an empty reshape); a signature tensor of
rank 0 or of unknown rank cannot be described so and is refused. A list that is given is kept: its tensors only
get a missing data_type or dims from the signature, and the load checks the rest. Inputs the server feeds
(sequence controls and state, batch inputs) are never added to `input`. The signature read is the one
TF_GRAPH_TAG and TF_SIGNATURE_DEF name, so that what is filled is what loads. A GraphDef carries no signature:
its config must list its inputs and outputs (as in Triton).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from modelhost.backends.batching_fill import fill_batching, fill_dims
from modelhost.backends.model_io import TensorInfo, fed_by_server
from modelhost.backends.tensorflow.settings import graph_tags, signature_key
from modelhost.backends.tensorflow.signature import Signature, read_signature
from modelhost.config.constants import TENSORFLOW_GRAPHDEF_PLATFORM, TENSORFLOW_SAVEDMODEL_FILENAME
from modelhost.errors import ModelConfigError
from modelhost.repository.layout import version_directories

log = logging.getLogger(__name__)


def savedmodel_path(model_dir: Path, filename: str) -> Path | None:
    """The SavedModel auto-complete reads: the highest version's."""
    for version_dir in reversed(version_directories(model_dir).values()):
        if (version_dir / filename).is_dir():
            return version_dir / filename
    return None


def signature_batches(signature: Signature) -> bool:
    tensors = [*signature.inputs.values(), *signature.outputs.values()]
    return all(t.dims is not None and len(t.dims) > 0 and t.dims[0] == -1 for t in tensors)


def _configured_dims(io: Any) -> list[int]:
    return list(io.reshape.shape) if io.HasField("reshape") else list(io.dims)


def _batching_hint(config: ModelConfig, signature: Signature, name: str) -> bool:
    """Whether the config's listed tensors, where they give a shape, describe a batching model (Triton's rule:
    one dimension fewer than the signature's)."""
    batching, hinted = True, False
    for listed, tensors in ((config.input, signature.inputs), (config.output, signature.outputs)):
        for io in listed:
            dims = _configured_dims(io)
            model = tensors.get(io.name)
            if not dims or model is None or model.dims is None:
                continue
            says = len(model.dims) == len(dims) + 1
            if hinted and says != batching:
                raise ModelConfigError(
                    f"unable to autofill for '{name}', model tensor configurations are contradicting each other "
                    "in terms of whether batching is supported"
                )
            batching, hinted = says, True
    return batching


def _fill(
    config: ModelConfig, field: str, tensors: Mapping[str, TensorInfo], name: str, skip: set[str]
) -> None:
    listed = getattr(config, field)
    batching = config.max_batch_size > 0
    if len(listed) == 0:
        for tensor in tensors.values():
            if tensor.name in skip:
                continue
            if not tensor.dims:
                raise ModelConfigError(
                    f"unable to autofill for '{name}': the rank of model tensor '{tensor.name}' is 0 which is not "
                    "supported"
                )
            io = listed.add()
            io.name = tensor.name
            io.data_type = DataType.Value(str(tensor.data_type))
            fill_dims(io, tensor.dims, batching, reshape_unbatched=True)
        return
    for io in listed:
        known = tensors.get(io.name)
        if known is None:
            continue  # the load-time check names it
        if io.data_type == DataType.TYPE_INVALID:
            io.data_type = DataType.Value(str(known.data_type))
        if len(io.dims) == 0 and not io.HasField("reshape") and known.dims:
            fill_dims(io, known.dims, batching, reshape_unbatched=True)


def autocomplete_tensorflow(config: ModelConfig, model_dir: Path, *, default_max_batch_size: int) -> None:
    """Complete a TensorFlow model's config in place from its SavedModel's signature."""
    name = config.name or model_dir.name
    if config.platform == TENSORFLOW_GRAPHDEF_PLATFORM:
        if len(config.input) == 0 or len(config.output) == 0:
            raise ModelConfigError(
                f"unable to autofill for '{name}': a GraphDef does not describe its inputs and outputs, so the "
                "configuration must list them (convert the model to a SavedModel to have them filled in)"
            )
        return
    filename = config.default_model_filename or TENSORFLOW_SAVEDMODEL_FILENAME
    path = savedmodel_path(model_dir, filename)
    if path is None:
        if len(config.input) > 0 and len(config.output) > 0:
            return  # nothing to fill; the load reports the missing model
        raise ModelConfigError(
            f"unable to autofill for '{name}': no version directory of {model_dir} contains the SavedModel "
            f"directory '{filename}', and the configuration does not specify both inputs and outputs"
        )
    signature = read_signature(path, name, graph_tags(config), signature_key(config))
    batches = signature_batches(signature)
    if not batches and config.max_batch_size > 0:
        raise ModelConfigError(
            f"unable to autofill for '{name}', configuration specified max-batch {config.max_batch_size} but "
            "model signature does not support batching"
        )
    if config.max_batch_size > 0 or (batches and _batching_hint(config, signature, name)):
        fill_batching(config, name, default_max_batch_size)
    # Sequence controls, implicit state and batch inputs are fed by the server, never listed as inputs.
    _fill(config, "input", signature.inputs, name, fed_by_server(config))
    _fill(config, "output", signature.outputs, name, set())


__all__ = ["autocomplete_tensorflow", "savedmodel_path", "signature_batches"]

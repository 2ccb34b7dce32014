"""A SavedModel's serving signature, read from its `saved_model.pb` without loading the model.

Auto-complete and the load-time check of the config both need only the signature's tensors (names, types,
shapes), which the SavedModel's protobuf holds: reading it is fast and runs no graph, and a contradicting config is
refused before the model's variables are loaded. The tensors of a signature are its input and output keys, as
in Triton; their shapes are the declared ones (-1 for a dimension of any size, None for an unknown rank).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelhost.backends.model_io import TensorInfo
from modelhost.backends.tensorflow.dtypes import TF_TO_CONFIG
from modelhost.backends.tensorflow.runtime import tensorflow
from modelhost.errors import ModelConfigError

log = logging.getLogger(__name__)

DEFAULT_SIGNATURE = "serving_default"
DEFAULT_TAG = "serve"
# Keys TensorFlow gives to its own signatures, never a serving one (Triton skips them too).
_NOT_SERVING = ("__saved_model_init_op", "__saved_model_train_op")


@dataclass(frozen=True, slots=True)
class Signature:
    key: str
    tags: frozenset[str]
    inputs: dict[str, TensorInfo]
    outputs: dict[str, TensorInfo]
    # Signature key -> the graph's tensor ("serving_default_x:0"), what a session feeds and fetches.
    input_tensors: dict[str, str]
    output_tensors: dict[str, str]


def _parse(path: Path, model_name: str) -> Any:
    """The SavedModel protobuf of the directory `path` (binary saved_model.pb, or text saved_model.pbtxt)."""
    tensorflow()  # the quiet import of the whole package first: its protobuf modules are part of it
    proto_module = importlib.import_module("tensorflow.core.protobuf.saved_model_pb2")
    saved_model = proto_module.SavedModel()
    binary, text = path / "saved_model.pb", path / "saved_model.pbtxt"
    try:
        if binary.is_file():
            saved_model.ParseFromString(binary.read_bytes())
        elif text.is_file():
            importlib.import_module("google.protobuf.text_format").Parse(text.read_text(), saved_model)
        else:
            raise ModelConfigError(
                f"unable to load model '{model_name}': '{path}' is not a SavedModel directory (it has no "
                "saved_model.pb)"
            )
    except ModelConfigError:
        raise
    except Exception as e:  # protobuf's DecodeError / ParseError, an unreadable file
        raise ModelConfigError(
            f"unable to load model '{model_name}': failed to read the SavedModel in '{path}': {e}"
        ) from e
    return saved_model


def _tensors(model_name: str, kind: str, items: Iterable[tuple[str, Any]]) -> dict[str, TensorInfo]:
    types = importlib.import_module("tensorflow.core.framework.types_pb2")
    tensors = {}
    for key, info in sorted(items):
        if info.WhichOneof("encoding") != "name":
            raise ModelConfigError(
                f"unable to process {kind} '{key}' for '{model_name}': a sparse or composite tensor (encoding "
                f"'{info.WhichOneof('encoding')}') is not supported, only dense tensors"
            )
        tf_type = types.DataType.Name(info.dtype)
        data_type = TF_TO_CONFIG.get(tf_type)
        if data_type is None:
            # Triton's wording (tensorflow_backend_tf.cc).
            raise ModelConfigError(
                f"unable to process {kind} '{key}' for '{model_name}', unsupported datatype '{tf_type}'"
            )
        shape = info.tensor_shape
        dims = None if shape.unknown_rank else tuple(int(d.size) if d.size >= 0 else -1 for d in shape.dim)
        tensors[key] = TensorInfo(key, data_type, dims)
    return tensors


def _choose_key(model_name: str, keys: list[str], wanted: str | None) -> str:
    candidates = [k for k in keys if k not in _NOT_SERVING]
    if wanted is not None:
        if wanted not in keys:
            raise ModelConfigError(
                f"unable to load model '{model_name}': the SavedModel has no signature '{wanted}' (parameter "
                f"TF_SIGNATURE_DEF); its signatures are {candidates}"
            )
        return wanted
    if DEFAULT_SIGNATURE in keys:
        return DEFAULT_SIGNATURE
    # Triton falls back to a signature of another name when the default one is missing. Where several could
    # serve, it takes whichever its protobuf map yields first; we refuse to guess.
    if len(candidates) == 1:
        log.warning(
            "model '%s': unable to find default serving signature '%s', using signature '%s'",
            model_name,
            DEFAULT_SIGNATURE,
            candidates[0],
        )
        return candidates[0]
    if not candidates:
        raise ModelConfigError(
            f"unable to load model '{model_name}', expected '{DEFAULT_SIGNATURE}' signature (the SavedModel has "
            "no serving signature)"
        )
    raise ModelConfigError(
        f"unable to load model '{model_name}': the SavedModel has no '{DEFAULT_SIGNATURE}' signature but "
        f"several others {candidates}; name the one to serve with parameter TF_SIGNATURE_DEF"
    )


def read_signature(path: Path, model_name: str, tags: frozenset[str], key: str | None) -> Signature:
    """The signature `key` (None: "serving_default", else the SavedModel's only serving signature) of the
    MetaGraph tagged exactly `tags`, as TensorFlow's loader matches them."""
    saved_model = _parse(path, model_name)
    tag_sets = [frozenset(g.meta_info_def.tags) for g in saved_model.meta_graphs]
    if tags not in tag_sets:
        known = [",".join(sorted(t)) for t in tag_sets]
        raise ModelConfigError(
            f"unable to load model '{model_name}': the SavedModel has no MetaGraph tagged "
            f"'{','.join(sorted(tags))}' (parameter TF_GRAPH_TAG); its tag sets are {known}"
        )
    graph = saved_model.meta_graphs[tag_sets.index(tags)]
    chosen = _choose_key(model_name, sorted(graph.signature_def), key)
    definition = graph.signature_def[chosen]
    return Signature(
        chosen,
        tags,
        _tensors(model_name, "input", definition.inputs.items()),
        _tensors(model_name, "output", definition.outputs.items()),
        {key: info.name for key, info in definition.inputs.items()},
        {key: info.name for key, info in definition.outputs.items()},
    )


__all__ = ["DEFAULT_SIGNATURE", "DEFAULT_TAG", "Signature", "read_signature"]

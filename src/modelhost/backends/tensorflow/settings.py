"""A TensorFlow model's settings: the config's `parameters` Triton's TF backend reads, and --backend-config.

Models run in TF1 sessions as in Triton, so the session parameters mean what they mean there. TF_INIT_OPS_FILE
applies to GraphDefs only: a SavedModel's loader runs the model's own initialisation, and the parameter is
accepted for one with a warning.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from modelhost.backends.params import bool_param, int_param, param
from modelhost.backends.tensorflow.signature import DEFAULT_TAG
from modelhost.config.constants import TENSORFLOW_GRAPHDEF_PLATFORM
from modelhost.errors import ModelConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TfSettings:
    tags: frozenset[str]  # TF_GRAPH_TAG: the MetaGraph's tag set
    signature: str | None  # TF_SIGNATURE_DEF; None: "serving_default", or the only serving signature
    intra_threads: int | None  # TF_NUM_INTRA_THREADS; None: unset (0: TensorFlow's choice)
    inter_threads: int | None  # TF_NUM_INTER_THREADS
    per_session_threads: bool  # TF_USE_PER_SESSION_THREADS
    share_count: int  # MAX_SESSION_SHARE_COUNT: instances that share one loaded model
    init_ops_file: str | None  # TF_INIT_OPS_FILE (graphdef only)


def graph_tags(config: Any) -> frozenset[str]:
    """TF_GRAPH_TAG ("serve" when unset). Triton takes one tag; a comma-separated list names a MetaGraph saved
    under several tags (TensorFlow matches the whole set)."""
    raw = param(config, "TF_GRAPH_TAG") or ""
    tags = frozenset(t.strip() for t in raw.split(",") if t.strip())
    return tags or frozenset({DEFAULT_TAG})


def signature_key(config: Any) -> str | None:
    raw = (param(config, "TF_SIGNATURE_DEF") or "").strip()
    return raw or None


def read_settings(config: Any, backend_config: dict[str, str]) -> TfSettings:
    """The settings of `config`, or ModelConfigError naming the parameter that is wrong."""
    version = backend_config.get("version", "2").strip()
    if version != "2":
        raise ModelConfigError(
            f"unable to load model '{config.name}': --backend-config=tensorflow,version={version} is not "
            "supported: the tensorflow backend runs TensorFlow 2 only (as Triton's does since 23.04)"
        )
    init_ops = (param(config, "TF_INIT_OPS_FILE") or "").strip() or None
    if init_ops is not None and config.platform != TENSORFLOW_GRAPHDEF_PLATFORM:
        log.warning(
            "model '%s': parameter 'TF_INIT_OPS_FILE' is ignored for a SavedModel, whose loader runs the model's "
            "own initialisation",
            config.name,
        )
        init_ops = None
    return TfSettings(
        tags=graph_tags(config),
        signature=signature_key(config),
        intra_threads=int_param(config, "TF_NUM_INTRA_THREADS"),
        inter_threads=int_param(config, "TF_NUM_INTER_THREADS"),
        per_session_threads=bool_param(config, "TF_USE_PER_SESSION_THREADS", False),
        share_count=int_param(config, "MAX_SESSION_SHARE_COUNT", minimum=1) or 1,
        init_ops_file=init_ops,
    )


__all__ = ["TfSettings", "graph_tags", "read_settings", "signature_key"]

"""TensorFlow backend: SavedModels (`tensorflow_savedmodel`) and GraphDefs (`tensorflow_graphdef`), each run in a
TF1 session of TensorFlow 2, as Triton's backend runs them (session.py).

Each instance has a session of its own, unless MAX_SESSION_SHARE_COUNT lets up to that many instances of a device
share one (Triton's session sharing): a session may run requests from several threads at once. The config is
checked against the model before a SavedModel's variables are loaded, from its signature.

TensorFlow is imported on the first load, in the load thread (runtime.py): importing this module only checks
that it is installed, so that the registry can name the extra to install.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from modelhost.backends.api import BackendContext
from modelhost.backends.cpu_threads import default_intra_op_threads
from modelhost.backends.model_io import fed_by_server
from modelhost.backends.params import model_path
from modelhost.backends.tensorflow import runtime
from modelhost.backends.tensorflow.autocomplete import autocomplete_tensorflow
from modelhost.backends.tensorflow.checks import check_graph, check_signature
from modelhost.backends.tensorflow.graphdef import GraphDefRunner, init_ops
from modelhost.backends.tensorflow.instance import TensorFlowInstance
from modelhost.backends.tensorflow.placement import device_for
from modelhost.backends.tensorflow.savedmodel import SavedModelRunner
from modelhost.backends.tensorflow.session import SessionOptions, SessionRunner
from modelhost.backends.tensorflow.settings import TfSettings, read_settings
from modelhost.backends.tensorflow.signature import read_signature
from modelhost.config.constants import (
    TENSORFLOW_GRAPHDEF_FILENAME,
    TENSORFLOW_GRAPHDEF_PLATFORM,
    TENSORFLOW_SAVEDMODEL_FILENAME,
    TENSORFLOW_SAVEDMODEL_PLATFORM,
)
from modelhost.errors import ModelConfigError
from modelhost.host.devices import cpu_count

if importlib.util.find_spec("tensorflow") is None:
    raise ModuleNotFoundError("No module named 'tensorflow'", name="tensorflow")


@dataclass(eq=False, slots=True)
class _Loaded:
    """A loaded model and the instances that use it."""

    runner: SessionRunner
    given: int = 0  # instances it was given to
    users: int = 0  # of those, the ones not closed yet


def default_inter_op_threads(instances: int) -> int:
    """Enough inter-op threads for every instance to run at once: a session runs a graph's ops on the inter-op
    pool, so fewer threads than instances make them take turns (measured on 2 cores, 2 instances of an MLP at
    batch 32: 1,125 inferences/s with 1 inter-op thread, 2,084/s with 2)."""
    return max(1, min(instances, cpu_count()))


def session_options(ctx: BackendContext, settings: TfSettings) -> SessionOptions:
    """The pools a session of this model asks for: the process's (runtime.session_pools), but for the inter-op
    threads of a session of its own (TF_USE_PER_SESSION_THREADS), which are the model's; and the XLA level."""
    default_inter = default_inter_op_threads(ctx.total_instances)
    pools = runtime.session_pools(
        ctx.model_name,
        intra=settings.intra_threads,
        inter=None if settings.per_session_threads else settings.inter_threads,
        default_intra=default_intra_op_threads(ctx.total_instances),
        default_inter=default_inter,
    )
    optimization = ctx.config.optimization
    level = int(optimization.graph.level) if optimization.HasField("graph") else None
    if not settings.per_session_threads:
        return SessionOptions(pools.intra, pools.inter, False, level)
    own = default_inter if settings.inter_threads is None else settings.inter_threads
    return SessionOptions(pools.intra, own, True, level)


def _load_savedmodel(
    ctx: BackendContext, settings: TfSettings, device: str | None, options: SessionOptions
) -> SavedModelRunner:
    path = model_path(ctx, TENSORFLOW_SAVEDMODEL_FILENAME)
    if not path.is_dir():
        raise ModelConfigError(
            f"unable to load model '{ctx.model_name}': a SavedModel is a directory, and '{path}' is a file"
        )
    signature = read_signature(path, ctx.model_name, settings.tags, settings.signature)
    check_signature(ctx.model_name, ctx.config, signature.inputs, signature.outputs)
    return SavedModelRunner(ctx.model_name, path, signature, device, options)


def _load_graphdef(
    ctx: BackendContext, settings: TfSettings, device: str | None, options: SessionOptions
) -> GraphDefRunner:
    config = ctx.config
    path = model_path(ctx, TENSORFLOW_GRAPHDEF_FILENAME)
    ops = init_ops(ctx.model_name, ctx.version_dir, settings.init_ops_file) if settings.init_ops_file else []
    inputs = [io.name for io in config.input] + sorted(fed_by_server(config))
    outputs = [io.name for io in config.output]
    names = [("input", n) for n in inputs] + [("output", n) for n in outputs]
    runner = GraphDefRunner(ctx.model_name, path, ops, device, options, names)
    try:
        check_graph(
            ctx.model_name,
            config,
            runner.placeholders(),
            {name: runner.output(name) for name in outputs},
            lambda: runner.unfed_placeholders(outputs, inputs),
        )
    except BaseException:
        runner.close()
        raise
    return runner


class TensorFlowBackend:
    name = "tensorflow"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # The model each (version, device) gives to its next instances, until MAX_SESSION_SHARE_COUNT have it.
        self._sharing: dict[tuple[int, str | None], _Loaded] = {}

    @staticmethod
    def autocomplete(
        config: Any, model_dir: Path, *, default_max_batch_size: int, settings: Mapping[str, str]
    ) -> None:
        """Inputs, outputs and max_batch_size from the SavedModel's serving signature."""
        autocomplete_tensorflow(config, model_dir, default_max_batch_size=default_max_batch_size)

    def load_instance(
        self, ctx: BackendContext, group: Any, index: int, device_id: int
    ) -> TensorFlowInstance:
        platform = ctx.config.platform
        if platform not in (TENSORFLOW_SAVEDMODEL_PLATFORM, TENSORFLOW_GRAPHDEF_PLATFORM):
            raise ModelConfigError(
                f"platform {platform} not supported for TensorFlow model '{ctx.model_name}'"
            )
        settings = read_settings(ctx.config, ctx.backend_config)
        device = device_for(ctx, group, device_id)
        with self._lock:
            key = (ctx.version, device)
            loaded = self._sharing.get(key)
            if loaded is None or loaded.given >= settings.share_count:
                load = _load_graphdef if platform == TENSORFLOW_GRAPHDEF_PLATFORM else _load_savedmodel
                loaded = _Loaded(load(ctx, settings, device, session_options(ctx, settings)))
                self._sharing[key] = loaded
            loaded.given += 1
            loaded.users += 1
        return TensorFlowInstance(
            f"{group.name}_{index}", ctx.model_name, loaded.runner, partial(self._release, key, loaded)
        )

    def _release(self, key: tuple[int, str | None], loaded: _Loaded) -> None:
        with self._lock:
            loaded.users -= 1
            if loaded.users > 0:
                return
            if self._sharing.get(key) is loaded:
                del self._sharing[key]
        loaded.runner.close()


__all__ = ["TensorFlowBackend", "default_inter_op_threads", "session_options"]

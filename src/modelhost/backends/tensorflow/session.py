"""A loaded model in a TF1 session, run per batch through callables made once per set of inputs and outputs.

Both platforms run so, as in Triton: a SavedModel loaded by the TF1 loader (which also loads TensorFlow 2
SavedModels, whatever their signature keys are named, where TensorFlow 2's eager loader refuses keys that are no
Python identifiers), a GraphDef imported into a graph of its own. A session frees its model's memory, variables
included, when it closes, and may be run from several threads at once (instances sharing it,
MAX_SESSION_SHARE_COUNT). A callable costs less per call than `Session.run` with a feed dict.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelhost.backends.api import Arrays
from modelhost.backends.tensorflow.runtime import tensorflow


@dataclass(frozen=True, slots=True)
class SessionOptions:
    intra: int
    inter: int
    per_session: bool  # TF_USE_PER_SESSION_THREADS: inter-op threads of the session's own
    graph_level: int | None = None  # the config's optimization.graph.level, where it has one


def new_session(graph: Any, options: SessionOptions) -> Any:
    tf = tensorflow()
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=options.intra,
        inter_op_parallelism_threads=options.inter,
        use_per_session_threads=options.per_session,
        allow_soft_placement=True,  # Triton's default: an op without a kernel for the device runs on the CPU
    )
    config.gpu_options.allow_growth = True  # Triton's default: GPU memory taken as needed
    if options.graph_level is not None:
        # XLA's global JIT, as Triton maps the level: -1 off, 1 on (level 1), above 1 on (level 2).
        levels = tf.compat.v1.OptimizerOptions
        level = options.graph_level
        jit = levels.OFF if level == -1 else levels.ON_1 if level == 1 else levels.ON_2 if level > 1 else None
        if jit is not None:
            config.graph_options.optimizer_options.global_jit_level = jit
    return tf.compat.v1.Session(graph=graph, config=config)


class SessionRunner:
    """Runs `session`; `inputs` and `outputs` map config tensor names to the graph's tensor names."""

    def __init__(self, session: Any, inputs: dict[str, str], outputs: dict[str, str]) -> None:
        self._session = session
        self._inputs = inputs
        self._outputs = outputs
        self._callables: dict[tuple[tuple[str, ...], tuple[str, ...]], Any] = {}
        self._lock = threading.Lock()

    def _callable(self, feeds: tuple[str, ...], fetches: tuple[str, ...]) -> Any:
        key = (feeds, fetches)
        call = self._callables.get(key)
        if call is None:
            with self._lock:  # instances sharing this session make their callables in turn
                call = self._callables.get(key)
                if call is None:
                    call = self._session.make_callable(
                        [self._outputs[n] for n in fetches], feed_list=[self._inputs[n] for n in feeds]
                    )
                    self._callables[key] = call
        return call

    def run(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        feeds = tuple(sorted(inputs))
        results = self._callable(feeds, tuple(output_names))(*[inputs[n] for n in feeds])
        return {name: np.asarray(result) for name, result in zip(output_names, results, strict=True)}

    def close(self) -> None:
        self._callables.clear()
        self._session.close()


__all__ = ["SessionOptions", "SessionRunner", "new_session"]

"""TensorFlow itself: imported once, on first use, quiet; and the thread pools its sessions share.

The import takes seconds, so it happens in the load (or auto-complete) thread of the first TensorFlow model, not
when the server starts or the backend module is imported.

Models run in TF1 sessions, as in Triton. TensorFlow sizes the intra-op pool, and the inter-op pool of sessions
without TF_USE_PER_SESSION_THREADS, once per process, from the first session created; later sessions' sizes are
ignored without a word. So the first model loaded decides them (`session_pools`), every later session asks for the
same sizes, and a later model whose parameters ask for others gets a warning in the log.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

from modelhost.backends import framework_warnings

log = logging.getLogger(__name__)

_lock = threading.Lock()
_tf: Any = None


def tensorflow() -> Any:
    """The `tensorflow` module, imported on the first call."""
    global _tf
    with _lock:
        if _tf is None:
            # Without this, TensorFlow's C++ runtime writes INFO lines (CPU feature notices, MLIR passes, ...) into
            # the server log at import and at every load; 2 keeps its errors. A value the user exported wins.
            # The one-line oneDNN notice is printed before this setting is read and stays.
            os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            # TensorFlow and its dependencies raise DeprecationWarnings at import about their own use of Python and
            # NumPy APIs; they are no concern of the server (and errors under `-W error`).
            with framework_warnings.ignored(DeprecationWarning, PendingDeprecationWarning, FutureWarning):
                _tf = importlib.import_module("tensorflow")
        return _tf


@dataclass(frozen=True, slots=True)
class ThreadPools:
    intra: int  # 0: TensorFlow's choice (every core)
    inter: int
    model: str  # the model whose load set them


_pools: ThreadPools | None = None


def session_pools(
    model: str, *, intra: int | None, inter: int | None, default_intra: int, default_inter: int
) -> ThreadPools:
    """The process-wide pool sizes every session asks for: the first model's (its parameters, else its defaults).
    `intra`/`inter`: what this model's parameters ask for (None: unset)."""
    global _pools
    with _lock:
        if _pools is None:
            _pools = ThreadPools(
                default_intra if intra is None else intra, default_inter if inter is None else inter, model
            )
            log.info(
                "TensorFlow thread pools: intra-op %d, inter-op %d threads (0: TensorFlow's choice), for every "
                "TensorFlow model of this process, set at the load of model '%s'",
                _pools.intra,
                _pools.inter,
                model,
            )
            return _pools
        pools = _pools
    for key, asked, used in (
        ("TF_NUM_INTRA_THREADS", intra, pools.intra),
        ("TF_NUM_INTER_THREADS", inter, pools.inter),
    ):
        if asked is not None and asked != used:
            log.warning(
                "model '%s': parameter '%s' is %d, but TensorFlow's thread pools are per process and already run "
                "%d threads (set at the load of model '%s'); the parameter has no effect",
                model,
                key,
                asked,
                used,
                pools.model,
            )
    return pools


def gpu_count() -> int:
    """GPUs this TensorFlow build can use (0 with tensorflow-cpu)."""
    return len(tensorflow().config.list_physical_devices("GPU"))


__all__ = ["ThreadPools", "gpu_count", "session_pools", "tensorflow"]

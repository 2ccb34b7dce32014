"""torch's CPU thread pools, which are the process's and not a model's.

- Intra-op threads (one op split over cores): `torch.set_num_threads` sizes the OpenMP team of the thread that calls
  it, and becomes the size a thread that has not yet run an op starts with; a thread that has keeps its own
  (measured with torch 2.13). So the count is applied per executing thread: an instance sets it on the thread it
  runs on, before running, whenever that thread has another count.
  - INTRA_OP_THREAD_COUNT set by a model: process-global as in Triton, the first model that sets it wins (logged;
    a later model asking another count is told it is ignored), and every PyTorch instance runs with it.
  - Not set by any model: each instance runs with its model's share of the cores, as the ONNX Runtime backend
    sizes its sessions (backends/cpu_threads.py: the cores but one, divided among the model's instances).
- Inter-op threads (TorchScript's fork/wait): one pool per process, sized once and only before it first runs.
  INTER_OP_THREAD_COUNT: the first model that sets it wins; not set: torch's default (the number of cores).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import torch

from modelhost.backends.pytorch.settings import TorchSettings

log = logging.getLogger(__name__)

Setter = Callable[[int], None]


class ThreadSettings:
    """The thread counts of one process. `set_intra`/`set_inter` apply a count (torch's, unless a test's)."""

    def __init__(
        self, set_intra: Setter = torch.set_num_threads, set_inter: Setter = torch.set_num_interop_threads
    ):
        self._lock = threading.Lock()
        self._set_intra = set_intra
        self._set_inter = set_inter
        # (model, count) of the first model that set each count
        self.intra: tuple[str, int] | None = None
        self.inter: tuple[str, int] | None = None
        self._local = threading.local()

    def claim(self, model: str, settings: TorchSettings) -> None:
        """Apply the counts a model's parameters set, unless an earlier model set them first."""
        with self._lock:
            if settings.intra_op_threads is not None:
                self.intra = self._claim(
                    model, "INTRA_OP_THREAD_COUNT", settings.intra_op_threads, self.intra
                )
            if settings.inter_op_threads is not None:
                self.inter = self._claim(
                    model, "INTER_OP_THREAD_COUNT", settings.inter_op_threads, self.inter
                )

    def _claim(self, model: str, key: str, count: int, held: tuple[str, int] | None) -> tuple[str, int]:
        if held is not None:
            if held[1] != count:
                log.warning(
                    "model '%s': %s %d ignored: PyTorch's thread count is process-global and model '%s' set it to "
                    "%d first",
                    model,
                    key,
                    count,
                    held[0],
                    held[1],
                )
            return held
        try:
            (self._set_intra if key.startswith("INTRA") else self._set_inter)(count)
        except RuntimeError as e:  # inter-op: torch sizes its pool once, before it first runs
            log.warning("model '%s': %s %d could not be applied: %s", model, key, count, e)
            return (model, count)
        log.info(
            "model '%s': %s %d applies to every PyTorch model of this server (process-global: the first model that "
            "sets it wins)",
            model,
            key,
            count,
        )
        return (model, count)

    def intra_op_threads(self, budget: int) -> int:
        """The intra-op count an instance whose model's share is `budget` runs with."""
        held = self.intra
        return held[1] if held is not None else budget

    def reset(self) -> None:
        """Forget every count set (for tests: torch keeps what was applied)."""
        with self._lock:
            self.intra = self.inter = None
            self._local = threading.local()

    def use(self, budget: int) -> None:
        """Give the calling thread the intra-op count it must run with, if it has another one."""
        count = self.intra_op_threads(budget)
        if getattr(self._local, "count", None) != count:
            self._set_intra(count)
            self._local.count = count


# The one set of counts of this process.
PROCESS_THREADS = ThreadSettings()

__all__ = ["PROCESS_THREADS", "ThreadSettings"]

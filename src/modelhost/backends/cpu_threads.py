"""CPU thread budgets shared by the backends whose runtimes start their own thread pools.

Unless a model's parameters say otherwise, a model's instances share the cores but one, so that `count: 4` on a
2-core host does not start 4 x 2 busy compute threads (a known Triton pain point), and one core is left to the
event loop that decodes requests and encodes answers (measured: on 2 cores, a 2-thread ONNX Runtime session of
the example MLP cost 1.7x the CPU per request of a 1-thread one, for no more throughput).
"""

from __future__ import annotations

from modelhost.host.devices import cpu_count


def default_intra_op_threads(instances: int) -> int:
    return max(1, (cpu_count() - 1) // max(1, instances))


__all__ = ["default_intra_op_threads"]

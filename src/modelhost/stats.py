"""Per model version statistics, kept as Triton keeps them, for the statistics extension and /metrics.

Counts and durations are plain integers updated on the event loop thread only. `inference_count` counts batch
rows and `execution_count` model executions; the request durations (success, fail, queue, compute_*) are per
request, and `batch_stats` per execution, keyed by the batch size that ran.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def to_json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(slots=True)
class BatchStats:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass(slots=True)
class RequestTiming:
    """What one request spent where, filled in as it goes through the model and its scheduler."""

    queue_ns: int = 0
    input_ns: int = 0
    infer_ns: int = 0
    output_ns: int = 0


@dataclass(slots=True)
class ModelStats:
    name: str
    version: str
    last_inference_ms: int = 0
    inference_count: int = 0
    execution_count: int = 0
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0))
    batches: dict[int, BatchStats] = field(default_factory=dict)
    # Set by the model: requests queued and not yet executing (nv_inference_pending_request_count).
    pending: Callable[[], int] = lambda: 0
    load_duration_s: float = 0.0

    def executed(self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        """One execution of the model on `batch_size` rows."""
        self.execution_count += 1
        self.inference_count += batch_size
        stats = self.batches.get(batch_size)
        if stats is None:
            stats = self.batches[batch_size] = BatchStats()
        stats.compute_input.add(input_ns)
        stats.compute_infer.add(infer_ns)
        stats.compute_output.add(output_ns)

    def succeeded(self, total_ns: int, timing: RequestTiming) -> None:
        self.last_inference_ms = time.time_ns() // 1_000_000
        self.success.add(total_ns)
        self.queue.add(timing.queue_ns)
        self.compute_input.add(timing.input_ns)
        self.compute_infer.add(timing.infer_ns)
        self.compute_output.add(timing.output_ns)

    def failed(self, total_ns: int, reason: str) -> None:
        self.last_inference_ms = time.time_ns() // 1_000_000
        self.fail.add(total_ns)
        self.failures[reason] += 1

    def to_json(self) -> dict[str, Any]:
        """Triton's statistics JSON for this version (HTTP; the gRPC message has the same fields)."""
        empty = Duration().to_json()
        return {
            "name": self.name,
            "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.to_json(),
                "fail": self.fail.to_json(),
                "queue": self.queue.to_json(),
                "compute_input": self.compute_input.to_json(),
                "compute_infer": self.compute_infer.to_json(),
                "compute_output": self.compute_output.to_json(),
                "cache_hit": empty,
                "cache_miss": empty,
            },
            "response_stats": {},
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": b.compute_input.to_json(),
                    "compute_infer": b.compute_infer.to_json(),
                    "compute_output": b.compute_output.to_json(),
                }
                for size, b in sorted(self.batches.items())
            ],
            "memory_usage": [],
        }

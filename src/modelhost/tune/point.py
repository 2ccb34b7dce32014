"""One measured point of a tuning run: a variant at one client concurrency, with Model Analyzer's metrics."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Point:
    variant: str  # Variant.key
    concurrency: int
    throughput: float  # perf_throughput: inferences/s
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float  # perf_latency_p99
    avg_ms: float
    queue_ms: float  # perf_server_queue (the statistics extension, per request)
    compute_input_ms: float
    compute_infer_ms: float
    compute_output_ms: float
    send_recv_ms: float  # perf_client_send_recv
    response_wait_ms: float  # perf_client_response_wait
    cpu_cores: float | None  # the server's CPU time over the measurement / its wall time (1.0 = one core)
    ram_mb: float | None  # cpu_used_ram
    gpu_memory_mb: float | None  # gpu_used_memory
    gpu_utilization: float | None  # percent
    stable: bool
    seconds: float  # wall time of the measurement
    run: int  # which run of the tuner measured it (a resumed run counts on)

    @property
    def compute_ms(self) -> float:
        return self.compute_input_ms + self.compute_infer_ms + self.compute_output_ms

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Point:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

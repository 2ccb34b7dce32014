"""Measuring one point with `modelhost perf`'s engine, in this process: the load-generator processes are
started once for the whole run and only told a new concurrency per point (no subprocess per point).

Requests are batch-1, as Model Analyzer sends by default: the server's dynamic batcher forms the batches, so
the variants differ by what the server does with the same traffic.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from modelhost.perf.client import ControlClient, ModelInfo, PerfError, control_client
from modelhost.perf.inputs import build_input_data
from modelhost.perf.measure import STABILITY_WINDOWS, Profiler, StepResult, Window, WorkerPool
from modelhost.perf.options import PerfOptions, Range
from modelhost.perf.specs import worker_spec
from modelhost.tune.point import Point
from modelhost.tune.resources import Usage, UsageMeter
from modelhost.tune.target import Target

OnWindow = Callable[[float, int, Window, float], None]


def perf_options(
    model: str, url: str, max_concurrency: int, interval_ms: int, stability_pct: float, max_trials: int
) -> PerfOptions:
    return PerfOptions(
        model=model,
        url=url,
        protocol="http",
        concurrency=Range(1.0, float(max_concurrency), 1.0),
        interval_ms=interval_ms,
        stability_pct=stability_pct,
        max_trials=max_trials,
    )


class Measurer:
    """The load generator and statistics client for one server; `close()` when done."""

    def __init__(self, options: PerfOptions, target: Target, on_window: OnWindow | None = None) -> None:
        self.options = options
        self.target = target
        self.on_window = on_window
        self.control: ControlClient = control_client(options)
        self.pool: WorkerPool | None = None
        try:
            self.info: ModelInfo = self.control.model_info()
            if self.info.decoupled:
                raise PerfError(
                    f"model {self.info.name!r} is decoupled: tuning decoupled models is not supported yet"
                )
            if self.info.sequence:
                raise PerfError(
                    f"model {self.info.name!r} is a sequence model: tuning those is not supported yet"
                )
            data = build_input_data(self.info, options)
            processes = options.worker_count()
            specs = [worker_spec(options, self.info, data, i, processes, None) for i in range(processes)]
            self.pool = WorkerPool(specs)
        except BaseException:
            self.close()
            raise

    def measure(self, variant: str, concurrency: int, max_trials: int, run: int) -> Point:
        """The loaded variant at this concurrency, in at most `max_trials` windows; PerfError when requests fail."""
        assert self.pool is not None
        options = dataclasses.replace(self.options, max_trials=max(max_trials, STABILITY_WINDOWS))
        meter = UsageMeter(self.target.metrics_url, self.target.pid)
        meter.start()
        started = time.monotonic()
        result = Profiler(options, self.control, self.pool, on_window=self.on_window).measure(concurrency)
        wall = time.monotonic() - started
        usage = meter.finish()
        return to_point(result, variant, concurrency, usage, wall, run)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        self.control.close()


def to_point(
    result: StepResult, variant: str, concurrency: int, usage: Usage, wall_s: float, run: int
) -> Point:
    """Model Analyzer's metrics of one point from perf's result (its last three windows) and the server's usage."""
    ms = 1e-3
    return Point(
        variant=variant,
        concurrency=concurrency,
        throughput=result.throughput,
        p50_ms=result.percentiles_us[50] * ms,
        p90_ms=result.percentiles_us[90] * ms,
        p95_ms=result.percentiles_us[95] * ms,
        p99_ms=result.percentiles_us[99] * ms,
        avg_ms=result.latency_avg_us * ms,
        queue_ms=result.server_avg_us("queue") * ms,
        compute_input_ms=result.server_avg_us("compute_input") * ms,
        compute_infer_ms=result.server_avg_us("compute_infer") * ms,
        compute_output_ms=result.server_avg_us("compute_output") * ms,
        send_recv_ms=(result.send_us + result.recv_us) * ms,
        response_wait_ms=result.response_wait_us * ms,
        cpu_cores=usage.cpu_cores,
        ram_mb=usage.ram_mb,
        gpu_memory_mb=usage.gpu_memory_mb,
        gpu_utilization=usage.gpu_utilization,
        stable=result.stable,
        seconds=wall_s,
        run=run,
    )

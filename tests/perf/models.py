"""The model infos, option lines and step results the perf tests share."""

from __future__ import annotations

import numpy as np

from modelhost.perf.client import ModelInfo, ServerStats, TensorInfo
from modelhost.perf.measure import StepResult, Window, merge_windows
from modelhost.perf.options import PerfOptions, parse_args

SIMPLE = ModelInfo(
    name="simple",
    version="",
    max_batch_size=8,
    inputs=[TensorInfo("INPUT0", "INT32", [-1, 16]), TensorInfo("INPUT1", "INT32", [-1, 16])],
    outputs=[TensorInfo("OUTPUT0", "INT32", [-1, 16]), TensorInfo("OUTPUT1", "INT32", [-1, 16])],
)


ACCUMULATOR = ModelInfo(
    name="acc",
    version="",
    max_batch_size=4,
    inputs=[TensorInfo("INPUT", "INT32", [-1, 1])],
    outputs=[TensorInfo("OUTPUT", "INT32", [-1, 1])],
    sequence=True,
)


def options(*args: str) -> PerfOptions:
    return parse_args(["-m", "simple", *args])


def result(value: float, throughput_scale: int, o: PerfOptions) -> StepResult:
    starts = np.zeros(100 * throughput_scale, dtype=np.int64)
    ends = np.full(100 * throughput_scale, 2_000_000, dtype=np.int64)  # 2 ms each
    server = ServerStats(
        inference_count=100,
        execution_count=100,
        success_count=100,
        success_ns=100 * 500_000,
        queue_count=100,
        queue_ns=100 * 100_000,
        compute_input_count=100,
        compute_input_ns=100 * 10_000,
        compute_infer_count=100,
        compute_infer_ns=100 * 300_000,
        compute_output_count=100,
        compute_output_ns=100 * 20_000,
    )
    window = Window(0, 1_000_000_000, starts, ends, 1000 * starts.size, 3000 * starts.size, server)
    return merge_windows([window], "concurrency", value, o, True, 3)

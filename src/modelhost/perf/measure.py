"""Measurement windows, the stability rule and the sweep over concurrency levels or request rates.

As perf_analyzer: each load level is measured in windows of `-p` ms; after each window the last three are
compared, and the level is done once their throughputs, and their latencies (the average, or the
`--percentile` one), are each within `-s` percent (max / min <= 1 + s/100). The reported numbers are those of
the three windows together. A level that does not stabilise within `-r` windows is reported from its last
three windows, marked unstable. The server-side numbers are the difference of the model's statistics taken
at the window boundaries.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import numpy as np

from modelhost.perf.client import ControlClient, PerfError, ServerStats
from modelhost.perf.options import PerfOptions
from modelhost.perf.specs import WorkerSpec
from modelhost.perf.worker import worker_main

STABILITY_WINDOWS = 3


def is_stable(throughputs: Sequence[float], latencies: Sequence[float], percentage: float) -> bool:
    """perf_analyzer's rule on the last three windows: no empty window, and max/min within the percentage
    for throughput and for latency."""
    if len(throughputs) < STABILITY_WINDOWS or len(latencies) < STABILITY_WINDOWS:
        return False
    last_t = list(throughputs[-STABILITY_WINDOWS:])
    last_l = list(latencies[-STABILITY_WINDOWS:])
    if min(last_t) <= 0 or min(last_l) <= 0:
        return False
    limit = 1 + percentage / 100
    return max(last_t) / min(last_t) <= limit and max(last_l) / min(last_l) <= limit


def latency_ns(latencies: np.ndarray, percentile: int) -> float:
    """The latency that stability and the summary use: the average, or the given percentile."""
    if latencies.size == 0:
        return 0.0
    if percentile < 0:
        return float(latencies.mean())
    return float(np.percentile(latencies, percentile))


@dataclass
class Window:
    t0: int  # time.monotonic_ns
    t1: int
    starts: np.ndarray
    ends: np.ndarray
    send_ns: int
    recv_ns: int
    server: ServerStats
    firsts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # streaming: first responses
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # streaming: responses each

    @property
    def duration_s(self) -> float:
        return (self.t1 - self.t0) / 1e9

    @property
    def count(self) -> int:
        return int(self.ends.size)

    def throughput(self, batch: int) -> float:
        return self.count * batch / self.duration_s if self.duration_s > 0 else 0.0


@dataclass
class StepResult:
    """One load level, from its last three windows."""

    mode: str  # "concurrency" | "request_rate"
    value: float
    batch_size: int
    request_count: int
    duration_s: float
    throughput: float  # inferences/s (requests x batch)
    latency_avg_us: float
    latency_std_us: float
    percentiles_us: dict[int, float]
    send_us: float  # average per request
    recv_us: float
    server: ServerStats
    stable: bool
    trials: int
    window_bounds: list[int] = field(default_factory=list)  # monotonic ns
    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ends: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # Streaming only: average time from sending a request to its first response, responses per request.
    first_response_us: float | None = None
    responses_per_request: float | None = None
    firsts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def value_text(self) -> str:
        return str(int(self.value)) if self.mode == "concurrency" else f"{self.value:g}"

    def latency_us(self, percentile: int) -> float:
        """The latency the sweep reports and stops on: average, or the --percentile one."""
        if percentile < 0:
            return self.latency_avg_us
        if percentile in self.percentiles_us:
            return self.percentiles_us[percentile]
        lat = (self.ends - self.starts) / 1e3
        return float(np.percentile(lat, percentile)) if lat.size else 0.0

    # Server-side averages in microseconds, as perf_analyzer computes them.
    def server_avg_us(self, part: str) -> float:
        s = self.server
        count, ns = {
            "queue": (s.queue_count, s.queue_ns),
            "compute_input": (s.compute_input_count, s.compute_input_ns),
            "compute_infer": (s.compute_infer_count, s.compute_infer_ns),
            "compute_output": (s.compute_output_count, s.compute_output_ns),
            "request": (s.success_count, s.success_ns),
        }[part]
        return ns / count / 1e3 if count else 0.0

    @property
    def server_compute_us(self) -> float:
        return sum(self.server_avg_us(p) for p in ("compute_input", "compute_infer", "compute_output"))

    @property
    def server_overhead_us(self) -> float:
        accounted = self.server_avg_us("queue") + self.server_compute_us
        return max(0.0, self.server_avg_us("request") - accounted)

    @property
    def response_wait_us(self) -> float:
        return max(0.0, self.latency_avg_us - self.send_us - self.recv_us)

    @property
    def network_us(self) -> float:
        """Network+Server Send/Recv: client wait minus the server's queue and compute (0 at least)."""
        return max(0.0, self.response_wait_us - self.server_avg_us("queue") - self.server_compute_us)


def merge_windows(
    windows: Sequence[Window], mode: str, value: float, options: PerfOptions, stable: bool, trials: int
) -> StepResult:
    starts = np.concatenate([w.starts for w in windows]) if windows else np.zeros(0, np.int64)
    ends = np.concatenate([w.ends for w in windows]) if windows else np.zeros(0, np.int64)
    duration = sum(w.duration_s for w in windows)
    count = int(ends.size)
    lat_us = (ends - starts) / 1e3
    server = ServerStats()
    for w in windows:
        server = server + w.server
    streaming = options.streaming
    firsts = np.concatenate([w.firsts for w in windows]) if windows and streaming else np.zeros(0, np.int64)
    counts = np.concatenate([w.counts for w in windows]) if windows and streaming else np.zeros(0, np.int64)
    first_us = float(((firsts - starts) / 1e3).mean()) if streaming and count else 0.0
    return StepResult(
        mode=mode,
        value=value,
        batch_size=options.batch_size,
        request_count=count,
        duration_s=duration,
        throughput=count * options.batch_size / duration if duration > 0 else 0.0,
        latency_avg_us=float(lat_us.mean()) if count else 0.0,
        latency_std_us=float(lat_us.std()) if count else 0.0,
        percentiles_us={p: float(np.percentile(lat_us, p)) if count else 0.0 for p in options.percentiles},
        send_us=sum(w.send_ns for w in windows) / count / 1e3 if count else 0.0,
        recv_us=sum(w.recv_ns for w in windows) / count / 1e3 if count else 0.0,
        server=server,
        stable=stable,
        trials=trials,
        window_bounds=[windows[0].t0, *(w.t1 for w in windows)] if windows else [],
        starts=starts,
        ends=ends,
        first_response_us=first_us if streaming else None,
        responses_per_request=(float(counts.mean()) if count else 0.0) if streaming else None,
        firsts=firsts,
    )


class WorkerPool:
    """The load-generator processes, spawned once for the whole sweep."""

    def __init__(self, specs: Sequence[WorkerSpec]) -> None:
        """One process per spec (the specs differ by their process index and shared-memory regions)."""
        context = multiprocessing.get_context("spawn")
        self.pipes: list[Connection] = []
        self.processes: list[BaseProcess] = []
        for spec in specs:
            parent, child = context.Pipe()
            process = context.Process(target=worker_main, args=(child, spec), daemon=True)
            process.start()
            child.close()
            self.pipes.append(parent)
            self.processes.append(process)

    def _exchange(
        self, commands: Sequence[tuple[Any, ...] | None], timeout: float = 120
    ) -> list[tuple[Any, ...]]:
        try:
            return self._exchange_once(commands, timeout)
        except OSError as error:
            raise PerfError(f"a load-generator process failed: {error}") from None

    def _exchange_once(
        self, commands: Sequence[tuple[Any, ...] | None], timeout: float
    ) -> list[tuple[Any, ...]]:
        for pipe, command in zip(self.pipes, commands, strict=True):
            if command is not None:
                pipe.send(command)
        replies: list[tuple[Any, ...]] = []
        for pipe, command, process in zip(self.pipes, commands, self.processes, strict=True):
            if command is None:
                replies.append(("ok",))
                continue
            if not pipe.poll(timeout):
                raise PerfError("a load-generator process did not answer")
            try:
                reply = pipe.recv()
            except EOFError:
                raise PerfError(f"a load-generator process ended (exit code {process.exitcode})") from None
            if reply[0] == "error":
                raise PerfError(str(reply[1]))
            replies.append(reply)
        return replies

    def set_concurrency(self, total: int) -> None:
        n = len(self.pipes)
        shares = [total // n + (1 if i < total % n else 0) for i in range(n)]
        self._exchange([("concurrency", s) if s else ("stop",) for s in shares])

    def set_rate(self, rate: float, distribution: str, seed: int) -> None:
        n = len(self.pipes)
        self._exchange([("rate", rate / n, distribution, seed * 1000 + i) for i in range(n)])

    def stop(self) -> None:
        self._exchange([("stop",)] * len(self.pipes))

    def collect(self, t0: int, t1: int) -> tuple[Window, int, str]:
        """The requests answered in [t0, t1) (the window's server statistics left empty), the number of failed
        requests and the first failure."""
        replies = self._exchange([("collect", t0, t1)] * len(self.pipes))

        def joined(i: int) -> np.ndarray:
            return np.concatenate([np.frombuffer(r[i], dtype=np.int64) for r in replies])

        errors = sum(int(r[6]) for r in replies)
        first = next((str(r[7]) for r in replies if r[7]), "")
        send_ns, recv_ns = sum(int(r[3]) for r in replies), sum(int(r[4]) for r in replies)
        window = Window(t0, t1, joined(1), joined(2), send_ns, recv_ns, ServerStats(), joined(8), joined(9))
        return window, errors, first

    def close(self) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(OSError):
                pipe.send(("exit",))
        for process in self.processes:
            process.join(5)
            if process.is_alive():
                process.terminate()
                process.join(5)
        for pipe in self.pipes:
            pipe.close()


class Profiler:
    def __init__(
        self,
        options: PerfOptions,
        control: ControlClient,
        pool: WorkerPool,
        on_window: Callable[[float, int, Window, float], None] | None = None,
    ) -> None:
        self.options = options
        self.control = control
        self.pool = pool
        self.on_window = on_window

    def measure(self, value: float) -> StepResult:
        o = self.options
        mode = "concurrency" if o.is_concurrency else "request_rate"
        if o.is_concurrency:
            self.pool.set_concurrency(int(value))
        else:
            self.pool.set_rate(value, o.distribution, seed=int(value * 1000))
        windows: list[Window] = []
        throughputs: list[float] = []
        latencies: list[float] = []
        stable = False
        try:
            previous_stats = self.control.stats()
            previous_t = time.monotonic_ns()
            for trial in range(1, o.max_trials + 1):
                time.sleep(max(0.0, (previous_t + o.interval_ms * 1_000_000 - time.monotonic_ns()) / 1e9))
                t = time.monotonic_ns()
                stats = self.control.stats()
                window, errors, first_error = self.pool.collect(previous_t, t)
                if errors:
                    raise PerfError(f"inference requests failed ({errors} in the last window): {first_error}")
                window.server = stats - previous_stats
                starts, ends = window.starts, window.ends
                previous_t, previous_stats = t, stats
                windows.append(window)
                throughputs.append(window.throughput(o.batch_size))
                latencies.append(latency_ns(ends - starts, o.percentile))
                if self.on_window is not None:
                    self.on_window(value, trial, window, latencies[-1])
                if is_stable(throughputs, latencies, o.stability_pct):
                    stable = True
                    break
        finally:
            self.pool.stop()
        last = windows[-STABILITY_WINDOWS:]
        return merge_windows(last, mode, value, o, stable, len(windows))

    def sweep(self, on_step: Callable[[StepResult], None]) -> list[StepResult]:
        o = self.options
        results: list[StepResult] = []
        for value in o.load_values:
            result = self.measure(value)
            results.append(result)
            on_step(result)
            if not result.stable:
                print(
                    f"Failed to obtain stable measurement within {o.max_trials} measurement windows for "
                    f"{'concurrency' if o.is_concurrency else 'request rate'} {result.value_text}. "
                    "Please try to increase the --measurement-interval.",
                    file=sys.stderr,
                )
            if o.latency_threshold_ms > 0 and result.latency_us(o.percentile) > o.latency_threshold_ms * 1e3:
                break
        return results

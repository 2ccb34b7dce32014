"""A tuning run's measurements: a point is taken from the checkpoint, or its variant validated, loaded and
measured within the time limit; a concurrency sweep stops when throughput stops improving or p99 passes the
budget. The searches (search.py) only ask for points and sweeps.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.config import config_to_json
from modelhost.perf.client import PerfError
from modelhost.perf.measure import STABILITY_WINDOWS
from modelhost.tune import checkpoint
from modelhost.tune.checkpoint import RunState, VariantRecord
from modelhost.tune.goal import Goal
from modelhost.tune.measure import Measurer
from modelhost.tune.point import Point
from modelhost.tune.space import Space, Variant, apply
from modelhost.tune.target import Target, TuneError

# Model Analyzer's plateau rule (constants.py): a concurrency sweep ends when throughput has not grown by 5%
# over the best so far in 4 consecutive tries. The quick search, which starts its sweeps near the best
# concurrency already found, gives up after 2.
PLATEAU_GAIN = 0.05
PLATEAU_TRIES = 4


class TimeUp(Exception):
    """The time limit leaves no room for another measurement."""


class Reporter(Protocol):
    def starting(self, record: VariantRecord, concurrency: int) -> None: ...

    def measured(self, record: VariantRecord, point: Point, cached: bool) -> None: ...

    def failed(self, record: VariantRecord, concurrency: int | None) -> None: ...


Validator = Callable[[Variant], "str | None"]
Connector = Callable[[], "tuple[Target, Measurer]"]


class Session:
    def __init__(
        self,
        *,
        state: RunState,
        goal: Goal,
        space: Space,
        base_config: ModelConfig,
        validate: Validator,
        connect: Connector,
        reporter: Reporter,
        deadline: float,  # time.monotonic() by which the last measurement must have ended
        interval_ms: int,
        max_trials: int,
        output: Path,
        owns_server: bool,
    ) -> None:
        self.state = state
        self.goal = goal
        self.space = space
        self.base_config = base_config
        self.validate = validate
        self.connect = connect
        self.reporter = reporter
        self.deadline = deadline
        self.interval_s = interval_ms / 1000
        self.max_trials = max_trials
        self.output = output
        self.owns_server = owns_server
        self.target: Target | None = None
        self.measurer: Measurer | None = None
        self.loaded: str | None = None
        self.load_seconds = 1.0  # the last load's duration: the time a next load is expected to take
        self.measured = 0  # points measured (not taken from the checkpoint) in this run
        self.stopped_by_time = False

    # -- the server ---------------------------------------------------------------------------------------

    def _ensure_connected(self) -> tuple[Target, Measurer]:
        if self.target is None or self.measurer is None:
            self.target, self.measurer = self.connect()
            self.loaded = None
        return self.target, self.measurer

    def _after_failure(self) -> None:
        """A server that died (a variant can crash it) is started again; a --url one cannot be."""
        if self.target is not None and not self.target.alive():
            self.close()
            if not self.owns_server:
                raise TuneError("the server stopped answering")

    def close(self) -> None:
        if self.measurer is not None:
            self.measurer.close()
        if self.target is not None:
            self.target.close()
        self.target = self.measurer = None
        self.loaded = None

    # -- time ---------------------------------------------------------------------------------------------

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def _trials_left(self) -> int:
        return int(self.remaining() // self.interval_s)

    def _check_time(self, loading: bool) -> None:
        need = STABILITY_WINDOWS * self.interval_s + (self.load_seconds if loading else 0.0)
        if self.remaining() < need:
            self.stopped_by_time = True
            raise TimeUp

    # -- points -------------------------------------------------------------------------------------------

    def _load(self, record: VariantRecord) -> bool:
        problem = self.validate(record.variant)
        if problem is not None:
            record.failure = f"invalid configuration: {problem}"
            return False
        target, _ = self._ensure_connected()
        started = time.monotonic()
        config = apply(record.variant, self.base_config, self.space.thread_parameter)
        error = target.load(json.dumps(config_to_json(config)), timeout=self.remaining())
        self.load_seconds = max(0.5, time.monotonic() - started)
        if error is not None and self.remaining() <= 0:
            self.stopped_by_time = (
                True  # cut by the limit: not the variant's fault, so not recorded as failed
            )
            raise TimeUp
        if error is not None:
            record.failure = f"the server could not load it: {error}"
            self.loaded = None
            self._after_failure()
            return False
        self.loaded = record.variant.key
        return True

    def evaluate(self, variant: Variant, concurrency: int) -> Point | None:
        """The point (from the checkpoint, or measured now); None where the variant failed or requests failed
        at this concurrency. TimeUp when the limit leaves no room to measure it."""
        record = self.state.record(variant)
        cached = self.state.points.get((variant.key, concurrency))
        if cached is not None:
            self.reporter.measured(record, cached, cached=True)
            return cached
        if record.failure or concurrency in record.errors:
            return None
        self._check_time(loading=self.loaded != variant.key)
        if self.loaded != variant.key:
            if not self._load(record):
                checkpoint.save(self.state, self.output)
                self.reporter.failed(record, None)
                return None
            self._check_time(loading=False)
        _, measurer = self._ensure_connected()
        self.reporter.starting(record, concurrency)
        try:
            point = measurer.measure(
                variant.key, concurrency, min(self.max_trials, self._trials_left()), self.state.runs
            )
        except PerfError as error:
            record.errors[concurrency] = str(error)
            checkpoint.save(self.state, self.output)
            self.reporter.failed(record, concurrency)
            self._after_failure()
            return None
        self.state.points[(variant.key, concurrency)] = point
        self.measured += 1
        checkpoint.save(self.state, self.output)
        self.reporter.measured(record, point, cached=False)
        return point

    def sweep(self, variant: Variant, start: int = 1, patience: int = PLATEAU_TRIES) -> list[Point]:
        """The variant at rising concurrency (powers of two from `start`) until throughput stops growing, p99
        passes the latency budget, or requests fail."""
        points: list[Point] = []
        best = 0.0
        stale = 0
        for concurrency in self.space.concurrencies:
            if concurrency < start:
                continue
            point = self.evaluate(variant, concurrency)
            if point is None:
                break
            points.append(point)
            budget = self.goal.latency_budget_ms
            if budget is not None and point.p99_ms > budget:
                break
            if point.throughput > best * (1 + PLATEAU_GAIN):
                best, stale = point.throughput, 0
            else:
                stale += 1
                if stale >= patience:
                    break
        return points

    def best_point(self, variant: Variant) -> Point | None:
        return self.goal.best(self.state.points_of(variant))

"""The sequence batcher's test doubles: fake instances behind a real instance pool, a batcher built from a config's
text, jobs of sequences.

Deterministic: batches are formed behind the TRITONSERVER_DELAY_SCHEDULER / _BACKLOG_DELAY_ hooks (the `hooks`
fixture, conftest.py) or by a fake instance that answers only when the test says so; waits poll a condition, never
assert on time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.backends.api import Arrays, Job, JobOutcomes
from modelhost.engine.scheduling.instances import InstancePool
from modelhost.engine.scheduling.sequence_batcher import SequenceBatcher
from modelhost.errors import InternalError
from modelhost.observability.stats import ModelStats
from modelhost.types import InferenceRequest

CONTROLS = """
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
"""
STATE = """
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ]
            initial_state [ { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zeros" } ] } ]
"""


class Accumulator:
    """A batch-level instance: OUT = STATE_IN + IN (STATE_OUT too); records every batch it runs."""

    def __init__(self, name: str = "acc") -> None:
        self.name = name
        self.batches: list[Arrays] = []
        self.lock = threading.Lock()
        self.fail_next = False

    def execute(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        with self.lock:
            self.batches.append(dict(inputs))
            fail, self.fail_next = self.fail_next, False
        if fail:
            raise InternalError("backend failure")
        total = inputs["IN"] + inputs.get("STATE_IN", 0)
        return {n: v for n, v in {"OUT": total, "STATE_OUT": total}.items() if n in output_names}

    def close(self) -> None:
        pass


class HeldAccumulator(Accumulator):
    """An Accumulator whose first execution holds (on the instance's thread) until the test releases it."""

    def __init__(self) -> None:
        super().__init__("held")
        self.entered = threading.Event()
        self.release = threading.Event()

    def execute(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        if not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(30)
        return super().execute(inputs, output_names)


class Manual:
    """A request-level instance (as a python model's stub) that answers only when the test tells it to."""

    def __init__(self, name: str = "manual") -> None:
        self.name = name
        self.calls: list[tuple[list[Job], Callable[[JobOutcomes], None]]] = []
        self.answered: list[int] = []

    def submit(self, jobs: list[Job], done: Callable[[JobOutcomes], None]) -> None:
        self.calls.append((jobs, done))

    def answer(self, call: int, *outcomes: Arrays | BaseException) -> None:
        jobs, done = self.calls[call]
        self.answered.append(call)
        done(list(outcomes) if outcomes else [{"OUT": j.inputs["IN"]} for j in jobs])

    def close(self) -> None:
        pass


def make(text: str, *instances: Any, model_dir: Path = Path(".")) -> tuple[SequenceBatcher, ModelStats]:
    config = text_format.Parse(text, ModelConfig(name="seq"))
    stats = ModelStats("seq", "1")
    return SequenceBatcher(InstancePool(list(instances)), config, stats, model_dir), stats


def job(
    corrid: int | str | None, value: int = 1, *, start: bool = False, end: bool = False, rows: int = 1
) -> Job:
    params: dict[str, Any] = {}
    if corrid is not None:
        params["sequence_id"] = corrid
    if start:
        params["sequence_start"] = True
    if end:
        params["sequence_end"] = True
    request = InferenceRequest("seq", parameters=params)
    return Job({"IN": np.full((rows, 1), value, dtype=np.int32)}, ["OUT"], rows, request=request)


def corrid_of(call: tuple[list[Job], Any]) -> Any:
    """The sequence of the first request a fake instance was handed."""
    request = call[0][0].request
    return None if request is None else request.parameters["sequence_id"]


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(5000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition never held")

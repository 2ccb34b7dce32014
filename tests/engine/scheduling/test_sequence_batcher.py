"""The sequence batcher through its seam: fake instances behind a real instance pool.

Deterministic: batches are formed behind the TRITONSERVER_DELAY_SCHEDULER / _BACKLOG_DELAY_ hooks or by a fake
instance that answers only when the test says so; waits poll a condition, never assert on time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.backends.api import Arrays, Job, JobOutcomes, ResponseSink
from modelhost.backends.sequence import SEQUENCE_END, SEQUENCE_START, sequence_params, server_fed_inputs
from modelhost.engine.scheduling.instances import InstancePool
from modelhost.engine.scheduling.sequence_batcher import SequenceBatcher
from modelhost.errors import Cancelled, InternalError, InvalidArgument, ModelConfigError, Unavailable
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


@pytest.fixture
def hooks(monkeypatch: pytest.MonkeyPatch) -> Callable[[int, int], None]:
    def set_hooks(queued: int, backlog: int = 0) -> None:
        monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", str(queued))
        monkeypatch.setenv("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", str(backlog))

    return set_hooks


# -- request checks ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("made", "message"),
    [
        (
            lambda: job(7, start=True, rows=2),
            "inference request to model 'seq' must specify batch-size 1 due to requirements of sequence batcher",
        ),
        (
            lambda: job(0, start=True),
            "inference request to model 'seq' must specify a non-zero or non-empty correlation ID",
        ),
        (
            lambda: job("", start=True),
            "inference request to model 'seq' must specify a non-zero or non-empty correlation ID",
        ),
        (
            lambda: job(None, start=True),
            "inference request to model 'seq' must specify a non-zero or non-empty correlation ID",
        ),
        (
            lambda: job(42),
            "inference request for sequence 42 to model 'seq' must specify the START flag on the first request of "
            "the sequence",
        ),
        (
            lambda: job("abc"),
            "inference request for sequence abc to model 'seq' must specify the START flag on the first request of "
            "the sequence",
        ),
    ],
)
def test_bad_sequence_requests_are_refused(made: Callable[[], Job], message: str) -> None:
    fake = Accumulator()
    b, _ = make("max_batch_size: 4 sequence_batching { }", fake)

    async def go() -> None:
        with pytest.raises(InvalidArgument) as e:
            await b.execute(made())
        assert str(e.value) == message
        assert b.live_sequences() == 0 and b.queued() == 0
        # still serving
        out = await b.execute(job(1, 5, start=True, end=True))
        assert out["OUT"].tolist() == [[5]]

    run(go())


def test_a_request_after_end_needs_a_new_start() -> None:
    b, _ = make("max_batch_size: 4 sequence_batching { }", Accumulator())

    async def go() -> None:
        await b.execute(job(3, start=True))
        await b.execute(job(3, end=True))
        with pytest.raises(InvalidArgument, match=r"sequence 3 .* must specify the START flag"):
            await b.execute(job(3))
        await b.execute(job(3, start=True, end=True))
        assert b.live_sequences() == 0

    run(go())


def test_sequence_params_as_triton_request_holds_them() -> None:
    assert sequence_params(None) == (0, 0)
    assert sequence_params(InferenceRequest("m")) == (0, 0)
    request = InferenceRequest("m", parameters={"sequence_id": "s1", "sequence_start": True})
    assert sequence_params(request) == ("s1", SEQUENCE_START)
    request = InferenceRequest(
        "m", parameters={"sequence_id": 9, "sequence_end": True, "sequence_start": False}
    )
    assert sequence_params(request) == (9, SEQUENCE_END)


def test_server_fed_inputs_are_controls_and_states() -> None:
    config = text_format.Parse(f"max_batch_size: 2 sequence_batching {{ {CONTROLS} {STATE} }}", ModelConfig())
    assert server_fed_inputs(config) == {"START", "END", "READY", "CORRID", "STATE_IN"}
    assert server_fed_inputs(ModelConfig()) == set()


# -- direct strategy ------------------------------------------------------------------------------------------


def test_direct_batches_slots_of_one_instance_with_control_rows(hooks: Callable[[int, int], None]) -> None:
    hooks(2, 0)  # both first requests are queued before anything runs
    fake = Accumulator()
    b, stats = make(f"max_batch_size: 2 sequence_batching {{ {CONTROLS} }}", fake)

    async def go() -> list[Arrays]:
        return list(
            await asyncio.gather(
                b.execute(job(11, 1, start=True)), b.execute(job(12, 2, start=True, end=True))
            )
        )

    first, second = run(go())
    assert first["OUT"].tolist() == [[1]] and second["OUT"].tolist() == [[2]]
    (batch,) = fake.batches
    assert batch["START"].dtype == np.int32 and batch["START"].tolist() == [[1], [1]]
    assert batch["END"].dtype == np.float32 and batch["END"].tolist() == [[0.0], [1.0]]
    assert batch["READY"].dtype == np.bool_ and batch["READY"].tolist() == [[True], [True]]
    assert batch["CORRID"].dtype == np.uint64 and batch["CORRID"].tolist() == [[11], [12]]
    assert stats.execution_count == 1 and list(stats.batches) == [2]
    assert b.live_sequences() == 1  # 11 holds its slot; 12 ended


def test_controls_of_a_model_without_batching_have_shape_one() -> None:
    fake = Accumulator()
    b, _ = make(
        'sequence_batching { control_input [ { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID '
        "data_type: TYPE_STRING } ] } ] }",
        fake,
    )

    async def go() -> None:
        await b.execute(job("abc", start=True, end=True))

    run(go())
    assert fake.batches[0]["CORRID"].shape == (1,)
    assert fake.batches[0]["CORRID"].tolist() == [b"abc"]


def test_a_correlation_id_the_corrid_type_cannot_hold_fails_that_request_alone() -> None:
    fake = Accumulator()
    b, _ = make(
        'sequence_batching { control_input [ { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID '
        "data_type: TYPE_UINT32 } ] } ] }",
        fake,
    )

    async def go() -> None:
        for bad in (-5, 2**40):  # a negative gRPC int64 id; one past 32 bits
            with pytest.raises(InvalidArgument, match=f"cannot hold correlation ID {bad}"):
                await b.execute(job(bad, start=True, end=True))
        # The instance was given back: the next sequence runs.
        assert (await b.execute(job(7, 3, start=True, end=True)))["OUT"].tolist() == [[3]]

    run(go())
    assert fake.batches[-1]["CORRID"].tolist() == [7]


def test_a_sequence_stays_on_its_instance() -> None:
    one, two = Manual("one"), Manual("two")
    b, _ = make("sequence_batching { }", one, two)  # one slot per instance

    async def go() -> None:
        a1 = asyncio.create_task(b.execute(job(1, start=True)))
        b1 = asyncio.create_task(b.execute(job(2, start=True)))
        await until(lambda: len(one.calls) == 1 and len(two.calls) == 1)
        first_of = {
            corrid_of(one.calls[0]): one,
            corrid_of(two.calls[0]): two,
        }
        one.answer(0)
        two.answer(0)
        await asyncio.gather(a1, b1)
        for step in range(3):
            await asyncio.gather(b.execute(job(1, step)), b.execute(job(2, step)), self_answer(one, two))
        assert [corrid_of(c) for c in first_of[1].calls] == [1] * 4
        assert [corrid_of(c) for c in first_of[2].calls] == [2] * 4

    async def self_answer(*instances: Manual) -> None:
        for instance in instances:
            answered = len(instance.answered)
            await until(lambda i=instance, n=answered: len(i.calls) == n + 1)
            instance.answer(answered)

    run(go())


def test_rows_are_in_slot_order_whatever_the_arrival_order(hooks: Callable[[int, int], None]) -> None:
    # A model keeping state per batch slot (Triton's sequence test backend, in L0_sequence_batcher) must find each
    # sequence at its slot's row in every batch, though the sequences' next requests arrive in another order.
    hooks(8)
    fake = Accumulator()
    b, _ = make(f"max_batch_size: 4 sequence_batching {{ {CONTROLS} }}", fake)

    async def go() -> None:
        tasks = [asyncio.create_task(b.execute(job(c, c, start=True))) for c in (1, 2, 3, 4)]
        await until(lambda: b.queued() == 4)
        tasks += [asyncio.create_task(b.execute(job(c, 10 * c, end=True))) for c in (4, 2, 3, 1)]
        await asyncio.gather(*tasks)

    run(go())
    assert [batch["CORRID"].ravel().tolist() for batch in fake.batches] == [[1, 2, 3, 4], [1, 2, 3, 4]]


def test_an_empty_slot_below_a_used_one_is_padded_with_a_null_row(hooks: Callable[[int, int], None]) -> None:
    # As Triton's direct strategy: the rows of a batch are the slots up to the highest used one; an empty slot's
    # row has READY false (its answer dropped). The batch size counts it, the inference count does not.
    hooks(3)
    fake = Accumulator()
    b, stats = make(f"max_batch_size: 4 sequence_batching {{ {CONTROLS} {STATE} }}", fake)

    async def go() -> None:
        first = [
            asyncio.create_task(b.execute(job(c, c, start=True, end=c == 2))) for c in (1, 2, 3)
        ]  # slots 0, 1, 2; sequence 2 ends at once
        await asyncio.gather(*first)
        second = [asyncio.create_task(b.execute(job(c, 10 * c, end=True))) for c in (1, 3)]
        assert [int(o["OUT"][0, 0]) for o in await asyncio.gather(*second)] == [11, 33]

    run(go())
    padded = fake.batches[1]
    assert padded["CORRID"].ravel().tolist() == [1, 0, 3]
    assert padded["READY"].ravel().tolist() == [True, False, True]
    assert padded["IN"].ravel().tolist() == [10, 0, 30]
    assert padded["STATE_IN"].ravel().tolist() == [1, 0, 3]  # the null row's state is the initial one
    assert sorted(stats.batches) == [3] and stats.execution_count == 2 and stats.inference_count == 5


def test_a_slot_whose_sequence_has_no_request_now_is_padded_too(hooks: Callable[[int, int], None]) -> None:
    # Triton's direct strategy pads up to the highest slot holding a sequence, though that sequence has no
    # request in this batch (Triton's L0_sequence_batcher test_ragged_batch counts batches of 4 so).
    hooks(2)
    fake = Accumulator()
    b, stats = make(f"max_batch_size: 4 sequence_batching {{ {CONTROLS} }}", fake)

    async def go() -> None:
        await asyncio.gather(*(b.execute(job(c, c, start=True)) for c in (1, 2)))  # slots 0 and 1
        await b.execute(job(1, 10, end=True))  # sequence 2, in slot 1, sends nothing now
        await b.execute(job(2, 20, end=True))

    run(go())
    assert [batch["CORRID"].ravel().tolist() for batch in fake.batches] == [[1, 2], [1, 0], [0, 2]]
    assert fake.batches[1]["READY"].ravel().tolist() == [True, False]
    assert sorted(stats.batches) == [2] and stats.execution_count == 3 and stats.inference_count == 4


def test_a_request_level_model_gets_a_null_request_for_an_empty_slot(
    hooks: Callable[[int, int], None],
) -> None:
    hooks(3)
    manual = Manual()
    b, _ = make(f"max_batch_size: 4 sequence_batching {{ {CONTROLS} }}", manual)

    async def go() -> None:
        first = [asyncio.create_task(b.execute(job(c, c, start=True, end=c == 2))) for c in (1, 2, 3)]
        await until(lambda: len(manual.calls) == 1)
        manual.answer(0)
        await asyncio.gather(*first)
        second = [asyncio.create_task(b.execute(job(c, 10 * c, end=True))) for c in (1, 3)]
        await until(lambda: len(manual.calls) == 2)
        jobs, _ = manual.calls[1]
        assert [j.request is None for j in jobs] == [False, True, False]
        assert [bool(j.inputs["READY"].ravel()[0]) for j in jobs] == [True, False, True]
        manual.answer(1, {"OUT": np.array([[1]])}, InternalError("a null request's answer is dropped"), {})
        assert [o.get("OUT") is not None for o in await asyncio.gather(*second)] == [True, False]

    run(go())


@pytest.mark.parametrize(("utilization", "waits"), [(1.0, True), (0.5, False), (0.0, False)])
def test_direct_queue_delay_waits_only_for_the_share_of_slots_asked(utilization: float, waits: bool) -> None:
    # Triton's rule (L0_sequence_batcher test_queue_delay_*_min_util): with a queue delay and a minimum slot
    # utilization, a batch waits until that share of the instance's slots has a request (or the delay ends);
    # with a utilization of 0 it does not wait at all. The delay here is longer than any test.
    manual = Manual()
    b, _ = make(
        "max_batch_size: 2 sequence_batching { direct { max_queue_delay_microseconds: 600000000 "
        f"minimum_slot_utilization: {utilization} }} }}",
        manual,
    )

    async def go() -> None:
        first = asyncio.create_task(b.execute(job(1, 1, start=True)))
        if waits:
            for _ in range(20):
                await asyncio.sleep(0)
            assert manual.calls == []  # one slot of two has a request
            second = asyncio.create_task(b.execute(job(2, 2, start=True)))
            await until(lambda: len(manual.calls) == 1)
            assert len(manual.calls[0][0]) == 2
            manual.answer(0)
            await asyncio.gather(first, second)
        else:
            await until(lambda: len(manual.calls) == 1)
            manual.answer(0)
            await first

    run(go())


def test_a_failed_request_in_a_batch_fails_alone(hooks: Callable[[int, int], None]) -> None:
    hooks(2, 0)
    manual = Manual()
    b, stats = make("max_batch_size: 2 sequence_batching { }", manual)

    async def go() -> None:
        good = asyncio.create_task(b.execute(job(1, 4, start=True)))
        bad = asyncio.create_task(b.execute(job(2, 5, start=True)))
        await until(lambda: len(manual.calls) == 1)
        jobs, _ = manual.calls[0]
        assert len(jobs) == 2
        manual.answer(0, {"OUT": np.array([[4]])}, InternalError("model failed"))
        assert (await good)["OUT"].tolist() == [[4]]
        with pytest.raises(InternalError, match="model failed"):
            await bad
        # the failed request's sequence goes on
        follow = asyncio.create_task(b.execute(job(2, 6, end=True)))
        await until(lambda: len(manual.calls) == 2)
        manual.answer(1)
        assert (await follow)["OUT"].tolist() == [[6]]
        assert stats.execution_count == 2

    run(go())


# -- implicit state -------------------------------------------------------------------------------------------


def test_implicit_state_accumulates_and_restarts() -> None:
    fake = Accumulator()
    b, _ = make(f"max_batch_size: 2 sequence_batching {{ {STATE} }}", fake)

    async def go() -> list[int]:
        seen = []
        for value, start, end in [(1, True, False), (2, False, False), (3, False, True), (10, True, True)]:
            out = await b.execute(job(5, value, start=start, end=end))
            assert set(out) == {"OUT"}  # the state output is not returned unless asked for
            seen.append(int(out["OUT"][0, 0]))
        return seen

    assert run(go()) == [1, 3, 6, 10]
    assert fake.batches[0]["STATE_IN"].tolist() == [[0]]
    assert b.live_sequences() == 0


def test_requests_queued_back_to_back_read_the_state_their_predecessor_wrote() -> None:
    # The instance is free again before the completion that keeps the state has run: the next request of the
    # sequence must wait for it (it read the previous state, or the initial one, before the fix). Sequence 6 waits
    # in the backlog behind 5 with all its requests queued, as Triton's L0_request_cancellation implicit state test
    # has it after a cancelled sequence's slot times out.
    fake = Accumulator()
    b, _ = make(
        f"max_batch_size: 1 sequence_batching {{ oldest {{ max_candidate_sequences: 1 }} {STATE} }}", fake
    )

    async def go() -> None:
        first = asyncio.create_task(b.execute(job(5, 7, start=True)))
        backlogged = [
            asyncio.create_task(b.execute(job(6, v, start=v == 1, end=v == 4))) for v in (1, 2, 3, 4)
        ]
        await until(lambda: b.queued() == 4)  # 5 ran; 6 waits for its slot with every request queued
        await first
        pipelined = [asyncio.create_task(b.execute(job(5, v, end=v == 3))) for v in (1, 2, 3)]
        assert [int(o["OUT"][0, 0]) for o in await asyncio.gather(*pipelined)] == [8, 10, 13]
        assert [int(o["OUT"][0, 0]) for o in await asyncio.gather(*backlogged)] == [1, 3, 6, 10]
        assert b.live_sequences() == 0

    run(go())
    assert [int(batch["STATE_IN"][0, 0]) for batch in fake.batches] == [0, 7, 8, 10, 0, 1, 3, 6]


def test_a_cancelled_sequence_leaves_no_state_to_the_next_in_its_slot() -> None:
    # Triton's L0_request_cancellation test_state_reset_after_cancel: a sequence cancelled while one of its
    # requests runs keeps its slot until that request ends; the next sequence in that slot starts from the
    # initial state.
    held = HeldAccumulator()
    b, _ = make(
        "max_batch_size: 1 sequence_batching { max_sequence_idle_microseconds: 1000 "
        f"oldest {{ max_candidate_sequences: 1 }} {STATE} }}",
        held,
    )

    async def go() -> None:
        running = asyncio.create_task(b.execute(job(1, 5, start=True)))
        await until(held.entered.is_set)
        queued = asyncio.create_task(b.execute(job(1, 6)))
        await until(lambda: b.queued() == 1)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        held.release.set()
        await running
        next_one = [asyncio.create_task(b.execute(job(2, v, start=v == 1, end=v == 3))) for v in (1, 2, 3)]
        assert [int(o["OUT"][0, 0]) for o in await asyncio.gather(*next_one)] == [1, 3, 6]
        assert b.live_sequences() == 0

    run(go())
    assert [int(batch["STATE_IN"][0, 0]) for batch in held.batches] == [0, 0, 1, 3]


def test_initial_state_from_a_data_file(tmp_path: Path) -> None:
    (tmp_path / "initial_state").mkdir()
    np.array([100], dtype=np.int32).tofile(tmp_path / "initial_state" / "start.bin")
    state = STATE.replace('zero_data: true name: "zeros"', 'data_file: "start.bin" name: "file"')
    b, _ = make(f"max_batch_size: 2 sequence_batching {{ {state} }}", Accumulator(), model_dir=tmp_path)

    async def go() -> int:
        await b.execute(job(1, 1, start=True))
        return int((await b.execute(job(1, 2, end=True)))["OUT"][0, 0])

    assert run(go()) == 103


def test_a_short_initial_state_file_fails_the_load(tmp_path: Path) -> None:
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "start.bin").write_bytes(b"\x01")
    state = STATE.replace('zero_data: true name: "zeros"', 'data_file: "start.bin" name: "file"')
    with pytest.raises(ModelConfigError, match="expects 4 bytes"):
        make(f"max_batch_size: 2 sequence_batching {{ {state} }}", Accumulator(), model_dir=tmp_path)


def test_implicit_state_on_a_python_model_fails_the_load() -> None:
    # Its outputs are those of its config: the state output would never come back to be kept.
    with pytest.raises(ModelConfigError, match=r"implicit state .* is not supported for python model"):
        make(f"max_batch_size: 0 sequence_batching {{ {STATE} }}", Manual())


# -- backlog, idle release, cancellation, unload ---------------------------------------------------------------


def test_backlog_waits_for_a_free_slot(hooks: Callable[[int, int], None]) -> None:
    hooks(1, 1)  # nothing runs before sequence 2 waits in the backlog
    manual = Manual()
    b, stats = make("sequence_batching { }", manual)  # one slot

    async def go() -> None:
        a = asyncio.create_task(b.execute(job(1, start=True)))
        c = asyncio.create_task(b.execute(job(2, start=True, end=True)))
        await until(lambda: len(manual.calls) == 1)
        assert corrid_of(manual.calls[0]) == 1
        assert b.queued() == 1  # sequence 2, in the backlog
        manual.answer(0)
        await a
        end = asyncio.create_task(b.execute(job(1, end=True)))
        await until(lambda: len(manual.calls) == 2)
        manual.answer(1)
        await end
        await until(lambda: len(manual.calls) == 3)  # the freed slot went to sequence 2
        assert corrid_of(manual.calls[2]) == 2
        manual.answer(2)
        await c
        assert b.live_sequences() == 0 and b.queued() == 0
        assert stats.execution_count == 3

    run(go())


def test_idle_sequence_is_released_and_its_slot_reused() -> None:
    manual = Manual()
    b, _ = make("sequence_batching { max_sequence_idle_microseconds: 1000 }", manual)

    async def go() -> None:
        first = asyncio.create_task(b.execute(job(1, start=True)))
        await until(lambda: len(manual.calls) == 1)
        backlogged = asyncio.create_task(b.execute(job(2, start=True, end=True)))
        manual.answer(0)
        await first
        await until(lambda: len(manual.calls) == 2)  # sequence 1 went idle: 2 got its slot
        manual.answer(1)
        await backlogged
        with pytest.raises(InvalidArgument, match=r"sequence 1 .* must specify the START flag"):
            await b.execute(job(1))
        assert b.live_sequences() == 0

    run(go())


def test_cancelled_queued_request_cancels_its_sequence_and_frees_the_slot() -> None:
    manual = Manual()
    b, _ = make("sequence_batching { }", manual)

    async def go() -> None:
        running = asyncio.create_task(b.execute(job(1, start=True)))
        await until(lambda: len(manual.calls) == 1)
        queued = asyncio.create_task(b.execute(job(1)))
        later = asyncio.create_task(b.execute(job(1, end=True)))
        waiting = asyncio.create_task(b.execute(job(2, start=True, end=True)))  # backlog
        await until(lambda: b.queued() == 3)
        queued.cancel()
        with pytest.raises(Cancelled, match="sequence 1") as caught:
            await later
        # counted as cancelled in nv_inference_request_failure, as Triton (L0_request_cancellation scheduler_test)
        assert caught.value.failure_reason == "CANCELED"
        assert b.queued() == 1
        manual.answer(0)  # sequence 1's running request ends: its slot goes to sequence 2
        await running
        await until(lambda: len(manual.calls) == 2)
        manual.answer(1)
        await waiting
        with pytest.raises(InvalidArgument, match="START flag"):
            await b.execute(job(1))
        assert b.live_sequences() == 0 and b.queued() == 0

    run(go())


def test_close_fails_queued_requests_and_frees_everything(hooks: Callable[[int, int], None]) -> None:
    hooks(5, 0)  # nothing runs
    b, _ = make("sequence_batching { }", Accumulator())

    async def go() -> None:
        tasks = [asyncio.create_task(b.execute(job(i, start=True))) for i in (1, 2)]
        await until(lambda: b.queued() == 2)
        b.close()
        for task in tasks:
            with pytest.raises(Unavailable, match="unloaded"):
                await task
        assert b.live_sequences() == 0 and b.queued() == 0
        with pytest.raises(Unavailable):
            await b.execute(job(3, start=True))

    run(go())


# -- oldest strategy --------------------------------------------------------------------------------------------


def test_oldest_batches_candidates_oldest_first(hooks: Callable[[int, int], None]) -> None:
    hooks(3, 0)
    fake = Accumulator()
    b, _ = make(
        "max_batch_size: 2 sequence_batching { oldest { max_candidate_sequences: 4 } "
        'control_input [ { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_INT64 } ] } ] }',
        fake,
    )

    async def go() -> None:
        a = asyncio.create_task(b.execute(job(1, 1, start=True)))
        await asyncio.sleep(0)
        c = asyncio.create_task(b.execute(job(2, 2, start=True)))
        await asyncio.sleep(0)
        d = asyncio.create_task(b.execute(job(3, 3, start=True, end=True)))
        await asyncio.gather(a, c, d)

    run(go())
    assert [batch["CORRID"].ravel().tolist() for batch in fake.batches] == [[1, 2], [3]]


def test_execution_failure_of_an_end_request_still_frees_the_slot() -> None:
    fake = Accumulator()
    b, _ = make("sequence_batching { }", fake)

    async def go() -> None:
        await b.execute(job(1, start=True))
        fake.fail_next = True
        with pytest.raises(InternalError, match="backend failure"):
            await b.execute(job(1, end=True))
        assert b.live_sequences() == 0
        await b.execute(job(2, start=True, end=True))

    run(go())


def test_an_added_instance_takes_a_backlogged_sequence() -> None:
    first, added = Accumulator("first"), Accumulator("added")
    b, _ = make("sequence_batching { }", first)  # one slot

    async def go() -> None:
        await b.execute(job(1, start=True))
        waiting = asyncio.create_task(b.execute(job(2, start=True)))
        await until(lambda: b.queued() == 1)  # in the backlog: the only slot is sequence 1's
        b.add_lanes(b.pool.add([added]))
        await waiting
        assert len(added.batches) == 1 and len(first.batches) == 1
        await b.execute(job(2, end=True))
        assert len(added.batches) == 2  # sequence 2 stays on the added instance

    run(go())


def test_a_retired_instance_keeps_its_sequence_to_its_end_and_takes_no_new_one() -> None:
    leaving, staying = Accumulator("leaving"), Accumulator("staying")
    b, _ = make("sequence_batching { }", leaving, staying)

    async def go() -> None:
        await b.execute(job(1, start=True))  # slot 0 of the first instance
        worker = b.pool.workers[0]
        assert worker.instance is leaving and b.sequences_on(worker) == 1
        emptied = b.retire_lane(worker)
        await b.execute(job(2, start=True, end=True))  # not on the leaving instance
        assert len(staying.batches) == 1
        await b.execute(job(1))
        assert not emptied.done()
        await b.execute(job(1, end=True))
        await emptied
        assert len(leaving.batches) == 3
        await b.execute(job(3, start=True, end=True))
        assert len(staying.batches) == 2 and len(leaving.batches) == 3

    run(go())


def test_a_backlogged_sequence_whose_request_times_out_is_rejected_whole() -> None:
    """Triton's rule: a request's timeout expires only while its sequence waits in the backlog; then every request
    the sequence queued fails, and the sequence is forgotten. A sequence in a slot waits without a deadline."""
    manual = Manual()
    b, _ = make("sequence_batching { max_sequence_idle_microseconds: 60000000 }", manual)  # one slot

    async def go() -> None:
        holder = asyncio.create_task(b.execute(job(1, start=True)))
        await until(lambda: len(manual.calls) == 1)
        waiting = [
            asyncio.create_task(b.execute(job(2, start=True), timeout_us=20_000)),
            asyncio.create_task(b.execute(job(2), timeout_us=10_000_000)),
        ]
        # In the slot, a request with a deadline long past still runs.
        manual.answer(0)
        await holder
        in_slot = asyncio.create_task(b.execute(job(1), timeout_us=1))
        for request in waiting:
            with pytest.raises(
                Unavailable, match=r"^timeout of the corresponding sequence has been expired$"
            ):
                await asyncio.wait_for(request, 30)
        assert b.live_sequences() == 1  # sequence 2 is gone
        await until(lambda: len(manual.calls) == 2)
        manual.answer(1)
        await in_slot
        with pytest.raises(InvalidArgument, match=r"sequence 2 .* must specify the START flag"):
            await b.execute(job(2, end=True))

    run(go())


def test_preserve_ordering_answers_in_arrival_order_across_sequences() -> None:
    first, second = Manual("first"), Manual("second")
    b, _ = make(
        "sequence_batching { oldest { max_candidate_sequences: 1 preserve_ordering: true } }", first, second
    )  # a slot on each instance: the two sequences run side by side

    async def go() -> None:
        a = asyncio.create_task(b.execute(job(1, 10, start=True)))
        await until(lambda: len(first.calls) + len(second.calls) == 1)
        c = asyncio.create_task(b.execute(job(2, 20, start=True)))
        await until(lambda: len(first.calls) + len(second.calls) == 2)
        later = second if second.calls and corrid_of(second.calls[0]) == 2 else first
        earlier = first if later is second else second
        later.answer(0)  # the later request finishes first...
        await asyncio.sleep(0.05)
        assert not c.done()  # ...and waits for the earlier one's answer
        earlier.answer(0)
        assert (await a)["OUT"].tolist() == [[10]]
        assert (await c)["OUT"].tolist() == [[20]]

    run(go())


def test_preserve_ordering_lets_a_failed_earlier_request_pass() -> None:
    first, second = Manual("first"), Manual("second")
    b, _ = make(
        "sequence_batching { oldest { max_candidate_sequences: 1 preserve_ordering: true } }", first, second
    )

    async def go() -> None:
        a = asyncio.create_task(b.execute(job(1, 10, start=True)))
        await until(lambda: len(first.calls) + len(second.calls) == 1)
        c = asyncio.create_task(b.execute(job(2, 20, start=True)))
        await until(lambda: len(first.calls) + len(second.calls) == 2)
        later = second if second.calls and corrid_of(second.calls[0]) == 2 else first
        earlier = first if later is second else second
        later.answer(0)
        earlier.answer(0, InternalError("boom"))
        with pytest.raises(InternalError):
            await a
        assert (await c)["OUT"].tolist() == [[20]]

    run(go())


def test_preserve_ordering_holds_a_decoupled_requests_responses_until_earlier_ones_end() -> None:
    first, second = Manual("first"), Manual("second")
    b, _ = make(
        "model_transaction_policy { decoupled: true } "
        "sequence_batching { oldest { max_candidate_sequences: 1 preserve_ordering: true } }",
        first,
        second,
    )

    async def go() -> None:
        sinks = [ResponseSink(), ResponseSink()]
        jobs = [job(1, 10, start=True), job(2, 20, start=True)]
        for j, sink in zip(jobs, sinks, strict=True):
            j.sink = sink
        a = asyncio.create_task(b.execute(jobs[0]))
        await until(lambda: len(first.calls) + len(second.calls) == 1)
        c = asyncio.create_task(b.execute(jobs[1]))
        await until(lambda: len(first.calls) + len(second.calls) == 2)
        sent = {corrid_of(call): call[0][0] for call in first.calls + second.calls}
        sent[2].sink.put({"OUT": np.array([[20]])}, final=True)  # the later request answers first: held
        assert sinks[1]._queue.empty()
        sent[1].sink.put({"OUT": np.array([[10]])})  # the earlier one streams through at once
        assert (await sinks[0].get()).outputs["OUT"].tolist() == [[10]]
        assert sinks[1]._queue.empty()
        sent[1].sink.put(None, final=True)  # its end lets the later one's response go
        assert (await sinks[0].get()).final
        item = await sinks[1].get()
        assert item.final and item.outputs["OUT"].tolist() == [[20]]
        for manual in (first, second):
            manual.answer(0, {})
        await a
        await c

    run(go())

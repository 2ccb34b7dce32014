"""Batch forming of the sequence batcher (sequence_strategy.py): Triton's direct and oldest strategies through the
batcher, and the strategy's rows, slots per instance and test hooks on their own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from engine.scheduling.sequence_fakes import CONTROLS, STATE, Accumulator, Manual, job, make, run, until
from modelhost.backends.api import Arrays
from modelhost.engine.scheduling.sequence_slots import Lane, Sequence, SequenceRequest
from modelhost.engine.scheduling.sequence_strategy import SequenceStrategy
from modelhost.errors import InternalError

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


# -- the strategy on its own -------------------------------------------------------------------------------------


def strategy(text: str, request_level: bool = False) -> SequenceStrategy:
    return SequenceStrategy(text_format.Parse(text, ModelConfig(name="seq")), request_level)


def lane_of(*held: int | None) -> tuple[Lane, list[SequenceRequest]]:
    """A lane whose slots hold sequences (None: an empty slot), each with one request queued."""
    lane = Lane(0, cast(Any, None), [None if c is None else Sequence(c) for c in held])
    requests = []
    for slot, sequence in enumerate(lane.slots):
        if sequence is not None:
            sequence.lane, sequence.slot = lane, slot
            request = SequenceRequest(job(sequence.corrid), 0, cast(Any, None), slot, sequence)
            sequence.queue.append(request)
            requests.append(request)
    return lane, requests


def test_slots_per_instance_follow_the_strategy() -> None:
    assert strategy("max_batch_size: 4 sequence_batching { }").per_lane == 4
    assert strategy("sequence_batching { }").per_lane == 1
    assert strategy("max_batch_size: 4 sequence_batching { oldest { max_candidate_sequences: 6 } }").per_lane == 6
    assert strategy("max_batch_size: 4 sequence_batching { oldest { } }").per_lane == 4


def test_direct_rows_are_slots_padded_up_to_the_highest_one_held() -> None:
    direct = strategy("max_batch_size: 4 sequence_batching { }")
    lane, requests = lane_of(1, None, 3, 4)
    assert direct.rows([requests[0], requests[1]], lane) == ([0, 2], 4)
    oldest = strategy("max_batch_size: 4 sequence_batching { oldest { max_candidate_sequences: 4 } }")
    assert oldest.rows([requests[1], requests[2]], lane) == ([0, 1], 2)


def test_a_sequence_whose_request_runs_offers_no_head() -> None:
    lane, requests = lane_of(1, 2)
    requests[0].sequence.running = 1
    assert SequenceStrategy.heads(lane) == [requests[1]]


def test_the_hooks_hold_until_their_counts_are_reached_and_are_spent_then(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "2")
    monkeypatch.setenv("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", "junk")  # as atoi: 0, off
    hooked = strategy("sequence_batching { }")
    assert hooked.hooked and hooked.held(1, 5)
    assert not hooked.held(2, 0) and not hooked.hooked and not hooked.held(0, 0)

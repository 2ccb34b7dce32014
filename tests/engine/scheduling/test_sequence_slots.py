"""The slots of a sequence batcher (sequence_slots.py): a sequence stays on its instance, idle sequences give their
slots up, instance updates add and retire lanes; and the slots on their own."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from engine.scheduling.sequence_fakes import Accumulator, Manual, corrid_of, job, make, run, until
from modelhost.engine.scheduling.instances import InstancePool
from modelhost.engine.scheduling.sequence_slots import Sequence, SequenceRequest, SequenceSlots
from modelhost.errors import InvalidArgument


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


# -- the slots on their own --------------------------------------------------------------------------------------


def slots_of(instances: int, per_lane: int) -> SequenceSlots:
    return SequenceSlots(InstancePool([Manual(f"i{i}") for i in range(instances)]).workers, per_lane)


def test_free_slots_are_spread_over_the_instances_first() -> None:
    slots = slots_of(2, 2)
    sequences = [Sequence(c) for c in range(1, 5)]
    lanes = [slots.take(sequence) for sequence in sequences]
    assert [lane.index if lane is not None else None for lane in lanes] == [0, 1, 0, 1]
    assert [(s.lane.index if s.lane is not None else None, s.slot) for s in sequences] == [
        (0, 0),
        (1, 0),
        (0, 1),
        (1, 1),
    ]
    assert slots.take(Sequence(5)) is None


def test_a_vacated_slot_is_released_once_and_free_again() -> None:
    slots = slots_of(1, 1)
    sequence = Sequence(7)
    lane = slots.take(sequence)
    assert lane is not None and lane.slots == [sequence]
    assert slots.held() == 1 and slots.occupied() == [sequence]
    assert slots.sequences_on(lane.worker) == 1
    assert slots.vacate(sequence) is lane and slots.vacate(sequence) is None
    assert slots.held() == 0 and slots.take(Sequence(8)) is None  # not free until given back
    slots.free(lane, 0)
    other = Sequence(9)
    slots.assign(other, lane, 0)
    assert lane.slots == [other] and (other.lane, other.slot) == (lane, 0)


def test_idle_sequences_are_found_and_the_wait_is_until_the_next_one() -> None:
    slots = slots_of(1, 4)
    idle, recent, busy, closing = Sequence(1), Sequence(2), Sequence(3), Sequence(4)
    for sequence in (idle, recent, busy, closing):
        assert slots.take(sequence) is not None
    recent.last_ns = 900
    busy.queue.append(SequenceRequest(job(3), 0, cast(Any, None), 0, busy))
    closing.closing = True
    assert slots.idle(1000, 500) == ([idle], 400, True)
    assert slots_of(1, 1).idle(1000, 500) == ([], 500, False)


def test_a_retired_lane_takes_no_new_sequence_and_is_gone_once_empty() -> None:
    async def go() -> None:
        slots = slots_of(2, 1)
        sequence = Sequence(1)
        leaving = slots.take(sequence)
        assert leaving is not None
        emptied = slots.retire(leaving.worker)
        staying = slots.take(Sequence(2))
        assert staying is not None and staying is not leaving and slots.take(Sequence(3)) is None
        assert not emptied.done()
        slots.vacate(sequence)
        slots.drop_if_empty(leaving)
        assert emptied.done() and list(slots.lanes) == [1]
        other = slots.add(InstancePool([Manual("other")]).workers[0])
        assert slots.retire(other.worker).done()  # nothing held there: gone at once

    run(go())


def test_added_lanes_get_new_indices() -> None:
    slots = slots_of(1, 1)
    lane = slots.add(InstancePool([Manual("new")]).workers[0])
    assert lane.index == 1 and lane.slots == [None]
    assert slots.take(Sequence(1)) is not None  # the first lane's slot
    assert slots.take(Sequence(2)) is None  # the new lane's slots are the batcher's to hand out


@pytest.mark.parametrize("per_lane", [1, 3])
def test_close_empties_every_slot(per_lane: int) -> None:
    slots = slots_of(2, per_lane)
    while slots.take(Sequence(len(slots.occupied()) + 1)) is not None:
        pass
    slots.close()
    assert slots.held() == 0 and slots.occupied() == []

"""The backlog of a sequence batcher (sequence_backlog.py): sequences wait there for a slot, and a request's timeout
applies there only; and the backlog on its own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import pytest

from engine.scheduling.sequence_fakes import Manual, corrid_of, job, make, run, until
from modelhost.engine.scheduling.sequence_backlog import Backlog
from modelhost.engine.scheduling.sequence_slots import Sequence, SequenceRequest
from modelhost.errors import InvalidArgument, Unavailable


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


# -- the backlog on its own --------------------------------------------------------------------------------------


def waiting(corrid: int, requests: int) -> Sequence:
    sequence = Sequence(corrid)
    for _ in range(requests):
        sequence.queue.append(SequenceRequest(job(corrid), 0, cast(Any, None), 0, sequence))
    return sequence


def test_the_oldest_sequence_with_requests_leaves_first_with_them() -> None:
    backlog = Backlog()
    cancelled, first, second = waiting(1, 0), waiting(2, 2), waiting(3, 1)
    for sequence in (cancelled, first, second):
        backlog.append(sequence)
    backlog.requests = 3
    first.expires_ns = 10
    assert backlog.pop() is first and backlog.requests == 1 and first.expires_ns == 0
    assert len(backlog) == 1  # the cancelled one was dropped on the way
    backlog.remove(second)
    backlog.remove(second)  # gone already: nothing to do
    assert backlog.pop() is None and backlog.waiting() == [] and not backlog.sequences


def test_a_deadline_only_comes_sooner_and_passed_ones_are_named() -> None:
    backlog = Backlog()
    early, late, none = waiting(1, 1), waiting(2, 1), waiting(3, 1)
    for sequence in (early, late, none):
        backlog.append(sequence)
    backlog.shorten(early, 100)
    assert backlog.deadline_changed.is_set()
    backlog.deadline_changed.clear()
    backlog.shorten(early, 200)
    assert early.expires_ns == 100 and not backlog.deadline_changed.is_set()
    backlog.shorten(late, 500)
    assert backlog.expired(50) == ([], 50)
    assert backlog.expired(150) == ([early], 350)
    assert backlog.expired(600) == ([early, late], None)
    backlog.clear()
    assert len(backlog) == 0

"""Ordered delivery for the sequence batcher (sequence_ordering.py, `oldest.preserve_ordering`): through the batcher,
and on its own."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from engine.scheduling.sequence_fakes import Manual, corrid_of, job, make, run, until
from modelhost.backends.api import ResponseSink
from modelhost.engine.scheduling.sequence_ordering import OrderedDelivery
from modelhost.engine.scheduling.sequence_slots import Sequence, SequenceRequest
from modelhost.errors import InternalError


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


# -- ordered delivery on its own ---------------------------------------------------------------------------------


def test_answers_leave_in_arrival_order_and_a_gone_caller_holds_back_nobody() -> None:
    async def go() -> None:
        loop = asyncio.get_running_loop()
        delivery = OrderedDelivery()
        first, gone, last = (
            SequenceRequest(job(c), 0, loop.create_future(), 0, Sequence(c)) for c in (1, 2, 3)
        )
        for request in (first, gone, last):
            delivery.enlist(request)
        delivery.deliver(last, {"OUT": np.array([[3]])})
        assert not last.future.done()  # waits for the two before it
        gone.future.cancel()
        delivery.deliver(first, InternalError("boom"))
        assert isinstance(first.future.exception(), InternalError)
        assert last.future.result()["OUT"].tolist() == [[3]]

    run(go())


def test_a_held_stream_passes_on_once_the_one_before_it_is_abandoned() -> None:
    async def go() -> None:
        delivery = OrderedDelivery()
        targets = [ResponseSink(), ResponseSink()]
        earlier, later = (delivery.sink(t) for t in targets)
        later.put({"OUT": np.array([[2]])}, final=True)
        assert targets[1]._queue.empty()
        earlier.abandon()  # failed without its final response
        item = await targets[1].get()
        assert item.final and item.outputs is not None and item.outputs["OUT"].tolist() == [[2]]
        cancelled: list[bool] = []
        later.on_cancel = lambda: cancelled.append(True)
        targets[1].finished = False
        targets[1].cancel()  # the caller went away: the model hears of it
        assert cancelled == [True]

    run(go())

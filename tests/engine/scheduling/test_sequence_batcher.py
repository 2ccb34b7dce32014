"""The sequence batcher through its seam: fake instances behind a real instance pool (sequence_fakes.py). Its pieces
have their own tests (slots, backlog, strategy, ordering; the controls and state it feeds: tests/backends)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from engine.scheduling.sequence_fakes import (
    STATE,
    Accumulator,
    HeldAccumulator,
    Manual,
    job,
    make,
    run,
    until,
)
from modelhost.backends.api import Job
from modelhost.errors import Cancelled, InternalError, InvalidArgument, ModelConfigError, Unavailable

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

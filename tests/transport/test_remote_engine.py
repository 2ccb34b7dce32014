"""RemoteEngine against the engine's end of the link over a real Unix socket, in one event loop, with a fake engine
behind it: every EngineAPI call arrives as made and answers as in process (values, errors by class and kind,
streams, cancellation, the engine going away)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

import numpy as np
import pytest

from fake_engine import DECOUPLED, MODEL, FakeEngine, fp32
from modelhost.engine.engine import Engine
from modelhost.engine_api import CallContext
from modelhost.errors import DecoupledModel, ModelhostError, NotFound, Unavailable
from modelhost.transport.client import EngineGone, RemoteEngine, connect
from modelhost.transport.server import EngineService
from modelhost.types import FINAL_RESPONSE, InferenceRequest, RequestedOutput, ShmWindow, Tensor


def linked(test: Callable[[RemoteEngine, FakeEngine, EngineService], Awaitable[None]]) -> None:
    """Run `test` with a RemoteEngine linked to an EngineService over a fake engine."""

    async def main() -> None:
        fake = FakeEngine()
        service = EngineService(cast(Engine, fake), lambda hello: None)
        await service.start()
        service.opened.set()
        remote = await connect(service.address, lambda: None, lambda changes: None)
        try:
            await test(remote, fake, service)
        finally:
            service.close()

    asyncio.run(main())


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


def test_unary_inference_round_trip() -> None:
    async def test(remote: RemoteEngine, fake: FakeEngine, service: EngineService) -> None:
        request = InferenceRequest(MODEL, "", "id-1", [fp32("INPUT0", [1, 2, 3])], parameters={"p": 7})
        response = await remote.infer(request, CallContext("GRPC", 42, lambda: "00-tp"))
        assert response.id == "id-1" and response.parameters == {"answered": True}
        assert np.array_equal(response.outputs[0].data, np.array([1, 2, 3], dtype=np.float32))
        (seen,) = fake.requests
        assert seen.parameters == {"p": 7} and seen.inputs[0].shape == [3]
        (context,) = fake.contexts
        assert context is not None and (context.protocol, context.received_ns, context.parent()) == (
            "GRPC",
            42,
            "00-tp",
        )
        assert fake.sent_calls and fake.sent_calls[0][2] is True  # the engine's side stamps the send

    linked(test)


def test_shared_memory_windows_travel_both_ways() -> None:
    async def test(remote: RemoteEngine, fake: FakeEngine, service: EngineService) -> None:
        unread = np.empty(0, dtype=np.uint8)
        tensor = Tensor("INPUT0", "FP32", [2], unread, shm=ShmWindow("in", 8, 8))
        request = InferenceRequest(
            MODEL, inputs=[tensor], outputs=[RequestedOutput("INPUT0", shm=ShmWindow("out", 0, 8))]
        )
        request.shared_memory = True
        response = await remote.infer(request)
        (seen,) = fake.requests
        assert seen.shared_memory and seen.inputs[0].shm == ShmWindow("in", 8, 8)
        assert seen.outputs[0].shm == ShmWindow("out", 0, 8)
        # The fake answers its inputs: an output with a window comes back as written there, without bytes.
        assert response.outputs[0].shm == ShmWindow("in", 8, 8)

    linked(test)


def test_errors_come_back_with_their_class_and_kind() -> None:
    async def test(remote: RemoteEngine, fake: FakeEngine, service: EngineService) -> None:
        with pytest.raises(DecoupledModel) as decoupled:
            await remote.infer(InferenceRequest(DECOUPLED))
        assert decoupled.value.grpc_message.startswith("ModelInfer RPC")
        with pytest.raises(NotFound, match="unknown model"):
            await remote.model_metadata("nope")
        with pytest.raises(ModelhostError, match="log file location"):
            await remote.logging_settings({"log_file": "x"})

    linked(test)


def test_every_other_call_answers_as_in_process() -> None:
    async def test(remote: RemoteEngine, fake: FakeEngine, service: EngineService) -> None:
        assert await remote.is_live() and await remote.is_ready()
        assert (await remote.server_metadata())["name"] == "fake"
        config = await remote.model_config(MODEL)
        assert config.name == MODEL and config.input[0].name == "INPUT0"
        signature = await remote.model_signature(DECOUPLED)
        assert signature.decoupled and signature.max_batch_size == 8
        assert signature.inputs["INPUT0"].dims == (-1,) and signature.inputs["INPUT0"].dtype == np.float32
        await remote.load_model("m", {"config": "{}"}, files_base64=False)
        assert ("load_model", ("m", {"config": "{}"}, False)) in fake.calls
        await remote.register_cuda_shared_memory("c", b"\x00\x01", 0, 64)
        assert ("register_cuda_shared_memory", ("c", b"\x00\x01", 0, 64)) in fake.calls
        assert (await remote.shared_memory_status("system"))[0]["key"] == "/k"
        assert await remote.settled(1.0)
        remote.refused(MODEL, "2")
        await _until(lambda: ("refused", (MODEL, "2")) in fake.calls)

    linked(test)


def test_a_stream_brings_each_response_and_its_errors() -> None:
    async def test(remote: RemoteEngine, fake: FakeEngine, service: EngineService) -> None:
        inputs = [fp32("A", [1]), fp32("BAD", [2]), fp32("C", [3])]
        got = [r async for r in remote.infer_stream(InferenceRequest(DECOUPLED, inputs=inputs))]
        assert [r.outputs[0].name if r.outputs else None for r in got] == ["A", None, "C", None]
        assert isinstance(got[1].error, ModelhostError) and str(got[1].error) == "bad input 1"
        assert got[-1].parameters[FINAL_RESPONSE] is True
        assert remote.in_flight == 0

    linked(test)


def test_closing_a_stream_early_cancels_it_in_the_engine() -> None:
    async def test(remote: RemoteEngine, fake: FakeEngine, service: EngineService) -> None:
        fake.hold = asyncio.Event()
        stream = remote.infer_stream(InferenceRequest(DECOUPLED, inputs=[fp32("A", [1])]))
        waiting = asyncio.ensure_future(anext(stream))
        await _until(lambda: bool(fake.requests))
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await stream.aclose()
        await _until(lambda: fake.cancelled == 1)

    linked(test)


def test_a_caller_that_gives_up_cancels_its_request() -> None:
    async def test(remote: RemoteEngine, fake: FakeEngine, service: EngineService) -> None:
        fake.hold = asyncio.Event()
        task = asyncio.ensure_future(remote.infer(InferenceRequest(MODEL, inputs=[fp32("A", [1])])))
        await _until(lambda: bool(fake.requests))
        task.cancel()
        await _until(lambda: fake.cancelled == 1)
        remote.cancels = False  # a stopping frontend leaves its requests to finish
        task = asyncio.ensure_future(remote.infer(InferenceRequest(MODEL, inputs=[fp32("A", [1])])))
        await _until(lambda: len(fake.requests) == 2)
        task.cancel()
        await asyncio.sleep(0.05)
        assert fake.cancelled == 1

    linked(test)


def test_a_log_settings_change_reaches_every_frontend() -> None:
    async def main() -> None:
        fake = FakeEngine()
        service = EngineService(cast(Engine, fake), lambda hello: None)
        await service.start()
        service.opened.set()
        seen: list[tuple[int, dict[str, Any]]] = []
        first = await connect(service.address, lambda: None, lambda changes: seen.append((1, changes)))
        await connect(service.address, lambda: None, lambda changes: seen.append((2, changes)))
        await first.logging_settings()  # a read changes nothing
        await first.logging_settings({"log_verbose_level": 1})
        await _until(lambda: len(seen) == 2)
        assert sorted(seen) == [(1, {"log_verbose_level": 1}), (2, {"log_verbose_level": 1})]
        service.close()

    asyncio.run(main())


def test_calls_in_flight_fail_unavailable_when_the_engine_goes() -> None:
    async def test(remote: RemoteEngine, fake: FakeEngine, service: EngineService) -> None:
        fake.hold = asyncio.Event()
        task = asyncio.ensure_future(remote.infer(InferenceRequest(MODEL, inputs=[fp32("A", [1])])))
        await _until(lambda: bool(fake.requests))
        service.close()
        with pytest.raises(EngineGone) as gone:
            await task
        assert isinstance(gone.value, Unavailable)
        with pytest.raises(EngineGone):
            await remote.is_ready()

    linked(test)


def test_the_link_over_tcp_asks_for_its_token_carries_inference_and_closes() -> None:
    """A Ray replica serves its engine's link on a TCP port for the ingress on another machine, to whoever
    presents the ingress's token."""

    async def main() -> None:
        fake = FakeEngine()
        service = EngineService(cast(Engine, fake), lambda hello: None, token="secret")
        await service.start(tcp_host="127.0.0.1")
        service.opened.set()
        assert service.address.startswith("127.0.0.1:") and not service.address.endswith(":0")
        stranger = await connect(service.address, lambda: None, lambda changes: None, token="guess")
        with pytest.raises(EngineGone):  # closed without an answer
            await stranger.infer(InferenceRequest(MODEL, inputs=[fp32("INPUT0", [1])]))
        assert not fake.requests
        remote = await connect(service.address, lambda: None, lambda changes: None, token="secret")
        try:
            response = await remote.infer(InferenceRequest(MODEL, "", "tcp", [fp32("INPUT0", [4, 5])]))
            assert response.id == "tcp" and response.outputs[0].data.tolist() == [4.0, 5.0]
            remote.close()
            await _until(lambda: not remote.connected)
            with pytest.raises(EngineGone):
                await remote.infer(InferenceRequest(MODEL, inputs=[fp32("INPUT0", [1])]))
        finally:
            service.close()

    asyncio.run(main())

"""The gRPC service against the fake engine, in process: what a stream answers when the server itself fails."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tritonclient.grpc import service_pb2

from fake_engine import MODEL, FakeEngine
from modelhost.engine_api import CallContext
from modelhost.frontends.grpc.calls import CallContext as GrpcCall
from modelhost.frontends.grpc.service import GrpcService
from modelhost.types import InferenceRequest, InferenceResponse


class BuggyEngine(FakeEngine):
    """Fails with a fault of its own (not a ModelhostError) on requests whose id is "bug"."""

    async def infer_stream(
        self, request: InferenceRequest, context: CallContext | None = None
    ) -> AsyncIterator[InferenceResponse]:
        if request.id == "bug":
            raise RuntimeError("a bug in the engine")
        async for response in super().infer_stream(request, context):
            yield response


def _request(request_id: str) -> Any:
    message = service_pb2.ModelInferRequest(model_name=MODEL, id=request_id)
    tensor = message.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 2])
    tensor.contents.fp32_contents.extend([1.0, 2.0])
    return message


def test_a_fault_in_one_streamed_request_is_answered_and_the_stream_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> list[Any]:
        async def requests() -> AsyncIterator[Any]:
            for request_id in ("first", "bug", "last"):
                yield _request(request_id)

        service = GrpcService(BuggyEngine())
        stream = service.ModelStreamInfer(requests(), GrpcCall([]))
        return [answer async for answer in stream]

    answers = asyncio.run(asyncio.wait_for(main(), 10))
    assert (
        len(answers) == 3
    )  # once, the stream never answered the faulty request, and its client waited forever
    assert sorted(a.infer_response.id for a in answers if not a.error_message) == ["first", "last"]
    assert [a.error_message for a in answers if a.error_message] == ["internal server error"]
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and errors[0].exc_info is not None  # logged once, with its traceback

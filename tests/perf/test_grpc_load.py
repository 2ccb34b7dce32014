"""The gRPC load generator's streaming: final responses, and what the recorder and a step make of them."""

from __future__ import annotations

import numpy as np

from modelhost.perf.client import ServerStats
from modelhost.perf.grpc_load import final_response
from modelhost.perf.measure import Window, merge_windows
from modelhost.perf.recorder import Recorder
from modelhost.perf.report import step_text
from perf.models import options


def test_streaming_final_response_and_recorder() -> None:
    from tritonclient.grpc import service_pb2

    response = service_pb2.ModelStreamInferResponse()
    response.infer_response.parameters["triton_final_response"].bool_param = True
    assert final_response(response.SerializeToString()) == ("", True, False)
    response.infer_response.outputs.add().name = "OUT"
    response.infer_response.parameters["triton_final_response"].bool_param = False
    assert final_response(response.SerializeToString()) == ("", False, True)
    assert final_response(service_pb2.ModelStreamInferResponse(error_message="boom").SerializeToString())[0]
    r = Recorder(streaming=True)
    for start, first, end, count in [(0, 2, 5, 1), (1, 3, 10, 3), (3, 4, 25, 2)]:
        r.starts.append(start)
        r.firsts.append(first)
        r.ends.append(end)
        r.counts.append(count)
    reply = r.collect(8, 20)
    assert np.frombuffer(reply[8], dtype=np.int64).tolist() == [3]
    assert np.frombuffer(reply[9], dtype=np.int64).tolist() == [3]
    assert list(r.firsts) == [4] and list(r.counts) == [2]
    window = Window(
        0, 10**9, np.array([1]), np.array([10]), 0, 0, ServerStats(), np.array([3]), np.array([3])
    )
    step = merge_windows([window], "concurrency", 1, options("-i", "grpc", "--streaming"), True, 1)
    assert step.first_response_us == 0.002 and step.responses_per_request == 3
    assert "Avg responses per request: 3.00" in step_text(step, options("-i", "grpc", "--streaming"))

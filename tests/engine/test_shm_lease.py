"""modelhost.engine.shm_lease: a request's shared-memory refs resolved (inputs read from their windows, outputs
written into theirs), and the regions it names held until it is answered."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from modelhost.engine.shared_memory import RegionInUse, SharedMemoryRegistry
from modelhost.engine.shm_lease import Lease
from modelhost.errors import NotFound
from modelhost.types import InferenceRequest, InferenceResponse, RequestedOutput, ShmWindow, Tensor


@pytest.fixture
def registry() -> Iterator[SharedMemoryRegistry]:
    r = SharedMemoryRegistry(allowed=True)
    yield r
    r.close()


def test_a_requests_refs_are_read_and_its_outputs_written_into_their_windows(
    registry: SharedMemoryRegistry, key: str
) -> None:
    registry.register("r", key, 0, 64)
    empty = np.empty(0, dtype=np.uint8)
    request = InferenceRequest(
        "m",
        inputs=[Tensor("X", "UINT8", [4], empty, shm=ShmWindow("r", 4, 4))],
        outputs=[RequestedOutput("Y", shm=ShmWindow("r", 32, 8)), RequestedOutput("Z")],
        shared_memory=True,
    )
    lease = Lease(registry)
    lease.read(request)
    assert request.inputs[0].data.tolist() == [4, 5, 6, 7]
    outputs = [
        Tensor("Y", "INT32", [2], np.array([7, -1], dtype=np.int32)),
        Tensor("Z", "INT32", [1], np.array([3], dtype=np.int32)),
    ]
    response = InferenceResponse("m", "1", "", outputs)
    written = lease.written(response)
    assert [t.shm for t in written.outputs] == [ShmWindow("r", 32, 8), None]
    assert response.outputs[0].shm is None  # the response itself (a cached one is shared) is left as it was
    with pytest.raises(RegionInUse):
        registry.unregister("r")  # held until the request is answered
    lease.release()
    registry.unregister("r")
    with open(f"/dev/shm{key}", "rb") as f:
        assert np.frombuffer(f.read()[32:40], np.int32).tolist() == [7, -1]


def test_an_unknown_region_is_refused_and_a_failed_answer_is_not_written(
    registry: SharedMemoryRegistry, key: str
) -> None:
    registry.register("r", key, 0, 64)
    lease = Lease(registry)
    with pytest.raises(NotFound, match="Unable to find shared memory region: 'nope'"):
        lease.read(InferenceRequest("m", outputs=[RequestedOutput("Y", shm=ShmWindow("nope", 0, 8))]))
    lease.read(InferenceRequest("m", outputs=[RequestedOutput("Y", shm=ShmWindow("r", 0, 8))]))
    failed = InferenceResponse("m", "1", "", [], error=RuntimeError("the model failed"))
    assert lease.written(failed) is failed
    lease.release()
    registry.unregister("r")

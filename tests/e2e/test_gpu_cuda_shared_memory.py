"""The cuda_shared_memory extension on a GPU, driven with tritonclient.utils.cuda_shared_memory and tritonclient
HTTP and gRPC, as Triton's L0_cuda_shared_memory does: device memory the client allocates and exports, registered
by its IPC handle, inputs read from it and outputs written into it; status, unregister and the errors."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e.server_process import RunningServer, running_server

pytestmark = pytest.mark.gpu
A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.int32)


@pytest.fixture(scope="module")
def cudashm() -> Any:
    # tritonclient's module raises RuntimeError, not ImportError, without cuda-bindings: ask for those first.
    pytest.importorskip("cuda.bindings.runtime", reason="tritonclient's CUDA utilities need cuda-bindings")
    return pytest.importorskip("tritonclient.utils.cuda_shared_memory")


@pytest.fixture(scope="module")
def server(
    main_repository: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    with running_server(
        [main_repository], tmp_path_factory.mktemp("log") / "server.log", "--allow-client-shm=true"
    ) as running:
        yield running


@pytest.fixture(params=["http", "grpc"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def client(server: RunningServer, protocol: str) -> Iterator[Any]:
    module: Any = httpclient if protocol == "http" else grpcclient
    c = module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    yield c
    c.unregister_cuda_shared_memory()
    c.close()


@pytest.fixture
def regions(cudashm: Any, server: RunningServer) -> Iterator[dict[str, Any]]:
    """name -> device memory made for one test (64 bytes on GPU 0), unregistered and freed after."""
    made = {name: cudashm.create_shared_memory_region(name, 64, 0) for name in ("in0", "in1", "out0", "out1")}
    yield made
    client = httpclient.InferenceServerClient(server.http_url)
    client.unregister_cuda_shared_memory()  # before the memory goes
    client.close()
    for handle in made.values():
        cudashm.destroy_shared_memory_region(handle)


def register(client: Any, cudashm: Any, regions: dict[str, Any], byte_size: int = 64) -> None:
    for name, handle in regions.items():
        client.register_cuda_shared_memory(name, cudashm.get_raw_handle(handle), 0, byte_size)


def names(client: Any, protocol: str) -> list[str]:
    status = client.get_cuda_shared_memory_status()
    return sorted(r["name"] for r in status) if protocol == "http" else sorted(status.regions)


def request(protocol: str) -> tuple[list[Any], list[Any]]:
    module: Any = httpclient if protocol == "http" else grpcclient
    inputs = [module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_shared_memory("in0", 64)
    inputs[1].set_shared_memory("in1", 64)
    outputs = [module.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
    outputs[0].set_shared_memory("out0", 64)
    outputs[1].set_shared_memory("out1", 64)
    return inputs, outputs


def test_inputs_and_outputs_in_cuda_shared_memory(
    client: Any, protocol: str, cudashm: Any, regions: dict[str, Any]
) -> None:
    cudashm.set_shared_memory_region(regions["in0"], [A])
    cudashm.set_shared_memory_region(regions["in1"], [B])
    register(client, cudashm, regions)
    assert names(client, protocol) == ["in0", "in1", "out0", "out1"]
    inputs, outputs = request(protocol)
    client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(cudashm.get_contents_as_numpy(regions["out0"], np.int32, [1, 16]), A + B)
    np.testing.assert_array_equal(cudashm.get_contents_as_numpy(regions["out1"], np.int32, [1, 16]), A - B)
    if protocol == "http":
        assert client.get_cuda_shared_memory_status("out0") == [
            {"name": "out0", "device_id": 0, "byte_size": 64}
        ]
    else:
        region = client.get_cuda_shared_memory_status("out0").regions["out0"]
        assert (region.name, region.device_id, region.byte_size) == ("out0", 0, 64)
    client.unregister_cuda_shared_memory("in0")
    assert names(client, protocol) == ["in1", "out0", "out1"]
    client.unregister_cuda_shared_memory()
    assert names(client, protocol) == []


def test_the_extension_is_listed(client: Any, protocol: str) -> None:
    meta = client.get_server_metadata()
    assert "cuda_shared_memory" in (meta["extensions"] if protocol == "http" else list(meta.extensions))


def _error(call: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return caught.value


def test_registration_and_inference_errors(
    client: Any, protocol: str, cudashm: Any, regions: dict[str, Any]
) -> None:
    handle = cudashm.get_raw_handle(regions["in0"])
    client.register_cuda_shared_memory("in0", handle, 0, 64)
    again = _error(lambda: client.register_cuda_shared_memory("in0", handle, 0, 64))
    assert "shared memory region 'in0' already in manager" in again.message()
    larger = _error(lambda: client.register_cuda_shared_memory("big", handle, 0, 1 << 30))
    assert "failed to register shared memory region 'big': invalid args" in larger.message()
    zeros = base64.b64encode(bytes(64))  # a handle of the right size that CUDA cannot open
    not_a_handle = _error(lambda: client.register_cuda_shared_memory("bad", zeros, 0, 64))
    assert "failed to register shared memory region: invalid args" in not_a_handle.message()
    assert names(client, protocol) == ["in0"]
    # A window past the region's end, in Triton's words; the server goes on serving.
    register(client, cudashm, {k: v for k, v in regions.items() if k != "in0"})
    inputs, outputs = request(protocol)
    inputs[1].set_shared_memory("in1", 64, offset=32)
    past = _error(lambda: client.infer("simple", inputs, outputs=outputs))
    assert "Invalid offset + byte size for shared memory region: 'in1'" in past.message()
    inputs, outputs = request(protocol)
    client.infer("simple", inputs, outputs=outputs)

"""The asyncio HTTP client, tritonclient.http.aio, against every endpoint it has, as Triton's qa suite
L0_http/python_http_aio_test.py drives it. That client reads bodies without decompressing them (aiohttp with
auto_decompress=False) while aiohttp asks for gzip on every request: only inference answers may come compressed,
as Triton compresses only those (and the client decompresses them itself)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from e2e.server_process import RunningServer, running_server


@pytest.fixture(scope="module")
def server(
    main_repository: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    # With client shared memory on, as the qa suite's server (Triton 2.51 has no --allow-client-shm).
    log = tmp_path_factory.mktemp("log") / "server.log"
    with running_server([main_repository], log, "--allow-client-shm=true") as running:
        yield running


def run(server: RunningServer, call: Callable[[aioclient.InferenceServerClient], Awaitable[Any]]) -> Any:
    async def go() -> Any:
        client = aioclient.InferenceServerClient(server.http_url)
        try:
            return await call(client)
        finally:
            await client.close()

    return asyncio.run(go())


def test_every_endpoint_of_the_aio_client(server: RunningServer) -> None:
    assert run(server, lambda c: c.is_server_live()) is True
    assert run(server, lambda c: c.is_server_ready()) is True
    assert run(server, lambda c: c.is_model_ready("simple")) is True
    assert run(server, lambda c: c.get_server_metadata())["name"] == "triton"
    assert run(server, lambda c: c.get_model_metadata("simple"))["name"] == "simple"
    assert run(server, lambda c: c.get_model_config("simple"))["name"] == "simple"
    assert {"name": "simple", "version": "1", "state": "READY"} in run(
        server, lambda c: c.get_model_repository_index()
    )
    assert "model_stats" in run(server, lambda c: c.get_inference_statistics())
    run(server, lambda c: c.get_trace_settings())
    run(server, lambda c: c.update_trace_settings())
    assert run(server, lambda c: c.get_system_shared_memory_status()) == []
    assert run(server, lambda c: c.get_cuda_shared_memory_status()) == []
    run(server, lambda c: c.unregister_system_shared_memory())
    run(server, lambda c: c.unregister_cuda_shared_memory())
    # Errors are read too: their bodies must not come compressed either.
    for failing in (
        lambda c: c.load_model("simple"),
        lambda c: c.register_system_shared_memory("", "", 0),
        lambda c: c.register_cuda_shared_memory("", b"", 0, 0),
    ):
        with pytest.raises(InferenceServerException) as caught:
            run(server, failing)
        assert caught.value.message()  # the server's message, read as JSON


def test_aio_inference_with_compressed_answers(server: RunningServer) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [aioclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    for algorithm in (None, "gzip", "deflate"):
        result = run(
            server, lambda c, how=algorithm: c.infer("simple", inputs, response_compression_algorithm=how)
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)


def test_only_inference_answers_are_compressed(server: RunningServer) -> None:
    base = f"http://{server.http_url}"
    gzip = {"Accept-Encoding": "gzip"}
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
                       {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]}  # fmt: skip
    answered = requests.post(f"{base}/v2/models/simple/infer", json=body, headers=gzip, timeout=10)
    assert answered.status_code == 200 and answered.headers["Content-Encoding"] == "gzip"
    for method, path in (
        ("GET", "/v2"),
        ("GET", "/v2/models/simple"),
        ("GET", "/v2/models/simple/config"),
        ("GET", "/v2/models/stats"),
        ("POST", "/v2/repository/index"),
        ("GET", "/v2/systemsharedmemory/status"),
        ("GET", "/v2/nope"),  # 404
    ):
        r = requests.request(method, base + path, headers=gzip, timeout=10)
        assert "Content-Encoding" not in r.headers, (path, r.headers)
    refused = requests.post(f"{base}/v2/models/simple/infer", json={"inputs": []}, headers=gzip, timeout=10)
    assert refused.status_code == 400 and "Content-Encoding" not in refused.headers
    assert "error" in refused.json()

"""The system shared memory extension end to end: a server started with --allow-client-shm=true, driven with
tritonclient.utils.shared_memory and tritonclient HTTP and gRPC, as Triton's L0_shared_memory does."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, deserialize_bytes_tensor, serialize_byte_tensor

from e2e.clients import poll
from e2e.server_process import RunningServer, running_server
from modelhost.host.devices import gpu_count

PROTOCOLS = ["http", "grpc"]
OWN_PREFIX = "mh_test_pb_region_"  # the python backend's prefix this server is configured with
A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.int32)


# "held": simple's sums, as a python model that answers only once the test creates <gate>/release, after it
# created <gate>/started: a request that is surely under way, however fast or slow the machine.
HELD_CONFIG = """
name: "held"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
parameters { key: "gate" value: { string_value: "%s" } }
"""
HELD_MODEL = """
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.gate = json.loads(args["model_config"])["parameters"]["gate"]["string_value"]

    def execute(self, requests):
        open(os.path.join(self.gate, "started"), "w").close()
        deadline = time.monotonic() + 300
        while not os.path.exists(os.path.join(self.gate, "release")) and time.monotonic() < deadline:
            time.sleep(0.02)
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            outputs = [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gate")


@pytest.fixture(scope="module")
def held_repository(tmp_path_factory: pytest.TempPathFactory, gate: Path) -> Path:
    repo = tmp_path_factory.mktemp("held_repo")
    (repo / "held" / "1").mkdir(parents=True)
    (repo / "held" / "config.pbtxt").write_text(HELD_CONFIG % gate)
    (repo / "held" / "1" / "model.py").write_text(HELD_MODEL)
    return repo


@pytest.fixture(scope="module")
def server(
    main_repository: Path,
    held_repository: Path,
    tmp_path_factory: pytest.TempPathFactory,
    frontend_processes: int,
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("log") / "server.log"
    with running_server(
        [main_repository, held_repository],
        log,
        "--allow-client-shm=true",
        f"--backend-config=python,shm-region-prefix-name={OWN_PREFIX}",
    ) as running:
        yield running


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def client(server: RunningServer, protocol: str) -> Iterator[Any]:
    c: Any = (
        httpclient.InferenceServerClient(server.http_url)
        if protocol == "http"
        else grpcclient.InferenceServerClient(server.grpc_url)
    )
    yield c
    c.unregister_system_shared_memory()
    c.close()


class Regions:
    """Shared-memory objects made for one test (unique keys: other runs may share /dev/shm), destroyed after."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:8]
        self.handles: list[Any] = []

    def key(self, name: str) -> str:
        return f"/mh_shm_test_{self.tag}_{name}"

    def create(self, name: str, byte_size: int, data: list[np.ndarray] | None = None) -> Any:
        handle = shm.create_shared_memory_region(name, self.key(name), byte_size)
        self.handles.append(handle)
        if data:
            shm.set_shared_memory_region(handle, data)
        return handle

    def destroy(self) -> None:
        for handle in self.handles:
            shm.destroy_shared_memory_region(handle)


@pytest.fixture
def regions() -> Iterator[Regions]:
    made = Regions()
    yield made
    made.destroy()


def lib(protocol: str) -> Any:
    return httpclient if protocol == "http" else grpcclient


def status_names(client: Any, protocol: str, name: str = "") -> list[str]:
    status = client.get_system_shared_memory_status(name)
    if protocol == "http":
        return sorted(r["name"] for r in status)
    return sorted(status.regions)


def expect(fn: Callable[[], Any], protocol: str, http: str, grpc: str, message: str) -> None:
    with pytest.raises(InferenceServerException) as e:
        fn()
    assert message in str(e.value.message())
    assert e.value.status() == (http if protocol == "http" else f"StatusCode.{grpc}")


def simple_request(protocol: str, in1: tuple[str, int, int] | None = None) -> tuple[list[Any], list[Any]]:
    """INPUT0 from region "in0", INPUT1 from `in1` (region, byte size, offset) or sent normally; outputs into
    "out0" and "out1"."""
    m = lib(protocol)
    inputs = [m.InferInput("INPUT0", [1, 16], "INT32"), m.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory("in0", 64)
    if in1 is None:
        inputs[1].set_data_from_numpy(B)
    else:
        inputs[1].set_shared_memory(in1[0], in1[1], offset=in1[2])
    outputs = [m.InferRequestedOutput("OUTPUT0"), m.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory("out0", 64)
    outputs[1].set_shared_memory("out1", 64)
    return inputs, outputs


def setup_simple(client: Any, regions: Regions) -> tuple[Any, Any]:
    regions.create("in0", 64, [A])
    out0 = regions.create("out0", 64)
    out1 = regions.create("out1", 64)
    for name in ("in0", "out0", "out1"):
        client.register_system_shared_memory(name, regions.key(name), 64)
    return out0, out1


# --- Registration


def test_register_status_unregister(client: Any, protocol: str, regions: Regions) -> None:
    regions.create("a", 64)
    regions.create("b", 128)
    client.register_system_shared_memory("a", regions.key("a"), 64)
    client.register_system_shared_memory("b", regions.key("b"), 32, offset=16)
    assert status_names(client, protocol) == ["a", "b"]
    if protocol == "http":
        assert client.get_system_shared_memory_status("b") == [
            {"name": "b", "key": regions.key("b"), "offset": 16, "byte_size": 32}
        ]
    else:
        region = client.get_system_shared_memory_status("b").regions["b"]
        assert (region.name, region.key, region.offset, region.byte_size) == ("b", regions.key("b"), 16, 32)
    client.unregister_system_shared_memory("a")
    assert status_names(client, protocol) == ["b"]
    client.unregister_system_shared_memory("never_registered")  # no error, as in Triton
    client.unregister_system_shared_memory()
    assert status_names(client, protocol) == []


def test_server_metadata_lists_the_extension(client: Any, protocol: str) -> None:
    meta = client.get_server_metadata()
    extensions = meta["extensions"] if protocol == "http" else list(meta.extensions)
    assert "system_shared_memory" in extensions


@pytest.mark.parametrize(
    ("case", "http", "grpc", "message"),
    [
        ("already registered", "400", "ALREADY_EXISTS", "shared memory region 'r' already in manager"),
        ("unknown key", "400", "INVALID_ARGUMENT", "Unable to open shared memory region: '/mh_shm_test_nope"),
        (
            "key with a slash",
            "400",
            "INVALID_ARGUMENT",
            "Unable to open shared memory region: '/../etc/passwd'",
        ),
        (
            "too large",
            "400",
            "INVALID_ARGUMENT",
            "failed to register shared memory region 'r2': invalid args",
        ),
        (
            "offset too large",
            "400",
            "INVALID_ARGUMENT",
            "failed to register shared memory region 'r2': invalid args",
        ),
        (
            "triton's reserved prefix",
            "400",
            "INVALID_ARGUMENT",
            "cannot register shared memory region 'r2' with key 'triton_python_backend_shm_region__x' as the key "
            "contains the reserved prefix 'triton_python_backend_shm_region_'",
        ),
        (
            "the configured python backend prefix",
            "400",
            "INVALID_ARGUMENT",
            f"cannot register shared memory region 'r2' with key '/{OWN_PREFIX}1' as the key contains the reserved "
            f"prefix '{OWN_PREFIX}'",
        ),
    ],
)
def test_bad_registrations(
    client: Any, protocol: str, regions: Regions, case: str, http: str, grpc: str, message: str
) -> None:
    regions.create("r", 64)
    client.register_system_shared_memory("r", regions.key("r"), 64)
    register = client.register_system_shared_memory
    attempts: dict[str, Callable[[], Any]] = {
        "already registered": lambda: register("r", regions.key("r"), 64),
        "unknown key": lambda: register("r2", "/mh_shm_test_nope", 64),
        "key with a slash": lambda: register("r2", "/../etc/passwd", 64),
        "too large": lambda: register("r2", regions.key("r"), 65),
        "offset too large": lambda: register("r2", regions.key("r"), 1, offset=64),
        "triton's reserved prefix": lambda: register("r2", "triton_python_backend_shm_region__x", 64),
        "the configured python backend prefix": lambda: register("r2", f"/{OWN_PREFIX}1", 64),
    }
    expect(attempts[case], protocol, http, grpc, message)
    assert status_names(client, protocol) == ["r"]
    assert client.is_server_live()


def test_status_of_an_unknown_region(client: Any, protocol: str) -> None:
    expect(
        lambda: client.get_system_shared_memory_status("nope"),
        protocol,
        "404",
        "NOT_FOUND",
        "Unable to find system shared memory region: 'nope'",
    )


def test_http_register_body_errors(server: RunningServer, regions: Regions) -> None:
    base = f"http://{server.http_url}/v2/systemsharedmemory"
    regions.create("r", 64)
    cases = [
        ("/region/r/register", {"byte_size": 8}, "Shared memory register request has no 'key' field"),
        (
            "/region/r/register",
            {"key": regions.key("r")},
            "Shared memory register request has no 'byte_size' field",
        ),
        ("/region/r/register", {"key": regions.key("r"), "byte_size": -1}, "Unable to parse 'byte_size'"),
        ("/register", {"key": regions.key("r"), "byte_size": 8}, "'region name' is necessary to register"),
    ]
    for path, body, message in cases:
        r = requests.post(base + path, json=body, timeout=10)
        assert r.status_code == 400, path
        assert message in r.json()["error"]
    assert requests.get(f"{base}/region/r/register", timeout=10).status_code == 405
    assert requests.post(f"{base}/status", timeout=10).status_code == 405


@pytest.mark.skipif(gpu_count() > 0, reason="checks the refusal on a host without a GPU")
def test_cuda_shared_memory_is_refused_without_a_gpu(
    server: RunningServer, client: Any, protocol: str, regions: Regions
) -> None:
    status = client.get_cuda_shared_memory_status()
    assert (status if protocol == "http" else list(status.regions)) == []
    region = f"cuda_{protocol}"
    expect(
        lambda: client.register_cuda_shared_memory(region, b"\0" * 64, 0, 64),
        protocol,
        "501",
        "UNIMPLEMENTED",
        "CUDA shared memory requires a GPU, and this server has none",
    )
    client.unregister_cuda_shared_memory()
    # One namespace for both kinds: a system region is no CUDA region, and the CUDA endpoints say so.
    regions.create("sys", 64)
    client.register_system_shared_memory("sys", regions.key("sys"), 64)
    expect(
        lambda: client.get_cuda_shared_memory_status("sys"),
        protocol,
        "404",
        "NOT_FOUND",
        "The region named 'sys' is registered as system shared memory, not CUDA shared memory",
    )
    client.unregister_cuda_shared_memory("sys")  # the CUDA endpoint leaves a system region alone
    kept = client.get_system_shared_memory_status("sys")
    assert len(kept if protocol == "http" else kept.regions) == 1
    # Logged once, at the level of every other refused request (info), not as a server error.
    deadline = time.monotonic() + 10
    while not (
        lines := [ln for ln in server.log().splitlines() if "CUDA shared memory" in ln and region in ln]
    ):
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.05)
    assert len(lines) == 1 and lines[0].startswith("I"), lines
    extensions = requests.get(f"http://{server.http_url}/v2", timeout=10).json()["extensions"]
    assert "system_shared_memory" in extensions and "cuda_shared_memory" not in extensions


# --- Inference


def test_inputs_and_outputs_in_shared_memory(client: Any, protocol: str, regions: Regions) -> None:
    out0, out1 = setup_simple(client, regions)
    regions.create("in1", 128, [np.zeros(16, np.int32), B])
    client.register_system_shared_memory("in1", regions.key("in1"), 128)
    inputs, outputs = simple_request(protocol, ("in1", 64, 64))
    result = client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out0, np.int32, [1, 16]), A + B)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out1, np.int32, [1, 16]), A - B)
    # The response carries the outputs' metadata, not their data (as Triton's: as_numpy() cannot read them).
    output = result.get_output("OUTPUT0")
    if protocol == "http":
        assert output == {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]}
    else:
        assert (output.datatype, list(output.shape)) == ("INT32", [1, 16])
        assert list(result.get_response().raw_output_contents) == [b"", b""]


def test_a_region_in_use_cannot_be_unregistered(
    server: RunningServer, client: Any, protocol: str, regions: Regions, gate: Path
) -> None:
    """As Triton (L0_shared_memory's unregister-during-inference tests): while a request uses regions, they
    stay registered; unregistering all of them unregisters the others and names those in use. 409 /
    FAILED_PRECONDITION where Triton answers 500 / INTERNAL, same words."""
    out0, out1 = setup_simple(client, regions)
    regions.create("in1", 64, [B])
    regions.create("idle", 64)
    for name in ("in1", "idle"):
        client.register_system_shared_memory(name, regions.key(name), 64)
    for name in ("started", "release"):
        (gate / name).unlink(missing_ok=True)
    inputs, outputs = simple_request(protocol, ("in1", 64, 0))

    def infer() -> Any:
        url = server.http_url if protocol == "http" else server.grpc_url
        own = (
            httpclient.InferenceServerClient(url)
            if protocol == "http"
            else grpcclient.InferenceServerClient(url)
        )
        try:
            return own.infer("held", inputs, outputs=outputs)
        finally:
            own.close()

    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(infer)
        try:
            poll(lambda: (gate / "started").exists() or answer.done(), 120, "the request reached the model")
            assert not answer.done(), answer.result()
            for name in ("in0", "in1", "out0", "out1"):
                expect(
                    partial(client.unregister_system_shared_memory, name),
                    protocol,
                    "409",
                    "FAILED_PRECONDITION",
                    f"Cannot unregister shared memory region '{name}', it is currently in use.",
                )
            expect(
                lambda: client.unregister_system_shared_memory(),
                protocol,
                "409",
                "FAILED_PRECONDITION",
                "Failed to unregister the following system shared memory regions: in0 ,in1 ,out0 ,out1 ,",
            )
            assert status_names(client, protocol) == ["in0", "in1", "out0", "out1"]  # "idle" went
        finally:
            (gate / "release").touch()
        answer.result(timeout=120)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out0, np.int32, [1, 16]), A + B)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out1, np.int32, [1, 16]), A - B)
    client.unregister_system_shared_memory()  # the request is done: nothing in use
    assert status_names(client, protocol) == []


def test_a_shared_memory_input_with_a_plain_one(client: Any, protocol: str, regions: Regions) -> None:
    setup_simple(client, regions)
    m = lib(protocol)
    inputs, _ = simple_request(protocol)
    outputs = [m.InferRequestedOutput("OUTPUT0"), m.InferRequestedOutput("OUTPUT1")]
    outputs[1].set_shared_memory("out1", 64)
    result = client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)


def test_http_json_outputs_next_to_shared_memory_ones(server: RunningServer, regions: Regions) -> None:
    c = httpclient.InferenceServerClient(server.http_url)
    try:
        out0, _ = setup_simple(c, regions)
        body = {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1, 16],
                    "datatype": "INT32",
                    "parameters": {"shared_memory_region": "in0", "shared_memory_byte_size": 64},
                },
                {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": B.ravel().tolist()},
            ],
            "outputs": [
                {
                    "name": "OUTPUT0",
                    "parameters": {"shared_memory_region": "out0", "shared_memory_byte_size": 64},
                },
                {"name": "OUTPUT1", "parameters": {"binary_data": False}},
            ],
        }
        r = requests.post(f"http://{server.http_url}/v2/models/simple/infer", json=body, timeout=10)
        assert r.status_code == 200
        assert r.json()["outputs"] == [
            {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]},
            {"name": "OUTPUT1", "datatype": "INT32", "shape": [1, 16], "data": (A - B).ravel().tolist()},
        ]
        np.testing.assert_array_equal(shm.get_contents_as_numpy(out0, np.int32, [1, 16]), A + B)
    finally:
        c.unregister_system_shared_memory()
        c.close()


def test_bytes_in_and_out(client: Any, protocol: str, regions: Regions) -> None:
    values = np.array([b"ab", b"", "Wörld".encode()], dtype=object)
    serialized = serialize_byte_tensor(values)
    size = len(serialized.item())
    regions.create("s_in", size, [serialized])
    out = regions.create("s_out", 64)
    client.register_system_shared_memory("s_in", regions.key("s_in"), size)
    client.register_system_shared_memory("s_out", regions.key("s_out"), 64)
    m = lib(protocol)
    inp = m.InferInput("INPUT0", [1, 3], "BYTES")
    inp.set_shared_memory("s_in", size)
    requested = m.InferRequestedOutput("OUTPUT0")
    requested.set_shared_memory("s_out", 64)
    client.infer("identity_bytes", [inp], outputs=[requested])
    raw = shm.get_contents_as_numpy(out, np.uint8, [size]).tobytes()
    np.testing.assert_array_equal(deserialize_bytes_tensor(raw), values)


def test_an_object_unlinked_by_the_client_stays_mapped(client: Any, protocol: str, regions: Regions) -> None:
    setup_simple(client, regions)
    inputs, _ = simple_request(protocol)
    shm.destroy_shared_memory_region(regions.handles.pop(0))  # unmaps and unlinks "in0"
    m = lib(protocol)
    result = client.infer("simple", inputs, outputs=[m.InferRequestedOutput("OUTPUT0")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)


def test_an_object_shrunk_by_the_client_is_refused_not_a_crash(
    client: Any, protocol: str, regions: Regions
) -> None:
    setup_simple(client, regions)
    with open(f"/dev/shm{regions.key('in0')}", "r+b") as f:
        os.ftruncate(f.fileno(), 8)
    inputs, outputs = simple_request(protocol)
    expect(
        lambda: client.infer("simple", inputs, outputs=outputs),
        protocol,
        "400",
        "INVALID_ARGUMENT",
        "shared memory region 'in0' no longer fits its object",
    )
    with open(f"/dev/shm{regions.key('out0')}", "r+b") as f:
        os.ftruncate(f.fileno(), 0)
    shm.set_shared_memory_region(regions.handles[0], [A[0, :2]])  # the client's own mapping is still 64 bytes
    with open(f"/dev/shm{regions.key('in0')}", "r+b") as f:
        os.ftruncate(f.fileno(), 64)
    expect(
        lambda: client.infer("simple", inputs, outputs=outputs),
        protocol,
        "400",
        "INVALID_ARGUMENT",
        "shared memory region 'out0' no longer fits its object",
    )
    assert client.is_server_live()


def _bad_request(protocol: str, case: str) -> tuple[list[Any], list[Any]]:
    inputs, outputs = simple_request(protocol)
    if case == "unknown region":
        inputs[1].set_shared_memory("nope", 64)
    elif case == "offset out of bounds":
        outputs[0].set_shared_memory("out0", 64, offset=64)
    elif case == "offset + byte size out of bounds":
        outputs[0].set_shared_memory("out0", 64, offset=60)
    elif case == "byte size too small for the shape":
        inputs[1].set_shared_memory("in0", 60)
    elif case == "byte size too large for the shape":
        inputs[1].set_shared_memory("big", 128)
    elif case == "output region too small":
        outputs[0].set_shared_memory("out0", 32)
    return inputs, outputs


BAD_INFER = {
    "unknown region": ("404", "NOT_FOUND", "Unable to find shared memory region: 'nope'"),
    "offset out of bounds": ("400", "INVALID_ARGUMENT", "Invalid offset for shared memory region: 'out0'"),
    "offset + byte size out of bounds": (
        "400",
        "INVALID_ARGUMENT",
        "Invalid offset + byte size for shared memory region: 'out0'",
    ),
    "byte size too small for the shape": (
        "400",
        "INVALID_ARGUMENT",
        "input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 60",
    ),
    "byte size too large for the shape": (
        "400",
        "INVALID_ARGUMENT",
        "input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 128",
    ),
    "output region too small": (
        "400",
        "INVALID_ARGUMENT",
        "shared memory size specified with the request for output 'OUTPUT0' (32 bytes) should be at least 64 "
        "bytes to hold the results",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INFER))
def test_bad_inference_requests(client: Any, protocol: str, regions: Regions, case: str) -> None:
    setup_simple(client, regions)
    regions.create("big", 128)
    client.register_system_shared_memory("big", regions.key("big"), 128)
    inputs, outputs = _bad_request(protocol, case)
    http, grpc, message = BAD_INFER[case]
    expect(lambda: client.infer("simple", inputs, outputs=outputs), protocol, http, grpc, message)
    # The server goes on serving, the regions still registered.
    inputs, outputs = simple_request(protocol)
    client.infer("simple", inputs, outputs=outputs)
    assert status_names(client, protocol) == ["big", "in0", "out0", "out1"]


def test_http_binary_data_and_shared_memory_conflict(server: RunningServer, regions: Regions) -> None:
    c = httpclient.InferenceServerClient(server.http_url)
    try:
        setup_simple(c, regions)
        body = {
            "inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": A.ravel().tolist()}],
            "outputs": [
                {
                    "name": "OUTPUT0",
                    "parameters": {
                        "shared_memory_region": "out0",
                        "shared_memory_byte_size": 64,
                        "binary_data": True,
                    },
                }
            ],
        }
        r = requests.post(f"http://{server.http_url}/v2/models/simple/infer", json=body, timeout=10)
        assert r.status_code == 400
        assert r.json() == {"error": "Output can't set both 'shared_memory_region' and 'binary_data'"}
        body["outputs"][0]["parameters"] = {  # type: ignore[index]
            "shared_memory_region": "out0",
            "shared_memory_byte_size": 64,
            "classification": 2,
        }
        r = requests.post(f"http://{server.http_url}/v2/models/simple/infer", json=body, timeout=10)
        assert r.status_code == 400
        assert r.json() == {"error": "Output can't set both 'shared_memory_region' and 'classification'"}
        body["outputs"][0]["parameters"] = {"shared_memory_region": "out0"}  # type: ignore[index]
        r = requests.post(f"http://{server.http_url}/v2/models/simple/infer", json=body, timeout=10)
        assert r.status_code == 400
        assert "'shared_memory_byte_size' must be specified along with 'shared_memory_region'" in r.text
    finally:
        c.unregister_system_shared_memory()
        c.close()


def test_grpc_shared_memory_input_with_contents(server: RunningServer, regions: Regions) -> None:
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        setup_simple(c, regions)
        msg = service_pb2.ModelInferRequest(model_name="simple")
        tensor = msg.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
        tensor.parameters["shared_memory_region"].string_param = "in0"
        tensor.parameters["shared_memory_byte_size"].int64_param = 64
        tensor.contents.int_contents.extend(range(16))
        with grpc.insecure_channel(server.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.RpcError) as e:
                stub.ModelInfer(msg, timeout=10)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert e.value.details() == (
                "unexpected 'content' provided when using shared memory for input tensor 'INPUT0' for model 'simple'"
            )
            tensor.ClearField("contents")
            out = msg.outputs.add(name="OUTPUT0")
            out.parameters["shared_memory_region"].string_param = "out0"
            out.parameters["shared_memory_byte_size"].int64_param = 64
            out.parameters["classification"].int64_param = 2
            with pytest.raises(grpc.RpcError) as e:
                stub.ModelInfer(msg, timeout=10)
            assert e.value.details() == "output can't set both 'shared_memory_region' and 'classification'"
            del msg.outputs[:]
            del tensor.parameters["shared_memory_byte_size"]
            with pytest.raises(grpc.RpcError) as e:
                stub.ModelInfer(msg, timeout=10)
            assert e.value.details() == (
                "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for "
                "tensor 'INPUT0'"
            )
    finally:
        c.unregister_system_shared_memory()
        c.close()


def test_grpc_stream_with_shared_memory(server: RunningServer, regions: Regions) -> None:
    c = grpcclient.InferenceServerClient(server.grpc_url)
    results: list[Any] = []
    try:
        out0, _ = setup_simple(c, regions)
        inputs, outputs = simple_request("grpc")
        c.start_stream(callback=lambda result, error: results.append(error or result))
        c.async_stream_infer("simple", inputs, outputs=outputs)
        c.stop_stream()
        assert len(results) == 1 and not isinstance(results[0], Exception)
        np.testing.assert_array_equal(shm.get_contents_as_numpy(out0, np.int32, [1, 16]), A + B)
    finally:
        c.unregister_system_shared_memory()
        c.close()


# --- With the flag off (the default)


@pytest.fixture(scope="module")
def server_off(
    main_repository: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("log") / "server_off.log"
    with running_server([main_repository], log) as running:
        yield running


DISABLED = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_disabled_by_default(server_off: RunningServer, protocol: str, regions: Regions) -> None:
    c: Any = (
        httpclient.InferenceServerClient(server_off.http_url)
        if protocol == "http"
        else grpcclient.InferenceServerClient(server_off.grpc_url)
    )
    try:
        regions.create("in0", 64, [A])
        inputs, outputs = simple_request(protocol)
        for attempt in (
            lambda: c.register_system_shared_memory("in0", regions.key("in0"), 64),
            lambda: c.unregister_system_shared_memory(),
            lambda: c.infer("simple", inputs, outputs=outputs),
        ):
            expect(attempt, protocol, "501", "UNIMPLEMENTED", DISABLED)
        assert status_names(c, protocol) == []  # status still answers
        meta = c.get_server_metadata()
        extensions = meta["extensions"] if protocol == "http" else list(meta.extensions)
        assert "system_shared_memory" not in extensions
    finally:
        c.close()

"""docs/compatibility.md agrees with the code and with a running server.

The page is written from the code (`modelhost compatibility`); these tests check that the file is current, that
every endpoint and gRPC method answers as its row says, that the extensions and metric families a server shows
are those marked supported, and that each hand-stated row is pinned by a flag's status or a test that exists.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2

from e2e import server_process
from e2e.models import copy_examples
from e2e.server_process import RunningServer, running_server
from modelhost.backends.registry import supported as served_backends
from modelhost.cli.flags import FLAGS, FLAGS_BY_NAME, SECTIONS, Status
from modelhost.compatibility.page import (
    backend_items,
    config_items,
    extension_items,
    grpc_items,
    grpc_methods,
    markdown,
    metric_items,
)
from modelhost.compatibility.surface import FEATURES, HTTP_ENDPOINTS, PYTHON_API, Item, State

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "compatibility.md"
SERVED = (State.SUPPORTED, State.PARTLY)
MISSING = (State.NOT_YET, State.NOT_PLANNED)


@pytest.fixture(scope="module", autouse=True)
def frontend_processes() -> Iterator[int]:
    """What the page states does not depend on the frontend mode: one mode, one server."""
    server_process.frontend_processes = 0
    yield 0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("repo")
    copy_examples(repo, "simple", "simple_string")
    cached = repo / "simple_cached"
    (cached / "1").mkdir(parents=True)
    (cached / "1" / "model.onnx").write_bytes((repo / "simple" / "1" / "model.onnx").read_bytes())
    config = (repo / "simple" / "config.pbtxt").read_text().replace('name: "simple"', 'name: "simple_cached"')
    (cached / "config.pbtxt").write_text(config + "\nresponse_cache { enable: true }\n")
    log = tmp_path_factory.mktemp("log") / "server.log"
    with running_server(
        [repo],
        log,
        "--model-control-mode=explicit",
        "--load-model=simple",
        "--load-model=simple_string",
        "--load-model=simple_cached",
        "--allow-client-shm=true",
        "--cache-config=local,size=1048576",
        "--metrics-config=summary_latencies=true",
        "--metrics-config=histogram_latencies=true",
    ) as running:
        yield running


# --- The page and the code


def test_the_page_is_current() -> None:
    assert PAGE.read_text(encoding="utf-8") == markdown(FLAGS, SECTIONS), (
        "docs/compatibility.md is stale: regenerate it with `modelhost compatibility > docs/compatibility.md`"
    )


def test_backends_are_served_exactly_where_the_page_says() -> None:
    served = set(served_backends())
    for name, _, item in backend_items():
        if (
            name == "python-based backends"
        ):  # a kind of backend, each named by its folder: the python backend's
            assert item.state is State.SUPPORTED and "python" in served
            continue
        assert (item.state in SERVED) == (name in served), name
    assert served <= {name for name, _, _ in backend_items()}


def _hand_stated() -> list[Item]:
    return [item for _, _, item in backend_items()] + [item for item, _ in PYTHON_API] + list(FEATURES)


def test_rows_pinned_by_a_flag_agree_with_its_status() -> None:
    for item in _hand_stated():
        if not item.flag:
            continue
        status = FLAGS_BY_NAME[item.flag].status
        if item.state is State.NOT_YET:
            assert status is Status.REFUSED, item
        elif item.state is State.NOT_PLANNED:
            assert status in (Status.IGNORED, Status.REFUSED), item
        else:
            assert status is Status.HONOURED, item


def test_rows_pinned_by_a_test_name_one_that_exists() -> None:
    for item in _hand_stated():
        if item.test:
            path, _, name = item.test.partition("::")
            assert re.search(rf"^(async )?def {name}\(", (ROOT / path).read_text(), re.M), item.test


def test_every_supported_feature_is_pinned() -> None:
    for item in FEATURES:
        if item.state in SERVED:
            assert item.flag or item.test, f"{item.name}: name the flag or the test that shows it"
        if item.state is State.UNVERIFIED:
            # The test that shows it on a GPU, which scripts/gpu_check.sh runs: marked gpu.
            path, _, _ = item.test.partition("::")
            assert path and "pytest.mark.gpu" in (ROOT / path).read_text(), item.name


def test_linked_pages_exist() -> None:
    items = _hand_stated() + list(HTTP_ENDPOINTS) + grpc_items() + extension_items() + metric_items()
    for item in items + config_items():
        if item.doc:
            assert (ROOT / "docs" / item.doc).is_file(), item


def test_python_backend_names_exist() -> None:
    pb_utils = importlib.import_module("modelhost.backends.python.pb_utils")
    for item, symbol in PYTHON_API:
        if symbol and item.state in (*SERVED, State.UNVERIFIED):  # "": a config parameter, not a name
            target: Any = pb_utils
            for part in symbol.split("."):
                target = getattr(target, part)  # AttributeError: the page claims a name pb_utils lacks


# --- A running server


def test_http_endpoints_answer_as_the_page_says(server: RunningServer) -> None:
    ports = {"http": server.http_port, "metrics": server.metrics_port}
    for endpoint in HTTP_ENDPOINTS:
        assert endpoint.probes, endpoint.name
        for probe in endpoint.probes:
            url = f"http://127.0.0.1:{ports[probe.port]}{probe.path}"
            r = requests.request(probe.method, url, json=probe.body, timeout=30)
            assert r.status_code == probe.status, (endpoint.name, probe, r.status_code, r.text[:300])
            if endpoint.state in SERVED and probe.status >= 400:
                assert "error" in r.json(), (endpoint.name, r.text)


def test_grpc_methods_answer_as_the_page_says(server: RunningServer) -> None:
    service = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    states = {item.name: item.state for item in grpc_items()}
    with grpc.insecure_channel(server.grpc_url) as channel:
        for method in service.methods:
            request = _message(method.input_type)
            response = _message(method.output_type)
            path = f"/inference.GRPCInferenceService/{method.name}"
            code = _call(channel, path, request, response, streaming=method.client_streaming)
            if states[method.name] in SERVED:
                assert code is not grpc.StatusCode.UNIMPLEMENTED, method.name
            else:
                assert code is grpc.StatusCode.UNIMPLEMENTED, method.name
        from grpc_health.v1 import health_pb2  # type: ignore[import-untyped]

        check = _call(
            channel,
            "/grpc.health.v1.Health/Check",
            health_pb2.HealthCheckRequest(),
            health_pb2.HealthCheckResponse(),
        )
        watch = _call(
            channel,
            "/grpc.health.v1.Health/Watch",
            health_pb2.HealthCheckRequest(),
            health_pb2.HealthCheckResponse(),
            server_streaming=True,
        )
    assert (check is grpc.StatusCode.OK) == (states["grpc.health.v1.Health/Check"] in SERVED)
    assert (watch is grpc.StatusCode.UNIMPLEMENTED) == (states["grpc.health.v1.Health/Watch"] in MISSING)
    assert sorted(grpc_methods()) == sorted(m.name for m in service.methods)


def _message(descriptor: Any) -> Any:
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(descriptor)()


def _call(
    channel: grpc.Channel,
    path: str,
    request: Any,
    response: Any,
    *,
    streaming: bool = False,
    server_streaming: bool = False,
) -> grpc.StatusCode:
    serialize = type(request).SerializeToString
    deserialize = type(response).FromString
    try:
        if streaming:
            call = channel.stream_stream(
                path, request_serializer=serialize, response_deserializer=deserialize
            )
            for _ in call(iter([]), timeout=10):
                pass
        elif server_streaming:
            stream = channel.unary_stream(
                path, request_serializer=serialize, response_deserializer=deserialize
            )
            for _ in stream(request, timeout=2):
                break
        else:
            channel.unary_unary(path, request_serializer=serialize, response_deserializer=deserialize)(
                request, timeout=10
            )
    except grpc.RpcError as e:
        return e.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def test_server_metadata_lists_the_supported_extensions(server: RunningServer) -> None:
    listed = requests.get(f"http://{server.http_url}/v2", timeout=10).json()["extensions"]
    assert listed == [item.name for item in extension_items() if item.state in SERVED]
    grpc_listed = grpcclient.InferenceServerClient(server.grpc_url).get_server_metadata().extensions
    assert list(grpc_listed) == listed


def test_metric_families_marked_supported_are_exported(server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.zeros((1, 16), dtype=np.int32))
    for model in ("simple", "simple_cached", "simple_cached"):
        client.infer(model, inputs)
    text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    exported = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    for item in metric_items():
        if item.name.startswith(("nv_gpu_", "nv_energy")):
            continue  # need a GPU: tests/observability/test_metrics.py renders them from a stand-in NVML
        assert (item.name in exported) == (item.state in SERVED), item.name

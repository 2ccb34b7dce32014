"""The KServe manifests (deploy/kserve/): valid against KServe's CRDs, runnable as KServe runs them, and served.

The runtime's container args go through modelhost's own parser and then start a real server, with the model
repository and ports moved to a temporary copy and free ports, so that the endpoints KServe and its users rely on
are checked on what the manifest actually starts.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from deploy.kube_schemas import load_documents, validate_manifest
from e2e.clients import Api
from e2e.models import copy_examples
from e2e.server_process import RunningServer, free_ports
from modelhost.backends import registry
from modelhost.cli.serve_args import parse_serve_args

ROOT = Path(__file__).resolve().parents[2]
KSERVE_DIR = ROOT / "deploy" / "kserve"
DOC = ROOT / "docs" / "deploy" / "kserve.md"
# KServe's own Triton runtime (v0.20.0), kept as published: see deploy/schemas/README.md.
TRITON_RUNTIME = ROOT / "deploy" / "schemas" / "reference" / "kserve-tritonserver.yaml"

# What KServe expects of a v2 runtime: HTTP on 8080 (KServe's InferenceServiceDefaultHttpPort, where its Service
# and Knative route when the runtime declares no port) and gRPC on 9000 (its Triton runtime's and docs' h2c port).
KSERVE_HTTP_PORT = 8080
KSERVE_GRPC_PORT = 9000

# KServe's model format name -> the modelhost backend that serves it (None: a model repository of any backend),
# and the requirement (pyproject.toml) whose major version the format's highest listed version must be.
FORMATS: dict[str, tuple[str | None, str | None]] = {
    "triton": (None, None),
    "onnx": ("onnxruntime", "onnxruntime"),
    "pytorch": ("pytorch", "torch"),
    "tensorrt": ("tensorrt", "tensorrt"),
    "tensorflow": ("tensorflow", "tensorflow-cpu"),
    "openvino": ("openvino", None),  # versioned by IR version, not by the openvino package's
    "xgboost": ("fil", "xgboost-cpu"),
    "lightgbm": ("fil", "lightgbm"),
}


def _kserve_documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(KSERVE_DIR.glob("*.yaml")):
        found += [(path.name, doc) for doc in load_documents(path.read_text())]
    return found


def _doc_blocks() -> list[tuple[str, dict[str, Any]]]:
    """The Kubernetes objects in docs/deploy/kserve.md's YAML blocks."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)
    return [
        ("kserve.md", doc)
        for block in blocks
        for doc in load_documents(block)
        if isinstance(doc, dict) and "apiVersion" in doc
    ]


DOCUMENTS = _kserve_documents()


def _the(kind: str, file: str) -> dict[str, Any]:
    (doc,) = [doc for name, doc in DOCUMENTS if name == file and doc["kind"] == kind]
    return doc


CLUSTER_RUNTIME = _the("ClusterServingRuntime", "clusterservingruntime.yaml")
CONTAINER = CLUSTER_RUNTIME["spec"]["containers"][0]
ARGS: list[str] = CONTAINER["args"]
OPTIONS = parse_serve_args(ARGS)
INFERENCE_SERVICES = [(name, doc) for name, doc in DOCUMENTS if doc["kind"] == "InferenceService"]


@pytest.mark.parametrize(
    ("source", "doc"),
    DOCUMENTS + _doc_blocks(),
    ids=lambda value: value if isinstance(value, str) else f"{value['kind']}/{value['metadata']['name']}",
)
def test_every_document_is_valid(source: str, doc: dict[str, Any]) -> None:
    validate_manifest(doc)


def test_the_inference_service_schema_rejects_a_misspelt_field() -> None:
    """The check above has teeth on the largest schema too."""
    broken = copy.deepcopy(INFERENCE_SERVICES[0][1])
    model = broken["spec"]["predictor"]["model"]
    model["storageURI"] = model.pop("storageUri")
    with pytest.raises(AssertionError, match="'storageURI' was unexpected"):
        validate_manifest(broken)


def test_the_namespaced_runtime_is_the_cluster_runtime() -> None:
    namespaced = _the("ServingRuntime", "servingruntime.yaml")
    assert namespaced["metadata"]["name"] == CLUSTER_RUNTIME["metadata"]["name"] == "modelhost"
    assert namespaced["spec"] == CLUSTER_RUNTIME["spec"]


def test_runtime_args_parse_and_serve_what_kserve_expects() -> None:
    assert (
        CONTAINER["name"] == "kserve-container"
    )  # the container KServe merges the predictor's settings into
    assert all(
        arg.startswith("--") and "=" in arg for arg in ARGS
    )  # appended predictor args cannot split them
    assert OPTIONS.model_repositories == ["/mnt/models"]  # where KServe's storage initializer puts storageUri
    assert (OPTIONS.http_port, OPTIONS.grpc_port) == (KSERVE_HTTP_PORT, KSERVE_GRPC_PORT)
    assert OPTIONS.allow_http and OPTIONS.allow_grpc
    assert set(CLUSTER_RUNTIME["spec"]["protocolVersions"]) == {"v2", "grpc-v2"}
    annotations = CLUSTER_RUNTIME["spec"]["annotations"]
    assert int(annotations["prometheus.kserve.io/port"]) == OPTIONS.metrics_port
    assert annotations["prometheus.kserve.io/path"] == "/metrics"
    probe = CONTAINER["readinessProbe"]["httpGet"]
    assert (probe["path"], probe["port"]) == ("/v2/health/ready", OPTIONS.http_port)


def test_kserve_triton_runtime_args_parse_the_same() -> None:
    """KServe's Triton runtime's own command line (less the program name) is a modelhost command line that
    serves the same repository on the same ports: swapping the image alone would do."""
    (triton,) = load_documents(TRITON_RUNTIME.read_text())
    program, *args = triton["spec"]["containers"][0]["args"]
    assert program == "tritonserver"
    options = parse_serve_args(args)
    assert options.model_repositories == OPTIONS.model_repositories
    assert (options.http_port, options.grpc_port) == (OPTIONS.http_port, OPTIONS.grpc_port)
    assert options.allow_http and options.allow_grpc


def test_model_formats_are_served_by_modelhost_backends() -> None:
    formats = CLUSTER_RUNTIME["spec"]["supportedModelFormats"]
    names = {f["name"] for f in formats}
    assert names <= set(FORMATS), f"a format with no known backend: {names - set(FORMATS)}"
    served = set(registry.supported())
    backends = {FORMATS[name][0] for name in names} - {None}
    assert backends <= served
    # Every backend is reachable through some format ("python" only through a whole repository, as in KServe).
    assert served - backends == {"python"}, served - backends
    assert "triton" in names


def test_model_format_versions_follow_the_frameworks_installed() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    majors: dict[str, str] = {}
    for requirement in requirements:
        found = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?\s*(?:>=|==)\s*(\d+)", requirement)
        if found:
            majors[found.group(1).lower()] = found.group(2)
    listed: dict[str, list[int]] = {}
    for entry in CLUSTER_RUNTIME["spec"]["supportedModelFormats"]:
        listed.setdefault(entry["name"], []).append(int(entry["version"]))
    for name, versions in listed.items():
        package = FORMATS[name][1]
        if package is not None:
            assert str(max(versions)) == majors[package], (name, versions, package, majors.get(package))


def test_no_auto_selection_clash_with_kserve_tritonserver() -> None:
    """KServe's webhook refuses a runtime that auto-selects a format and version that another runtime sharing a
    protocol also auto-selects at the same priority; kserve-tritonserver is installed with KServe."""
    (triton,) = load_documents(TRITON_RUNTIME.read_text())
    theirs = {
        (f["name"], f.get("version"), f.get("priority"))
        for f in triton["spec"]["supportedModelFormats"]
        if f.get("autoSelect")
    }
    ours = {
        (f["name"], f.get("version"), f.get("priority"))
        for f in CLUSTER_RUNTIME["spec"]["supportedModelFormats"]
        if f.get("autoSelect")
    }
    assert not theirs & ours


def test_inference_services_use_the_runtime_and_its_ports() -> None:
    ports_by_role = {"http": OPTIONS.http_port, "grpc": OPTIONS.grpc_port, "metrics": OPTIONS.metrics_port}
    assert INFERENCE_SERVICES
    for name, doc in INFERENCE_SERVICES:
        model = doc["spec"]["predictor"]["model"]
        assert model["runtime"] == CLUSTER_RUNTIME["metadata"]["name"], name
        assert model["storageUri"].startswith("s3://"), name
        assert model["modelFormat"]["name"] in FORMATS, name
        assert model["protocolVersion"] in CLUSTER_RUNTIME["spec"]["protocolVersions"], name
        ports = model.get("ports", [])
        for port in ports:
            # KServe treats a port whose name says grpc or h2c as gRPC (HTTP/2 appProtocol).
            role = "grpc" if re.search("grpc|h2c", port["name"]) else port["name"].rstrip("1")
            assert ports_by_role.get(role) == port["containerPort"], (name, port)
        mode = doc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"]
        if mode == "Knative":
            assert len(ports) <= 1, f"{name}: Knative routes to one container port"
        else:
            assert ports[0]["containerPort"] == OPTIONS.http_port, f"{name}: the Service's port 80 is HTTP"


# The runtime, run -----------------------------------------------------------------------------------------------


def _with_values(args: list[str], values: dict[str, str]) -> list[str]:
    """`args` with the values of the flags named in `values` replaced (each must be there)."""
    replaced, result = set(), []
    for arg in args:
        flag = arg.partition("=")[0].removeprefix("--")
        if flag in values:
            arg = f"--{flag}={values[flag]}"
            replaced.add(flag)
        result.append(arg)
    assert replaced == set(values), f"flags missing from the runtime's args: {set(values) - replaced}"
    return result


def _get(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def _get_or_none(port: int, path: str) -> int | None:
    try:
        return _get(port, path)
    except OSError:
        return None


def _wait_for(server: RunningServer, path: str) -> None:
    """Until `path` answers 200 on the server's HTTP port; fails with its log if it exits or takes a minute."""
    deadline = time.monotonic() + 60
    while _get_or_none(server.http_port, path) != 200:
        assert server.process.poll() is None, f"the server exited:\n{server.log()}"
        assert time.monotonic() < deadline, f"the server did not come up:\n{server.log()}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def runtime_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """modelhost started with the runtime's args, as the image's entrypoint would run them."""
    repository = tmp_path_factory.mktemp("mnt-models")
    copy_examples(repository, "simple")
    http_port, grpc_port, metrics_port = free_ports(3)
    args = _with_values(
        ARGS,
        {
            "model-repository": str(repository),
            "http-port": str(http_port),
            "grpc-port": str(grpc_port),
            "metrics-port": str(metrics_port),
        },
    )
    log_path = tmp_path_factory.mktemp("logs") / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "modelhost", "serve", *args], stdout=log, stderr=subprocess.STDOUT
        )
    server = RunningServer(process, http_port, grpc_port, metrics_port, log_path)
    try:
        _wait_for(server, "/v2/health/live")
        yield server
    finally:
        server.stop()


def test_readiness_endpoints_answer(runtime_server: RunningServer) -> None:
    deadline = time.monotonic() + 30
    while _get(runtime_server.http_port, CONTAINER["readinessProbe"]["httpGet"]["path"]) != 200:
        assert time.monotonic() < deadline, runtime_server.log()
        time.sleep(0.1)
    assert _get(runtime_server.http_port, "/v2/models/simple/ready") == 200
    grpc = grpcclient.InferenceServerClient(runtime_server.grpc_url)
    try:
        assert grpc.is_server_ready() and grpc.is_model_ready("simple")
    finally:
        grpc.close()


def test_inference_over_both_protocols_and_metrics(runtime_server: RunningServer) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    http = httpclient.InferenceServerClient(runtime_server.http_url)
    grpc = grpcclient.InferenceServerClient(runtime_server.grpc_url)
    try:
        for api in (Api("http", httpclient, http), Api("grpc", grpcclient, grpc)):
            result = api.infer("simple", INPUT0=a, INPUT1=b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    finally:
        http.close()
        grpc.close()
    # The port the runtime's prometheus.kserve.io/port annotation names serves the inference counters.
    url = f"http://127.0.0.1:{runtime_server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    assert re.search(r'^nv_inference_request_success\{[^}]*model="simple"[^}]*\} 2(\.0)?$', text, re.M), text


def test_kserve_triton_runtime_command_line_runs_the_tritonserver_executable(tmp_path: Path) -> None:
    """KServe's Triton runtime's container args, unchanged but for the repository and ports, through the image's
    entrypoint: it runs `tritonserver` from PATH, which is modelhost's (installed with the package). A Triton
    client infers over HTTP and gRPC, and the image's healthcheck recognises the process."""
    (triton,) = load_documents(TRITON_RUNTIME.read_text())
    http_port, grpc_port, metrics_port = free_ports(3)
    repository = tmp_path / "mnt-models"
    copy_examples(repository, "simple")
    args = _with_values(
        triton["spec"]["containers"][0]["args"],
        {"model-store": str(repository), "http-port": str(http_port), "grpc-port": str(grpc_port)},
    )
    assert args[0] == "tritonserver"
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "tritonserver").is_file(), "the package installs a tritonserver executable"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONUNBUFFERED": "1"}
    command = [str(ROOT / "deploy" / "docker" / "entrypoint.sh"), *args, f"--metrics-port={metrics_port}"]
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    server = RunningServer(process, http_port, grpc_port, metrics_port, log_path)
    try:
        _wait_for(server, "/v2/health/ready")
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            for module, client in ((httpclient, http), (grpcclient, grpc)):
                inputs = [module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
                for tensor in inputs:
                    tensor.set_data_from_numpy(a)
                result = client.infer("simple", inputs)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
        finally:
            http.close()
            grpc.close()
        healthcheck = subprocess.run(
            [sys.executable, str(ROOT / "deploy" / "docker" / "healthcheck.py")],
            env={**os.environ, "MODELHOST_HEALTHCHECK_PID": str(process.pid)},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert healthcheck.returncode == 0, healthcheck.stderr
    finally:
        server.stop()


def test_tritonserver_without_a_repository_is_refused_as_tritonserver_does() -> None:
    bin_dir = Path(sys.executable).parent
    result = subprocess.run(
        [str(bin_dir / "tritonserver"), "--http-port=0"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "tritonserver: error: --model-repository must be specified" in result.stderr

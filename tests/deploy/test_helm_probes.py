"""The chart's probes answer on a running modelhost: the server is started with the container arguments the chart
renders (ports moved to free ones), it is waited for through the rendered startupProbe, and then every probe of
both probe types (HTTP paths, the gRPC health service, the TCP socket) is carried out as the kubelet does."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from deploy.helm_chart import CHART, container, fetch_helm, render
from e2e.server_process import free_ports

PROBES = ("startupProbe", "livenessProbe", "readinessProbe")


def _probe_port(spec: dict[str, Any], server: dict[str, Any], moved: dict[int, int]) -> int:
    port = spec["port"]
    if isinstance(port, str):  # a named container port
        port = next(p["containerPort"] for p in server["ports"] if p["name"] == port)
    return moved[int(port)]


def _succeeds(probe: dict[str, Any], server: dict[str, Any], moved: dict[int, int]) -> bool:
    """One probe, with the kubelet's notion of success."""
    timeout = probe.get("timeoutSeconds", 1)
    if "httpGet" in probe:
        spec = probe["httpGet"]
        url = f"http://127.0.0.1:{_probe_port(spec, server, moved)}{spec['path']}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return 200 <= int(response.status) < 400
        except (urllib.error.URLError, OSError):
            return False
    if "grpc" in probe:
        spec = probe["grpc"]
        with grpc.insecure_channel(f"127.0.0.1:{_probe_port(spec, server, moved)}") as channel:
            try:
                answer = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=spec.get("service", "")), timeout=timeout
                )
            except grpc.RpcError:
                return False
            return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)
    if "tcpSocket" in probe:
        try:
            with socket.create_connection(
                ("127.0.0.1", _probe_port(probe["tcpSocket"], server, moved)), timeout
            ):
                return True
        except OSError:
            return False
    raise AssertionError(f"a probe of a kind this test does not carry out: {probe}")


@pytest.fixture(scope="module")
def renders() -> dict[str, dict[str, Any]]:
    binary = fetch_helm()
    return {
        "http": container(render(binary)),
        "grpc": container(render(binary, CHART / "ci" / "cpu-values.yaml")),
    }


@pytest.fixture(scope="module")
def moved_ports(renders: dict[str, dict[str, Any]]) -> dict[int, int]:
    declared = sorted({p["containerPort"] for p in renders["http"]["ports"]})
    return dict(zip(declared, free_ports(len(declared)), strict=True))


@pytest.fixture(scope="module")
def started(
    renders: dict[str, dict[str, Any]], moved_ports: dict[int, int], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[subprocess.Popen[bytes]]:
    """modelhost with the default render's arguments (the image's bundled examples), its ports moved."""
    server = renders["http"]
    args = [
        re.sub(r"^(--(?:http|grpc|metrics)-port=)(\d+)$", lambda m: f"{m[1]}{moved_ports[int(m[2])]}", a)
        for a in server["args"]
    ]
    log = tmp_path_factory.mktemp("probes") / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "modelhost", "serve", *args], stdout=out, stderr=out
        )
    try:
        startup = server["startupProbe"]
        # The kubelet gives the server periodSeconds x failureThreshold; here it is polled faster.
        deadline = time.monotonic() + min(startup["periodSeconds"] * startup["failureThreshold"], 180)
        while not _succeeds(startup, server, moved_ports):
            assert process.poll() is None, Path(log).read_text()
            assert time.monotonic() < deadline, "the startupProbe never succeeded:\n" + Path(log).read_text()
            time.sleep(0.25)
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        process.wait(60)


@pytest.mark.parametrize("probe_type", ["http", "grpc"])
def test_every_probe_of_the_render_succeeds_on_the_running_server(
    started: subprocess.Popen[bytes],
    renders: dict[str, dict[str, Any]],
    moved_ports: dict[int, int],
    probe_type: str,
) -> None:
    server = renders[probe_type]
    kinds = {next(k for k in ("httpGet", "grpc", "tcpSocket") if k in server[name]) for name in PROBES}
    assert kinds == ({"httpGet"} if probe_type == "http" else {"grpc", "tcpSocket"})
    for name in PROBES:
        assert _succeeds(server[name], server, moved_ports), f"{probe_type} {name}: {server[name]}"


def test_a_probe_on_a_port_nothing_serves_fails(renders: dict[str, dict[str, Any]]) -> None:
    """The probe runner itself can fail: the passing test above is not vacuous."""
    server = renders["http"]
    (closed,) = free_ports(1)
    nowhere = {p["containerPort"]: closed for p in server["ports"]}
    assert not _succeeds(server["readinessProbe"], server, nowhere)
    assert not _succeeds(renders["grpc"]["readinessProbe"], renders["grpc"], nowhere)

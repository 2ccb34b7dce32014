"""The standard gRPC health service (`grpc.health.v1.Health/Check`), as Kubernetes gRPC probes call it."""

from __future__ import annotations

from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from e2e.clients import poll
from e2e.models import add_identity, write_config
from e2e.server_process import running_server, start_server

# Served by the engine in every --frontend-processes mode: run in mode 0 alone (tests/e2e/conftest.py).


def _check(url: str, service: str = "") -> int:
    with grpc.insecure_channel(url) as channel:
        response = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=10
        )
    return int(response.status)


def test_serving_while_ready(tmp_path: Path) -> None:
    add_identity(tmp_path / "models", "identity", "FP32")
    with running_server([tmp_path / "models"], tmp_path / "server.log") as server:
        assert _check(server.grpc_url) == health_pb2.HealthCheckResponse.SERVING
        assert (
            _check(server.grpc_url, "inference.GRPCInferenceService")
            == health_pb2.HealthCheckResponse.SERVING
        )


def test_not_serving_while_a_model_is_not_ready(tmp_path: Path) -> None:
    add_identity(tmp_path / "models", "identity", "FP32")
    write_config(tmp_path / "models" / "broken", 'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n')
    server = start_server(
        [tmp_path / "models"], tmp_path / "server.log", "--exit-on-error=false", wait_ready=False
    )
    try:

        def answers() -> bool:
            try:
                _check(server.grpc_url)
            except grpc.RpcError:
                return False
            return True

        poll(answers, 60, "the gRPC health service answering")
        assert _check(server.grpc_url) == health_pb2.HealthCheckResponse.NOT_SERVING  # strict readiness
    finally:
        server.stop()

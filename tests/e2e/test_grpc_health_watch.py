"""`grpc.health.v1.Health/Watch`: the status at once, again each time it changes, NOT_SERVING and the end of the
stream when the server stops, without holding up its drain; in every --frontend-processes mode (the watch runs in
the frontend, the readiness it reads is the engine's)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import grpc
import tritonclient.http as httpclient
from grpc_health.v1 import health_pb2, health_pb2_grpc

from e2e.models import add_identity, write_config
from e2e.server_process import start_server

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
BROKEN = 'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n'  # no model file: its load fails


class Watcher:
    """A Watch call read on a thread: the statuses received, and how the stream ended."""

    def __init__(self, url: str) -> None:
        self.channel = grpc.insecure_channel(url)
        self.statuses: list[int] = []
        self.ended: grpc.StatusCode | None = None
        self.changed = threading.Condition()
        stream = health_pb2_grpc.HealthStub(self.channel).Watch(health_pb2.HealthCheckRequest(), timeout=120)
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: Any) -> None:
        try:
            for response in stream:
                with self.changed:
                    self.statuses.append(int(response.status))
                    self.changed.notify_all()
            ended = grpc.StatusCode.OK
        except grpc.RpcError as e:
            ended = e.code()
        with self.changed:
            self.ended = ended
            self.changed.notify_all()

    def wait_for(self, count: int) -> list[int]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.statuses) >= count or self.ended, 60), self.statuses
            return list(self.statuses)

    def wait_ended(self) -> grpc.StatusCode:
        self.thread.join(60)
        assert self.ended is not None, "the watch did not end"
        return self.ended


def test_watch_follows_readiness_and_ends_when_the_server_stops(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    add_identity(repo, "identity", "FP32")
    write_config(repo / "broken", BROKEN)
    server = start_server(
        [repo], tmp_path / "server.log", "--exit-on-error=false", "--model-control-mode=explicit",
        "--load-model=*", "--exit-timeout-secs=20", wait_ready=False,
    )  # fmt: skip
    watcher = Watcher(server.grpc_url)
    try:
        http = httpclient.InferenceServerClient(server.http_url)
        # Not ready while `broken` has failed its load (strict readiness); the first status comes at once.
        assert watcher.wait_for(1) == [NOT_SERVING]
        # Fixed and loaded: ready, and the watch says so without being asked again.
        (repo / "broken" / "config.pbtxt").unlink()
        add_identity(repo, "broken", "FP32")
        http.load_model("broken")
        count = len(watcher.statuses)
        assert watcher.wait_for(count + 1)[-1] == SERVING
        http.close()
        # SIGTERM: NOT_SERVING, then the stream ends OK, and the drain does not wait for it.
        server.process.send_signal(signal.SIGTERM)
        assert watcher.wait_ended() is grpc.StatusCode.OK
        assert watcher.statuses[-1] == NOT_SERVING
        assert server.process.wait(60) == 0  # a drain that timed out would exit with another code
    finally:
        watcher.channel.close()
        server.stop()

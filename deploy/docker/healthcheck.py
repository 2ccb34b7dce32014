"""The images' HEALTHCHECK (installed as /opt/modelhost/bin/modelhost-healthcheck.py; no curl in the images).

It reads the command line of the container's main process (PID 1: the entrypoint exec's modelhost) to learn
what to probe, so that it follows the flags the container was started with:

- `modelhost serve ...`: GET /v2/health/ready on its --http-port (8000); with --allow-http=false, GET /ping on
  --sagemaker-port when --allow-sagemaker=true, else $AIP_HEALTH_ROUTE on --vertex-ai-port when Vertex AI is
  served, else the gRPC health service on --grpc-port;
- `modelhost sagemaker ...` (the image's `serve`): GET /ping on $SAGEMAKER_BIND_TO_PORT (8080);
- `tritonserver ...` (modelhost's tritonserver command, as KServe's Triton runtime calls it): as `serve`.

Exit 0 when the probe answers 200 (gRPC: SERVING), 1 otherwise, as HEALTHCHECK expects.
MODELHOST_HEALTHCHECK_PID names another process than 1 (the replay, whose server is not PID 1). Where PID 1
is not modelhost (an init such as tini as PID 1), the first modelhost server process is probed.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

TIMEOUT_S = 4.0


def server_command(pid: str) -> list[str]:
    """The modelhost command and its arguments ("serve" or "sagemaker" first) of process `pid`."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    for i, arg in enumerate(argv):
        # A console script runs as `python /path/tritonserver ARGS`: the program is the script's path.
        if Path(arg).name == "tritonserver" and (i == 0 or Path(argv[0]).name.startswith("python")):
            return ["serve", *argv[i + 1 :]]
        program = Path(arg).name == "modelhost" or (arg == "modelhost" and i > 0 and argv[i - 1] == "-m")
        if program and i + 1 < len(argv) and argv[i + 1] in ("serve", "sagemaker"):
            return argv[i + 1 :]
    raise LookupError(f"process {pid} is not a modelhost server: {' '.join(argv)}")


def find_server(pid: str | None) -> list[str]:
    """The command of process `pid`; by default PID 1's, or, where that is not modelhost (an init such as tini or
    `docker run --init`), the first modelhost server process's in the container."""
    try:
        return server_command(pid or "1")
    except (LookupError, OSError) as first:
        if pid is not None:
            raise
        for entry in sorted((p.name for p in Path("/proc").iterdir() if p.name.isdigit()), key=int):
            try:
                return server_command(entry)
            except (LookupError, OSError):
                continue
        raise first


def probe_http(address: str, port: int, path: str) -> bool:
    host = "127.0.0.1" if address in ("", "0.0.0.0", "::") else address
    if ":" in host:
        host = f"[{host}]"
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=TIMEOUT_S) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def probe_grpc(address: str, port: int) -> bool:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    host = "127.0.0.1" if address in ("", "0.0.0.0", "::") else address
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        try:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S
            )
        except grpc.RpcError:
            return False
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


def healthy(command: list[str]) -> bool:
    if command[0] == "sagemaker":
        return probe_http("", int(os.environ.get("SAGEMAKER_BIND_TO_PORT") or 8080), "/ping")
    from modelhost.cli.serve_args import (
        parse_serve_args,  # the server's own parser: every spelling of its flags
    )

    options = parse_serve_args(command[1:])
    if options.allow_http:
        return probe_http(options.http_address, options.http_port, "/v2/health/ready")
    if options.allow_sagemaker:
        return probe_http(options.http_address, options.sagemaker_port, "/ping")
    if options.allow_vertex_ai and os.environ.get("AIP_HEALTH_ROUTE"):  # a Vertex AI container (AIP_MODE)
        return probe_http(options.http_address, options.vertex_ai_port, os.environ["AIP_HEALTH_ROUTE"])
    if options.allow_grpc:
        return probe_grpc(options.grpc_address, options.grpc_port)
    return False


def main() -> int:
    try:
        command = find_server(os.environ.get("MODELHOST_HEALTHCHECK_PID") or None)
        ok = healthy(command)
    except Exception as error:  # a HEALTHCHECK's answer is its exit code; say why on its output
        print(f"healthcheck: {error}", file=sys.stderr)
        return 1
    if not ok:
        print("healthcheck: not ready", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

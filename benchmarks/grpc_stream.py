"""`ModelStreamInfer` with many requests in flight on one stream, modelhost against the reference, same run.

h2load (C, nghttp2) opens one stream at a time on one connection; each stream's body is N framed
`ModelInferRequest`s of the python-backend identity model (both servers serve the same `model.py`), so the
server has N requests of the stream in flight, answers each, and ends the stream. Requests/s = streams done x N
/ duration. Every answer is counted from the DATA bytes h2load received (one answer has the size measured by a
one-off call before the run), so a failed request shows as missing bytes.

    .venv/bin/python benchmarks/grpc_stream.py --requests-per-stream 64 --duration 5 --repeats 2
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).parent))
import payloads
from reference_repo import build_python_repo
from servers import DEFAULT_MODELHOST_CMD, Ports, Server, server_command

METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"


def framed(message: bytes) -> bytes:
    return b"\x00" + len(message).to_bytes(4, "big") + message


def answer_size(target: str, request: bytes) -> int:
    """Bytes of one framed answer to `request` on this server (a one-off stream of one request)."""
    with grpc.insecure_channel(target) as channel:
        call = channel.stream_stream(METHOD)  # bytes in, bytes out
        answers = list(call(iter([request]), timeout=30))
    if len(answers) != 1:
        raise RuntimeError(f"{len(answers)} answers to one request")
    return 5 + len(answers[0])


def run_h2load(target: str, body: Path, duration: int) -> tuple[int, int]:
    """(streams done, DATA bytes received)."""
    cmd = [
        "h2load", "-t1", "-c1", "-m1", "-D", str(duration),
        "-H", "content-type: application/grpc", "-H", "te: trailers",
        "-d", str(body), f"http://{target}{METHOD}",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60, check=True).stdout
    done = int(re.search(r"requests: \d+ total, \d+ started, (\d+) done", out).group(1))  # type: ignore[union-attr]
    data = re.search(r"traffic: .* \((\d+)\) data", out)
    assert data is not None, out
    return done, int(data.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests-per-stream", type=int, default=64)
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--modelhost-cmd", default=DEFAULT_MODELHOST_CMD)
    args = parser.parse_args()
    n = args.requests_per_stream
    request = payloads.grpc_request(payloads.make_workload("identity"))
    results: dict[str, list[float]] = {"modelhost": [], "reference": []}
    with tempfile.TemporaryDirectory(prefix="grpc-stream-") as tmp:
        work = Path(tmp)
        repo = build_python_repo(work / "repo", ["identity"])
        body = work / "body.bin"
        body.write_bytes(framed(request) * n)
        for rep in range(args.repeats):
            for kind in results:
                ports = Ports.pick()
                cmd = server_command(kind, repo, ports, args.modelhost_cmd)
                with Server(kind, cmd, ports, work / f"{kind}-{rep}.log") as server:
                    server.wait_ready(["identity"])
                    size = answer_size(server.grpc_target, request)
                    run_h2load(server.grpc_target, body, 2)  # warm-up
                    done, data = run_h2load(server.grpc_target, body, args.duration)
                    # Streams still open at the end add answers of their own; fewer than the done streams' is an error.
                    missing = done * n - data // size
                    if missing > 0:
                        raise RuntimeError(
                            f"{kind}: {missing} answers missing (DATA {data} B, {size} B each)"
                        )
                    rate = done * n / args.duration
                    results[kind].append(rate)
                    print(
                        f"[{time.strftime('%H:%M:%S')}] {kind} repeat {rep + 1}: {rate:,.0f} req/s",
                        flush=True,
                    )
    mh, ref = (statistics.median(results[k]) for k in ("modelhost", "reference"))
    print(f"ModelStreamInfer, identity, {n} requests in flight on one stream, medians of {args.repeats}:")
    print(f"  modelhost {mh:,.0f} req/s | reference {ref:,.0f} req/s | ratio {mh / ref:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""GPU smoke test of the TensorRT backend, for a machine with an NVIDIA GPU and `pip install 'modelhost[tensorrt]'`.

Builds a plan from a small ONNX model with modelhost's converter (`--write-config` into a Triton layout), serves
it with `python -m modelhost serve`, and checks the answers that tritonclient gets (HTTP and gRPC) against
onnxruntime's on the same model, plus a batch outside the profile. Self-contained; not collected by pytest (no
test_ prefix):

    python tests/backends/tensorrt/gpu_smoke.py [--keep DIR]

Exits 0 and prints "gpu smoke: OK" when everything holds.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper, save

MODEL = "smoke"
MAX_BATCH = 8


def make_onnx(path: Path) -> None:
    """y = relu(x @ w + b), s = 2 * x for x [batch, 4] (batch dynamic)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["xwb"]),
            helper.make_node("Relu", ["xwb"], ["y"]),
            helper.make_node("Mul", ["x", "two"], ["s"]),
        ],
        "smoke",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch", 4]),
        ],
        initializer=[w, b, two],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(path))


def free_ports(count: int) -> list[int]:
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


def convert(onnx: Path, repo: Path) -> None:
    command = [
        sys.executable, "-m", "modelhost.backends.tensorrt.convert",
        "--onnx", str(onnx),
        "--output", f"{repo / MODEL / '1'}/",
        "--min-shapes", "x:1x4", "--opt-shapes", "x:4x4", "--max-shapes", f"x:{MAX_BATCH}x4",
        "--write-config",
    ]  # fmt: skip
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the conversion failed (exit status {done.returncode}); see its message above")
    config = (repo / MODEL / "config.pbtxt").read_text()
    print(config)
    assert f"max_batch_size: {MAX_BATCH}" in config, config
    assert 'platform: "tensorrt_plan"' in config, config


def wait_ready(server: subprocess.Popen[bytes], http_port: int, timeout_s: float = 180) -> None:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited with status {server.returncode} before the model was ready")
        with contextlib.suppress(Exception):
            if client.is_model_ready(MODEL):
                return
        time.sleep(0.5)
    raise SystemExit(f"model '{MODEL}' was not ready after {timeout_s} s")


def check_answers(onnx: Path, http_port: int, grpc_port: int) -> None:
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    want_y, want_s = session.run(["y", "s"], {"x": x})

    http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
    metadata = http.get_model_config(MODEL)
    assert metadata["platform"] == "tensorrt_plan", metadata
    request = httpclient.InferInput("x", list(x.shape), "FP32")
    request.set_data_from_numpy(x)
    result = http.infer(MODEL, [request], outputs=[httpclient.InferRequestedOutput(n) for n in ("y", "s")])
    np.testing.assert_allclose(result.as_numpy("y"), want_y, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(result.as_numpy("s"), want_s, rtol=1e-3, atol=1e-4)

    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    for batch in (1, MAX_BATCH):  # both ends of the profile
        xb = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
        request_g = grpcclient.InferInput("x", list(xb.shape), "FP32")
        request_g.set_data_from_numpy(xb)
        got = grpc.infer(MODEL, [request_g]).as_numpy("y")
        np.testing.assert_allclose(got, session.run(["y"], {"x": xb})[0], rtol=1e-3, atol=1e-4)

    too_big = grpcclient.InferInput("x", [MAX_BATCH + 1, 4], "FP32")
    too_big.set_data_from_numpy(np.zeros((MAX_BATCH + 1, 4), dtype=np.float32))
    try:
        grpc.infer(MODEL, [too_big])
    except Exception as e:  # InferenceServerException
        print(f"a batch of {MAX_BATCH + 1} is refused: {e}")
    else:
        raise AssertionError(f"a batch of {MAX_BATCH + 1} was accepted")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--keep", type=Path, help="Build the repository here and keep it (default: a temp dir)."
    )
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="modelhost-trt-smoke-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        onnx, repo = work / "smoke.onnx", work / "repo"
        make_onnx(onnx)
        convert(onnx, repo)
        http_port, grpc_port, metrics_port = free_ports(3)
        command = [
            sys.executable, "-m", "modelhost", "serve", "--model-repository", str(repo),
            "--http-port", str(http_port), "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port),
        ]  # fmt: skip
        print("$", " ".join(command), flush=True)
        server = subprocess.Popen(command)
        try:
            wait_ready(server, http_port)
            check_answers(onnx, http_port, grpc_port)
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print("gpu smoke: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

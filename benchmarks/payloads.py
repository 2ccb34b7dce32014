"""Request payloads for the load benchmark, built once per model, and one-shot answer checks.

The same bytes go to both servers: a KServe v2 binary-extension body, a JSON body and a serialized gRPC
``ModelInferRequest``.  :func:`check_http` and :func:`check_grpc` send one request and compare the answer
with the expected outputs (computed here with onnxruntime on the same ONNX file), so that a benchmark never
measures a server that answers wrongly.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

EXAMPLES = Path(__file__).resolve().parent.parent / "src" / "modelhost" / "examples"

# KServe datatype <-> numpy (only what the benchmark models need, plus a few for safety).
_NP_OF = {"INT32": np.int32, "INT64": np.int64, "FP32": np.float32, "FP64": np.float64, "FP16": np.float16}
MODELS = ("simple", "mlp")
# With --python-backend: a python-backend identity model and the python-backend onnxruntime MLP.
PYTHON_MODELS = ("identity", "mlp")


@dataclass
class Workload:
    """One model's request: inputs (with the batch dimension), requested outputs and expected answers."""

    model: str
    inputs: list[tuple[str, str, np.ndarray]]
    outputs: list[str]
    expected: dict[str, np.ndarray] = field(default_factory=dict)
    rtol: float = 0.0
    atol: float = 0.0

    @property
    def batch_size(self) -> int:
        return int(self.inputs[0][2].shape[0])


def make_workload(model: str, batch_size: int = 1, examples: Path = EXAMPLES) -> Workload:
    rng = np.random.default_rng(1234)
    if model == "simple":
        a = rng.integers(-1000, 1000, size=(batch_size, 16), dtype=np.int32)
        b = rng.integers(-1000, 1000, size=(batch_size, 16), dtype=np.int32)
        w = Workload(model, [("INPUT0", "INT32", a), ("INPUT1", "INT32", b)], ["OUTPUT0", "OUTPUT1"])
    elif model == "identity":
        x = rng.integers(-1000, 1000, size=(batch_size, 16)).astype(np.float32)
        w = Workload(model, [("INPUT0", "FP32", x)], ["OUTPUT0"])
        w.expected = {"OUTPUT0": x}
        return w
    elif model == "mlp":
        # Multiples of 1/256: exact in float32 and short in JSON, so both encodings carry the same numbers.
        x = (rng.integers(-512, 512, size=(batch_size, 256)) / 256.0).astype(np.float32)
        w = Workload(model, [("INPUT0", "FP32", x)], ["OUTPUT0"], rtol=1e-4, atol=1e-4)
    else:
        raise ValueError(f"unknown benchmark model {model!r} (known: {', '.join(MODELS)})")
    w.expected = _expected(examples / model / "1" / "model.onnx", w)
    return w


def _expected(onnx_path: Path, w: Workload) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    outs = sess.run(w.outputs, {name: arr for name, _, arr in w.inputs})
    return dict(zip(w.outputs, outs, strict=True))


# ----------------------------------------------------------------------------------------------------------
# Bodies
# ----------------------------------------------------------------------------------------------------------


def binary_body(w: Workload) -> tuple[bytes, int]:
    """KServe binary-extension body and its JSON header's length (``Inference-Header-Content-Length``)."""
    raw = [
        np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        for _, _, arr in w.inputs
    ]
    header = {
        "inputs": [
            {
                "name": name,
                "shape": list(arr.shape),
                "datatype": dt,
                "parameters": {"binary_data_size": len(data)},
            }
            for (name, dt, arr), data in zip(w.inputs, raw, strict=True)
        ],
        "outputs": [{"name": name, "parameters": {"binary_data": True}} for name in w.outputs],
    }
    head = json.dumps(header, separators=(",", ":")).encode()
    return head + b"".join(raw), len(head)


def json_body(w: Workload) -> bytes:
    body = {
        "inputs": [
            {"name": name, "shape": list(arr.shape), "datatype": dt, "data": arr.reshape(-1).tolist()}
            for name, dt, arr in w.inputs
        ],
        "outputs": [{"name": name} for name in w.outputs],
    }
    return json.dumps(body, separators=(",", ":")).encode()


def grpc_request(w: Workload) -> bytes:
    """A serialized ``inference.ModelInferRequest`` with the tensors in ``raw_input_contents``."""
    from tritonclient.grpc import service_pb2

    req = service_pb2.ModelInferRequest(model_name=w.model)
    for name, dt, arr in w.inputs:
        t = req.inputs.add()
        t.name = name
        t.datatype = dt
        t.shape.extend(arr.shape)
        req.raw_input_contents.append(np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes())
    for name in w.outputs:
        req.outputs.add().name = name
    data: bytes = req.SerializeToString()
    return data


# ----------------------------------------------------------------------------------------------------------
# One-shot answer checks
# ----------------------------------------------------------------------------------------------------------


class CheckError(AssertionError):
    pass


def _compare(w: Workload, got: dict[str, np.ndarray], how: str) -> None:
    for name in w.outputs:
        if name not in got:
            raise CheckError(f"{w.model} {how}: output {name} missing (got {sorted(got)})")
        exp = w.expected[name]
        arr = got[name].reshape(exp.shape)
        exact = not (w.rtol or w.atol)
        ok = np.array_equal(arr, exp) if exact else np.allclose(arr, exp, rtol=w.rtol, atol=w.atol)
        if not ok:
            raise CheckError(f"{w.model} {how}: {name} differs from onnxruntime's answer")


def check_http(host: str, port: int, w: Workload, binary: bool) -> None:
    path = f"/v2/models/{w.model}/infer"
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        if binary:
            body, hlen = binary_body(w)
            headers = {
                "Content-Type": "application/octet-stream",
                "Inference-Header-Content-Length": str(hlen),
            }
        else:
            body, headers = json_body(w), {"Content-Type": "application/json"}
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        how = "http-binary" if binary else "http-json"
        if resp.status != 200:
            raise CheckError(f"{w.model} {how}: HTTP {resp.status}: {data[:300]!r}")
        hdr = resp.getheader("Inference-Header-Content-Length")
        got: dict[str, np.ndarray] = {}
        if hdr is not None:
            head = json.loads(data[: int(hdr)])
            offset = int(hdr)
            for out in head["outputs"]:
                np_dt = _NP_OF[out["datatype"]]
                size = out.get("parameters", {}).get("binary_data_size")
                if size is None:
                    got[out["name"]] = np.asarray(out["data"], dtype=np_dt)
                    continue
                got[out["name"]] = np.frombuffer(
                    data[offset : offset + size], dtype=np.dtype(np_dt).newbyteorder("<")
                )
                offset += size
        else:
            head = json.loads(data)
            for out in head["outputs"]:
                got[out["name"]] = np.asarray(out["data"], dtype=_NP_OF[out["datatype"]])
        _compare(w, got, how)
    finally:
        conn.close()


def check_grpc(host: str, port: int, w: Workload) -> int:
    """Check one gRPC answer; return its size on the wire (serialized ``ModelInferResponse`` bytes)."""
    import grpc
    from tritonclient.grpc import service_pb2

    with grpc.insecure_channel(f"{host}:{port}") as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")  # raw bytes both ways
        try:
            raw = call(grpc_request(w), timeout=30)
        except grpc.RpcError as e:
            raise CheckError(f"{w.model} grpc: {e.code()}: {e.details()}") from e
        resp = service_pb2.ModelInferResponse.FromString(raw)
        got = {}
        for i, out in enumerate(resp.outputs):
            if i < len(resp.raw_output_contents):
                dt = np.dtype(_NP_OF[out.datatype]).newbyteorder("<")
                got[out.name] = np.frombuffer(resp.raw_output_contents[i], dtype=dt)
            elif out.HasField("contents"):
                got[out.name] = np.asarray(_contents(out), dtype=_NP_OF[out.datatype])
        _compare(w, got, "grpc")
        return len(raw)


def _contents(out: object) -> list[float]:
    c = out.contents  # type: ignore[attr-defined]
    for name in ("int_contents", "int64_contents", "fp32_contents", "fp64_contents", "uint_contents"):
        values = list(getattr(c, name))
        if values:
            return values
    return []

"""What test.sh does with curl and Triton's example clients, for the recipes' checks."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import numpy as np


def request(
    method: str, path: str, body: Any = None, port: int = 8000, timeout: float = 30
) -> tuple[int, str]:
    """`curl -s -w %{http_code} -X METHOD localhost:PORT/PATH -d BODY`: (status, body)."""
    data = None if body is None else (body if isinstance(body, (bytes, str)) else json.dumps(body))
    if isinstance(data, str):
        data = data.encode()
    req = urllib.request.Request(f"http://localhost:{port}{path}", data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode(errors="replace")
    except OSError as e:
        return 0, str(e)


def simple_infer(model: str = "simple", http: bool = True, grpc: bool = True) -> str | None:
    """simple_http_infer_client / simple_grpc_infer_client: INPUT0 + INPUT1 (INT32 [1, 16]) on `model`.
    Returns None, or what went wrong."""
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    try:
        if http:
            import tritonclient.http as httpclient

            client = httpclient.InferenceServerClient("localhost:8000")
            inputs = [
                httpclient.InferInput("INPUT0", [1, 16], "INT32"),
                httpclient.InferInput("INPUT1", [1, 16], "INT32"),
            ]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            result = client.infer(model, inputs)
            if not np.array_equal(result.as_numpy("OUTPUT0"), a + b):
                return f"{model} over HTTP: wrong OUTPUT0"
        if grpc:
            import tritonclient.grpc as grpcclient

            gclient = grpcclient.InferenceServerClient("localhost:8001")
            ginputs = [
                grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
                grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
            ]
            ginputs[0].set_data_from_numpy(a)
            ginputs[1].set_data_from_numpy(b)
            gresult = gclient.infer(model, ginputs)
            if not np.array_equal(gresult.as_numpy("OUTPUT0"), a + b):
                return f"{model} over gRPC: wrong OUTPUT0"
    except Exception as e:
        return f"{model}: {type(e).__name__}: {e}"
    return None


def expect_fields(body: str, expected: dict[str, Any]) -> str | None:
    """The `grep -c '"key":value'` checks on a JSON answer: None, or the fields that differ."""
    try:
        got = json.loads(body)
    except json.JSONDecodeError:
        return f"not JSON: {body[:200]}"
    wrong = {k: got.get(k, "<missing>") for k, v in expected.items() if got.get(k, "<missing>") != v}
    return None if not wrong else f"expected {expected}, got {wrong} in {body[:300]}"

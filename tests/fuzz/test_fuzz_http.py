"""The HTTP request path under fuzzing: request lines, headers, framing (Content-Length, chunked), JSON and binary
inference bodies, compression. Whatever is sent: no 500, no traceback or error in the log, no hang, and the
server answers a good request afterwards."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from e2e.models import add_identity, copy_examples
from fuzz.harness import SERVER_FAULT, STATUS, InProcessServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    repo = tmp_path_factory.mktemp("fuzz_repo")
    copy_examples(repo, "simple")
    add_identity(repo, "identity_fp32", "FP32")
    add_identity(repo, "identity_bytes", "BYTES")
    add_identity(repo, "nobatch", "INT8", max_batch_size=0, dims="[ 2, 3 ]")
    running = InProcessServer(repo)
    yield running
    running.close()


GOOD = (
    b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n"
)
GOOD_BODY = json.dumps(
    {
        "inputs": [
            {"name": n, "shape": [1, 16], "datatype": "INT32", "data": list(range(16))}
            for n in ("INPUT0", "INPUT1")
        ]
    }
).encode()


def check(server: InProcessServer, chunks: list[bytes], half_close: bool = False) -> bytes:
    out = server.run(server.http_exchange(chunks, half_close))
    statuses = [int(code) for code in STATUS.findall(out)]
    assert SERVER_FAULT not in statuses, out[:2000]
    errors = server.errors.take()
    assert not errors, errors
    return out


def still_serving(server: InProcessServer) -> None:
    out = check(server, [GOOD % len(GOOD_BODY) + GOOD_BODY])
    assert out.startswith(b"HTTP/1.1 200 "), out[:500]


# -- strategies ------------------------------------------------------------------------------------------------

MODELS = ["simple", "identity_fp32", "identity_bytes", "nobatch", "missing", "x%2Fy", "%00", ""]
DATATYPES = [
    "INT32",
    "FP32",
    "BYTES",
    "INT8",
    "FP16",
    "BF16",
    "BOOL",
    "UINT64",
    "INT64",
    "FP64",
    "fp32",
    "XYZ",
    "",
]
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=20,
)


def maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the valid value, sometimes anything JSON can hold."""
    return st.one_of(valid, valid, valid, json_values)


shapes = st.lists(
    st.one_of(st.integers(min_value=0, max_value=20), st.integers(min_value=-(2**63), max_value=2**64)),
    max_size=70,
)


@st.composite
def infer_inputs(draw: st.DrawFn) -> dict[str, Any]:
    shape = draw(maybe(shapes))
    doc: dict[str, Any] = {
        "name": draw(maybe(st.sampled_from(["INPUT0", "INPUT1", "input", ""]))),
        "shape": shape,
        "datatype": draw(maybe(st.sampled_from(DATATYPES))),
    }
    if draw(st.booleans()):
        doc["data"] = draw(
            maybe(st.lists(st.one_of(st.integers(-300, 300), st.floats(), st.text(max_size=3)), max_size=40))
        )
    if draw(st.booleans()):
        doc["parameters"] = draw(
            maybe(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "binary_data_size": maybe(st.integers(-5, 200)),
                        "shared_memory_region": maybe(st.text(max_size=5)),
                        "shared_memory_byte_size": maybe(st.integers(-5, 200)),
                        "shared_memory_offset": maybe(st.integers(-5, 200)),
                        "triton_x": json_values,
                    },
                )
            )
        )
    return doc


@st.composite
def infer_documents(draw: st.DrawFn) -> Any:
    doc: dict[str, Any] = {"inputs": draw(maybe(st.lists(infer_inputs(), max_size=3)))}
    if draw(st.booleans()):
        doc["outputs"] = draw(
            maybe(
                st.lists(
                    st.fixed_dictionaries(
                        {"name": maybe(st.sampled_from(["OUTPUT0", "OUTPUT1", "nope"]))},
                        optional={
                            "parameters": maybe(
                                st.fixed_dictionaries(
                                    {},
                                    optional={
                                        "binary_data": maybe(st.booleans()),
                                        "classification": maybe(st.integers(-3, 40)),
                                    },
                                )
                            )
                        },
                    ),
                    max_size=3,
                )
            )
        )
    if draw(st.booleans()):
        doc["parameters"] = draw(json_values)
    if draw(st.booleans()):
        doc["id"] = draw(json_values)
    return draw(st.one_of(st.just(doc), st.just(doc), json_values))


PATHS = [
    "/v2/models/{m}/infer",
    "/v2/models/{m}/versions/1/infer",
    "/v2/models/{m}/versions/99999999999999999999/infer",
    "/v2/models/{m}/generate",
    "/v2/models/{m}/generate_stream",
    "/v2/models/{m}",
    "/v2/models/{m}/config",
    "/v2/models/{m}/ready",
    "/v2/models/{m}/stats",
    "/v2/models/{m}/trace/setting",
    "/v2/models/stats",
    "/v2/repository/index",
    "/v2/repository/models/{m}/load",
    "/v2/repository/models/{m}/unload",
    "/v2/systemsharedmemory/region/{m}/register",
    "/v2/systemsharedmemory/region/{m}/unregister",
    "/v2/systemsharedmemory/status",
    "/v2/cudasharedmemory/region/{m}/register",
    "/v2/trace/setting",
    "/v2/logging",
    "/v2/health/ready",
    "/v2",
]


@st.composite
def requests(draw: st.DrawFn) -> tuple[list[bytes], bool]:
    """One HTTP request (sometimes two, pipelined), as chunks of bytes."""
    method = draw(
        st.sampled_from(["POST", "POST", "GET", "PUT", "DELETE", "HEAD"])
        | st.text("ABCXYZ", min_size=1, max_size=6)
    )
    path = draw(st.sampled_from(PATHS)).format(m=draw(st.sampled_from(MODELS)))
    if draw(st.booleans()):
        path += "?" + draw(st.text("abc=&%01", max_size=10))
    if draw(st.integers(0, 9)) == 0:
        path = draw(st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=30))
    kind = draw(st.sampled_from(["json", "binary", "raw", "random", "empty"]))
    headers: list[tuple[str, str]] = []
    if kind == "json":
        body = json.dumps(draw(infer_documents()), allow_nan=True).encode()
    elif kind == "binary":
        header = json.dumps(draw(infer_documents()), allow_nan=True).encode()
        body = header + draw(st.binary(max_size=300))
        length = draw(
            st.one_of(
                st.just(len(header)), st.integers(-10, len(body) + 10), st.text("0123456789x-", max_size=5)
            )
        )
        headers.append(("Inference-Header-Content-Length", str(length)))
    elif kind == "raw":
        body = draw(st.binary(max_size=300))
        headers.append(("Inference-Header-Content-Length", "0"))
    elif kind == "random":
        body = draw(st.binary(max_size=500))
    else:
        body = b""
    encoding = draw(st.sampled_from(["", "", "gzip", "deflate", "br", "gzip, deflate"]))
    if encoding == "gzip":
        body = gzip.compress(body)
    elif encoding == "deflate":
        body = zlib.compress(body)
    if encoding:
        if draw(st.booleans()):
            body = body[: draw(st.integers(0, len(body)))]  # a truncated stream
        headers.append(("Content-Encoding", encoding))
    if draw(st.booleans()):
        headers.append(
            ("Accept-Encoding", draw(st.sampled_from(["gzip", "deflate", "br;q=0", "*", "gzip;q=x"])))
        )
    for _ in range(draw(st.integers(0, 3))):
        headers.append(
            (
                draw(st.sampled_from(["X-Junk", "Content-Type", "Expect", "Connection", "traceparent"])),
                draw(st.text("abc-/;=01 ", max_size=20)),
            )
        )
    framing = draw(st.sampled_from(["length", "length", "chunked", "wrong-length", "none"]))
    if framing == "length":
        headers.append(("Content-Length", str(len(body))))
        payload = body
    elif framing == "wrong-length":
        headers.append(("Content-Length", str(draw(st.integers(0, len(body) + 20)))))
        payload = body
    elif framing == "chunked":
        headers.append(("Transfer-Encoding", "chunked"))
        pieces, rest = [], body
        while rest:
            n = draw(st.integers(1, max(1, len(rest))))
            pieces.append(rest[:n])
            rest = rest[n:]
        bad_size = draw(st.integers(0, 5)) == 0
        payload = b"".join(
            (b"zz" if bad_size else f"{len(p):x}".encode()) + b"\r\n" + p + b"\r\n" for p in pieces
        ) + (b"0\r\n\r\n" if draw(st.booleans()) else b"")  # a body that never ends, sometimes
    else:
        payload = body
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: fuzz\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    )
    raw = head.encode("utf-8", "surrogateescape") + payload
    if draw(st.booleans()):
        raw += GOOD % len(GOOD_BODY) + GOOD_BODY  # a good request pipelined behind
    cuts = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=4)))
    chunks = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True) if b > a]
    return chunks, draw(st.booleans())


@given(requests())
def test_any_http_request_is_answered_without_a_server_fault(
    server: InProcessServer, request: tuple[list[bytes], bool]
) -> None:
    chunks, half_close = request
    check(server, chunks, half_close)


@given(st.lists(st.binary(min_size=1, max_size=200), min_size=1, max_size=5))
def test_random_bytes_on_the_http_port(server: InProcessServer, chunks: list[bytes]) -> None:
    check(server, chunks)


@given(infer_documents())
def test_infer_documents_through_the_routes(server: InProcessServer, doc: Any) -> None:
    body = json.dumps(doc, allow_nan=True).encode()
    for model in ("simple", "identity_bytes", "nobatch"):
        raw = f"POST /v2/models/{model}/infer HTTP/1.1\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
        check(server, [raw])


def test_the_server_still_serves_after_the_fuzzing(server: InProcessServer) -> None:
    still_serving(server)

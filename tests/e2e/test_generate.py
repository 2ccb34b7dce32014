"""Triton's generate extension end to end: POST /v2/models/{m}[/versions/{v}]/generate (one JSON answer) and
/generate_stream (server-sent events), through plain HTTP as any client (curl, a browser's EventSource) uses it.

Models: `simple` (ONNX, INT32 [16] x2), ONNX identities, `mock_llm` (Triton's qa model: PROMPT, STREAM, request
parameters REPETITION, DELAY, FAIL_LAST; decoupled) and `mock_llm_nd` (the same model, not decoupled),
`repeat_decoupled` (answers that come over time), `error_midstream` and `error_response`.

Where modelhost answers on purpose otherwise than Triton (checked against tritonserver 2.51): a client's malformed
body is 400 (Triton 500); /generate with other than one answer is 400 (Triton 200 with the same message); a first
answer that is an error is that error's status (Triton: 400) with a JSON `{"error": ...}`, or on /generate_stream
an event `{"error": ...}` followed by the answers that come after it, as Triton. With
frontend processes a stream's events reach the client together at its end (docs/frontend-processes.md): the check
that the first event arrives before the model sends the next applies to the single-process server only.

The last section holds Triton's answers that modelhost does not give yet (server bugs): its tests fail until the
server is fixed.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from e2e.models import add_identity, copy_examples
from e2e.server_process import RunningServer, running_server
from e2e.sse import ONE_RESPONSE, SSE_CONTENT_TYPE, Event, RawConnection, read_events, sse_payloads

PYTHON_MODELS = Path(__file__).parent / "python_models"
MAX_INPUT = 65536  # --http-max-input-size of the module's server
UNHANDLED = ("Traceback", "unhandled", "never retrieved", "Exception ignored")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Path:
    root = tmp_path_factory.mktemp("generate") / "models"
    root.mkdir()
    copy_examples(root, "simple")
    add_identity(root, "identity_fp32", "FP32")
    add_identity(root, "identity_bool", "BOOL", max_batch_size=0)
    for name in ("mock_llm", "repeat_decoupled", "error_midstream", "error_response"):
        shutil.copytree(PYTHON_MODELS / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(
        PYTHON_MODELS / "mock_llm", root / "mock_llm_nd", ignore=shutil.ignore_patterns("__pycache__")
    )
    config = root / "mock_llm_nd" / "config.pbtxt"
    text = (
        config.read_text()
        .replace('"mock_llm"', '"mock_llm_nd"')
        .replace("decoupled: true", "decoupled: false")
    )
    config.write_text(text)
    return root


@pytest.fixture(scope="module")
def server(
    repo: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("log") / "generate.log"
    with running_server([repo], log, f"--http-max-input-size={MAX_INPUT}") as running:
        yield running


def url(server: RunningServer, model: str, endpoint: str = "generate", version: str = "") -> str:
    versioned = f"/versions/{version}" if version else ""
    return f"http://{server.http_url}/v2/models/{model}{versioned}/{endpoint}"


def post(
    server: RunningServer,
    model: str,
    body: bytes | dict[str, Any],
    endpoint: str = "generate",
    version: str = "",
    stream: bool = False,
) -> requests.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return requests.post(url(server, model, endpoint, version), data=data, stream=stream, timeout=30)


def stream(server: RunningServer, model: str, body: dict[str, Any]) -> list[Event]:
    """/generate_stream: the events of a 200 answer, read as they arrive."""
    with post(server, model, body, "generate_stream", stream=True) as r:
        assert r.status_code == 200, r.text
        assert r.headers["Content-Type"] == SSE_CONTENT_TYPE
        return list(read_events(r))


def assert_error(r: requests.Response, status: int, message: str) -> None:
    assert r.status_code == status, r.text
    assert r.headers["Content-Type"] == "application/json"
    assert r.json() == {"error": message}


def simple_body(**extra: Any) -> dict[str, Any]:
    return {"INPUT0": list(range(16)), "INPUT1": [1] * 16, **extra}


SIMPLE_ANSWER = {
    "model_name": "simple",
    "model_version": "1",
    "OUTPUT0": [i + 1 for i in range(16)],
    "OUTPUT1": [i - 1 for i in range(16)],
}


def good_request_works(server: RunningServer) -> None:
    r = post(server, "simple", simple_body())
    assert r.status_code == 200, r.text
    assert r.json() == SIMPLE_ANSWER


def assert_clean_log(server: RunningServer) -> None:
    log = server.log()
    for sign in UNHANDLED:
        assert sign not in log, log


@pytest.fixture(autouse=True)
def still_serving(server: RunningServer) -> Iterator[None]:
    """Whatever a test sent, the server answers a good request afterwards and logged no unhandled exception."""
    yield
    good_request_works(server)
    assert_clean_log(server)


# -- /generate -----------------------------------------------------------------------------------------------------


def test_generate_answers_outputs_by_name(server: RunningServer) -> None:
    r = post(server, "simple", simple_body())
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/json"
    assert r.json() == SIMPLE_ANSWER
    # Triton's key order (a std::map): outputs, then model_name and model_version; no "outputs" wrapper.
    assert list(r.json()) == ["OUTPUT0", "OUTPUT1", "model_name", "model_version"]


def test_generate_with_a_version_in_the_path(server: RunningServer) -> None:
    r = post(server, "simple", simple_body(), version="1")
    assert r.status_code == 200, r.text
    assert r.json() == SIMPLE_ANSWER


def test_one_element_is_written_bare(server: RunningServer) -> None:
    # identity_fp32 batches: 0.1 becomes shape [1, 1]; FP32 is written as the double it widens to, as Triton does.
    r = post(server, "identity_fp32", {"INPUT0": 0.1})
    assert r.json() == {"OUTPUT0": 0.10000000149011612, "model_name": "identity_fp32", "model_version": "1"}
    r = post(server, "identity_fp32", {"INPUT0": [1.5, -2]})
    assert r.json()["OUTPUT0"] == [1.5, -2.0]
    r = post(server, "identity_bool", {"INPUT0": True})
    assert r.json()["OUTPUT0"] is True
    r = post(server, "identity_bool", {"INPUT0": [True, False]})
    assert r.json()["OUTPUT0"] == [True, False]


def test_id_is_echoed_and_also_reaches_the_model_as_a_parameter(server: RunningServer) -> None:
    r = post(server, "mock_llm_nd", {"id": "req-7", "PROMPT": "hello", "STREAM": False})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "PARAMS": '{"id": "req-7"}',
        "TEXT": "hello",
        "id": "req-7",
        "model_name": "mock_llm_nd",
        "model_version": "1",
    }


def test_parameters_reach_a_python_model(server: RunningServer) -> None:
    body = {"PROMPT": "hi", "STREAM": False, "parameters": {"REPETITION": 3}}
    r = post(server, "mock_llm_nd", body)
    assert r.status_code == 200, r.text
    assert r.json()["TEXT"] == ["hi", "hi", "hi"]  # [1, 3]: written flat
    assert json.loads(r.json()["PARAMS"]) == {"REPETITION": 3}
    # A top-level key that names no input is a parameter too, with its JSON type.
    body = {"PROMPT": "hi", "STREAM": False, "flag": True, "ratio": 0.5, "name": "x", "big": 2**40}
    params = json.loads(post(server, "mock_llm_nd", body).json()["PARAMS"])
    assert params == {"flag": True, "ratio": 0.5, "name": "x", "big": 2**40}


def test_generate_on_a_decoupled_model_with_one_answer(server: RunningServer) -> None:
    r = post(server, "mock_llm", {"PROMPT": "hello world", "STREAM": False})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/json"
    assert r.json() == {"PARAMS": "{}", "TEXT": "hello world", "model_name": "mock_llm", "model_version": "1"}


@pytest.mark.parametrize("repetition", [3, 0])
def test_generate_on_a_decoupled_model_with_other_than_one_answer(
    server: RunningServer, repetition: int
) -> None:
    # Triton sends this message with status 200; modelhost with 400.
    body = {"PROMPT": "hi", "STREAM": True, "parameters": {"REPETITION": repetition}}
    assert_error(post(server, "mock_llm", body), 400, ONE_RESPONSE)


# -- /generate_stream ----------------------------------------------------------------------------------------------


def test_events_come_in_order_as_the_model_sends_them(
    server: RunningServer, frontend_processes: int, tmp_path: Path
) -> None:
    events = stream(server, "repeat_decoupled", {"IN": [4, 5, 6, 7], "DELAY": [0, 0, 0, 0]})
    payloads = [e.json() for e in events]
    assert payloads == [
        {"IDX": i, "OUT": 4 + i, "model_name": "repeat_decoupled", "model_version": "1"} for i in range(4)
    ]
    # Each event as the model sends it: the first reaches the client while the model holds its second answer
    # back until the client has seen the first (mock_llm's GATE). A server that kept the events to the end would
    # hold the first too, and the read would time out.
    gate = tmp_path / "gate"
    if frontend_processes != 0:
        gate.touch()  # a frontend process passes the events on together, at the end
    body = {"PROMPT": "hi", "STREAM": True, "parameters": {"REPETITION": 3, "GATE": str(gate)}}
    with post(server, "mock_llm", body, "generate_stream", stream=True) as r:
        assert r.status_code == 200, r.text
        arriving = read_events(r)
        first = next(arriving)
        gate.touch()
        rest = list(arriving)
    assert [e.json()["TEXT"] for e in [first, *rest]] == ["hi"] * 3


def test_stream_on_the_wire(server: RunningServer, frontend_processes: int) -> None:
    """Status and headers, `data: <json>` events each ended by a blank line, the chunked terminator, and the
    connection still usable for another request."""
    body = json.dumps({"PROMPT": "hi", "STREAM": True, "parameters": {"REPETITION": 2}}).encode()
    path = "/v2/models/mock_llm/generate_stream"
    with RawConnection(server.http_port) as connection:
        connection.send("POST", path, body)
        answer = connection.read_answer()
        assert answer.status == 200
        assert answer.headers["content-type"] == SSE_CONTENT_TYPE
        if frontend_processes == 0:
            assert answer.headers["transfer-encoding"] == "chunked"
            assert "content-length" not in answer.headers
        event = {"PARAMS": '{"REPETITION": 2}', "TEXT": "hi", "model_name": "mock_llm", "model_version": "1"}
        assert sse_payloads(answer.body) == [event, event]
        assert "connection" not in answer.headers  # keep-alive: the same connection serves the next request
        connection.send("POST", path, body)
        assert sse_payloads(connection.read_answer().body) == [event, event]


def test_stream_with_an_id(server: RunningServer) -> None:
    events = stream(server, "mock_llm", {"id": "s1", "PROMPT": "a", "STREAM": True, "REPETITION": 2})
    assert [e.json()["id"] for e in events] == ["s1", "s1"]


def test_stream_on_a_model_that_is_not_decoupled_is_one_event(server: RunningServer) -> None:
    events = stream(server, "simple", simple_body())
    assert [e.json() for e in events] == [SIMPLE_ANSWER]
    events = stream(server, "mock_llm_nd", {"PROMPT": "hi", "STREAM": False, "REPETITION": 2})
    assert [e.json()["TEXT"] for e in events] == [["hi", "hi"]]


def test_stream_of_no_answers_is_empty(server: RunningServer) -> None:
    events = stream(server, "mock_llm", {"PROMPT": "hi", "STREAM": True, "REPETITION": 0})
    assert events == []


def test_error_in_the_middle_of_a_stream_is_an_error_event(server: RunningServer) -> None:
    body = {"PROMPT": "hi", "STREAM": True, "parameters": {"REPETITION": 2, "FAIL_LAST": True}}
    events = stream(server, "mock_llm", body)  # 200: the status went out with the first event
    payloads = [e.json() for e in events]
    assert [p.get("TEXT") for p in payloads[:2]] == ["hi", "hi"]
    assert payloads[2:] == [{"error": "An Error Occurred"}]


def test_a_first_answer_that_is_an_error_sets_the_status(server: RunningServer) -> None:
    # Triton 2.51 answers these 400; modelhost with the error's own code.
    assert_error(post(server, "error_response", {"INPUT0": [1.0]}), 400, "bad thing")
    not_decoupled = {"PROMPT": "hi", "STREAM": True}
    assert_error(post(server, "mock_llm_nd", not_decoupled), 500, "STREAM only supported in decoupled mode")
    # error_midstream: an error, then an answer; /generate takes one answer, so the error is what the client gets.
    assert_error(post(server, "error_midstream", {"IN": 5}), 500, "first one failed")


def stream_with_status(server: RunningServer, model: str, body: dict[str, Any]) -> tuple[int, list[Any]]:
    """/generate_stream of any status: the status and the events' payloads, as Triton sends them: events."""
    with post(server, model, body, "generate_stream", stream=True) as r:
        assert r.headers["Content-Type"] == SSE_CONTENT_TYPE
        return r.status_code, [e.json() for e in read_events(r)]


def test_a_first_stream_answer_that_is_an_error_is_an_event_with_its_status(server: RunningServer) -> None:
    # As Triton: the status is the error's (Triton 2.51: 400), the body a stream of events, the error the first.
    assert stream_with_status(server, "error_response", {"INPUT0": [1.0]}) == (400, [{"error": "bad thing"}])
    status, events = stream_with_status(server, "mock_llm_nd", {"PROMPT": "hi", "STREAM": True})
    assert (status, events) == (500, [{"error": "STREAM only supported in decoupled mode"}])
    # error_midstream: an error, then an answer, both as events.
    status, events = stream_with_status(server, "error_midstream", {"IN": 5})
    assert status == 500
    assert events[0] == {"error": "first one failed"}
    assert [e.get("OUT") for e in events[1:]] == [5]


def test_a_client_that_goes_away_mid_stream(server: RunningServer, frontend_processes: int) -> None:
    body = json.dumps({"PROMPT": "hi", "STREAM": True, "parameters": {"REPETITION": 40, "DELAY": 0.05}})
    with RawConnection(server.http_port) as connection:
        connection.send("POST", "/v2/models/mock_llm/generate_stream", body.encode())
        if frontend_processes == 0:
            status, _ = connection.read_head()
            assert status == 200
            connection.read_until(b"\n\n")  # the first event: the stream is under way
        else:
            time.sleep(0.3)  # the events come at the end: hang up while the model is still answering
    good_request_works(server)
    # The model has one instance: this answer comes once the abandoned request has ended.
    r = post(server, "mock_llm", {"PROMPT": "after", "STREAM": False})
    assert r.status_code == 200, r.text
    assert r.json()["TEXT"] == "after"
    if frontend_processes == 0:
        # The request was cancelled: the model saw it (request.is_cancelled()) and stopped early.
        deadline = time.monotonic() + 5
        while "mock_llm: cancelled after" not in server.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "mock_llm: cancelled after" in server.log()
        assert "cancelled after 0 of" not in server.log()
    assert_clean_log(server)


# -- bad requests --------------------------------------------------------------------------------------------------

PARAMETER_TYPES = "has invalid type. It should be either 'int', 'bool', or 'string'."


def missing_inputs(model: str, count: int, got: str, missing: str) -> str:
    return (
        f"[request id: <id_unknown>] expected {count} inputs but got {len(got.split(',')) if got else 0} inputs for "
        f"model '{model}'. Got input(s) [{got}], but missing required input(s) [{missing}]. Please provide all "
        "required input(s)."
    )


def bad(case: str, model: str, body: bytes | str, status: int, message: str, *, prefix: bool = False) -> Any:
    """A bad request: its body as JSON text (or bytes), and the answer expected on /generate and /generate_stream
    (errors before inference are JSON on both). `prefix`: the message only starts so."""
    data = body.encode() if isinstance(body, str) else body
    return pytest.param(model, data, status, message, prefix, id=case)


BAD_REQUESTS = [
    bad("not-json", "mock_llm", "{", 400, "failed to parse the request JSON buffer: ", prefix=True),
    bad(
        "trailing-garbage",
        "mock_llm",
        '{"PROMPT": "a"} x',
        400,
        "failed to parse the request JSON buffer: ",
        prefix=True,
    ),
    bad(
        "empty-body",
        "mock_llm",
        b"",
        400,
        "failed to parse the request JSON buffer: The document is empty. at 0",
    ),
    bad("array", "mock_llm", "[1, 2]", 400, "attempt to get members for non-object"),
    bad("string", "mock_llm", '"PROMPT"', 400, "attempt to get members for non-object"),
    bad(
        "prompt-not-a-string",
        "mock_llm",
        '{"PROMPT": 123, "STREAM": true}',
        400,
        "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
    ),
    bad(
        "stream-not-a-bool",
        "mock_llm",
        '{"PROMPT": "a", "STREAM": "false"}',
        400,
        "Unable to parse 'data': attempt to access JSON non-boolean as boolean",
    ),
    bad(
        "first-bad-input-in-document-order",
        "mock_llm",
        '{"STREAM": "false", "PROMPT": 123}',
        400,
        "Unable to parse 'data': attempt to access JSON non-boolean as boolean",
    ),
    bad(
        "int32-not-an-integer",
        "simple",
        json.dumps(simple_body(INPUT0=[0.5] * 16)),
        400,
        "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
    ),
    bad(
        "wrong-element-count",
        "simple",
        json.dumps(simple_body(INPUT0=[1, 2, 3])),
        400,
        "The schema can not convert input 'INPUT0' to tensor with proper shape",
    ),
    bad(
        "id-not-a-string",
        "mock_llm",
        '{"id": 5, "PROMPT": "a", "STREAM": false}',
        400,
        "Unable to parse 'id': attempt to access JSON non-string as string",
    ),
    bad(
        "parameters-not-an-object",
        "mock_llm",
        '{"PROMPT": "a", "STREAM": false, "parameters": 1}',
        400,
        "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object",
    ),
    bad(
        "nested-parameter",
        "mock_llm",
        '{"PROMPT": "a", "STREAM": false, "parameters": {"nested": {"a": 1}}}',
        400,
        f"Converting keyword: 'parameters': parameter 'nested' {PARAMETER_TYPES}",
    ),
    bad(
        "object-parameter",
        "mock_llm",
        '{"PROMPT": "a", "STREAM": false, "PARAMS": {"a": 1}}',
        400,
        f"parameter 'PARAMS' {PARAMETER_TYPES}",
    ),
    bad(
        "null-parameter",
        "mock_llm",
        '{"PROMPT": "a", "STREAM": false, "x": null}',
        400,
        f"parameter 'x' {PARAMETER_TYPES}",
    ),
    bad("no-inputs", "mock_llm", "{}", 400, missing_inputs("mock_llm", 2, "", "'PROMPT','STREAM'")),
    bad(
        "one-input-missing",
        "mock_llm",
        '{"PROMPT": "a"}',
        400,
        missing_inputs("mock_llm", 2, "'PROMPT'", "'STREAM'"),
    ),
    bad("no-inputs-simple", "simple", "{}", 400, missing_inputs("simple", 2, "", "'INPUT0','INPUT1'")),
    bad(
        "duplicate-input",
        "mock_llm",
        '{"PROMPT": "a", "PROMPT": "b", "STREAM": false}',
        400,
        "[request id: <id_unknown>] input 'PROMPT' already exists in request",
    ),
    bad(
        "duplicate-input-with-id",
        "mock_llm",
        '{"id": "r9", "PROMPT": "a", "STREAM": false, "PROMPT": "b"}',
        400,
        "[request id: r9] input 'PROMPT' already exists in request",
    ),
    bad(
        "input-over-max-input-size",  # the body is within the limit; its strings count 4 bytes more each
        "mock_llm",
        json.dumps({"PROMPT": [""] * 20000, "STREAM": False}, separators=(",", ":")),
        400,
        f"request size of 0 bytes with input 'PROMPT' of size 80000 bytes exceeds the maximum allowed input size "
        f"of {MAX_INPUT}. Use --http-max-input-size to increase the limit.",
    ),
    bad("unknown-model", "nope", "{}", 404, "Request for unknown model: 'nope' is not found"),
]


@pytest.mark.parametrize("endpoint", ["generate", "generate_stream"])
@pytest.mark.parametrize(("model", "body", "status", "message", "prefix"), BAD_REQUESTS)
def test_bad_request(
    server: RunningServer, endpoint: str, model: str, body: bytes, status: int, message: str, prefix: bool
) -> None:
    r = post(server, model, body, endpoint)
    assert r.status_code == status, r.text
    assert r.headers["Content-Type"] == "application/json"
    error = r.json()["error"]
    if prefix:
        assert error.startswith(message), error
    else:
        assert error == message


@pytest.mark.parametrize("endpoint", ["generate", "generate_stream"])
def test_unknown_version_is_404(server: RunningServer, endpoint: str) -> None:
    r = post(server, "simple", simple_body(), endpoint, version="7")
    assert_error(r, 404, "Request for unknown model: 'simple' version 7 is not found")


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
@pytest.mark.parametrize("endpoint", ["generate", "generate_stream"])
def test_other_methods_are_405(server: RunningServer, endpoint: str, method: str) -> None:
    r = requests.request(method, url(server, "mock_llm", endpoint), timeout=10)
    assert_error(r, 405, "Method Not Allowed")


@pytest.mark.parametrize("endpoint", ["generate", "generate_stream"])
def test_a_body_over_the_max_input_size(server: RunningServer, endpoint: str) -> None:
    body = json.dumps({"PROMPT": "x" * MAX_INPUT, "STREAM": False}).encode()
    r = post(server, "mock_llm", body, endpoint)
    assert_error(
        r,
        400,
        f"Request JSON size of {len(body)} bytes exceeds the maximum allowed value of {MAX_INPUT} bytes. "
        "Use --http-max-input-size to increase the limit.",
    )


# -- Triton's answers that modelhost does not give yet (checked against tritonserver 2.51) -------------------------


def test_nested_arrays_with_the_right_element_count_are_accepted(server: RunningServer) -> None:
    # Triton reads nested arrays as long as they hold as many elements as the outer array counts: [["hello"]]
    # for an input of dims [1, 1] is the natural way to write it.
    r = post(server, "mock_llm", {"PROMPT": [["hello"]], "STREAM": [[False]]})
    assert r.status_code == 200, r.text
    assert r.json()["TEXT"] == "hello"


@pytest.mark.parametrize(
    ("model", "body"),
    [
        ("mock_llm", '{"PROMPT": "a", "STREAM": false, "x": 1e400}'),
        ("mock_llm", '{"PROMPT": "a", "STREAM": false, "x": -1e400}'),
        ("identity_fp32", '{"INPUT0": 1e400}'),
    ],
    ids=["parameter", "negative-parameter", "input"],
)
def test_a_number_too_big_for_a_double_is_refused(server: RunningServer, model: str, body: str) -> None:
    # rapidjson refuses the literal while parsing (Triton: "... Number too big to be stored in double. at 33").
    r = post(server, model, body.encode())
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith(
        "failed to parse the request JSON buffer: Number too big to be stored in double."
    )


def test_parameters_named_like_reserved_ones(server: RunningServer) -> None:
    # Triton hands every such key to the model as a custom parameter. modelhost keeps its rules of /infer
    # (docs/protocols.md): sequence_* parameters steer sequence batching and are not among a python model's
    # parameters, triton_* keys are reserved; other keys, `priority` included, reach the model.
    custom = {"sequence_id": 3, "sequence_start": True, "sequence_end": True, "triton_x": 1, "priority": 1}
    r = post(server, "mock_llm_nd", {"PROMPT": "a", "STREAM": False, **custom})
    assert r.status_code == 200, r.text
    assert json.loads(r.json()["PARAMS"]) == {"priority": 1}


def test_non_finite_floats_are_written_as_triton_writes_them(server: RunningServer) -> None:
    # Triton's JSON writer writes NaN and the infinities as the literals its parser reads (kWriteNanAndInfFlag);
    # null would lose the value. 1e39 is past FP32's range: infinity.
    r = post(server, "identity_fp32", b'{"INPUT0": [NaN, Infinity, -Infinity, 1e39]}')
    assert r.status_code == 200, r.text
    assert r.text == (
        '{"OUTPUT0":[NaN,Infinity,-Infinity,Infinity],"model_name":"identity_fp32","model_version":"1"}'
    )

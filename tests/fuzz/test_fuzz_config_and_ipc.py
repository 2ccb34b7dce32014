"""config.pbtxt and the python backend's framing under fuzzing.

- Any text as a model's config.pbtxt, or as the config a load request overrides it with: the model fails to load
  with a ModelhostError (a message the repository API and the log give), never another exception.
- The python backend's messages, split anywhere, arrive whole and in order; garbage on that channel is a clean
  error, never a hang or a crash of the server (the channel is between the server and stubs it started)."""

from __future__ import annotations

import contextlib
import itertools
import json
import marshal
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from modelhost.backends.model_config import complete_model_config
from modelhost.backends.python.ipc import FrameReader, encode
from modelhost.config import config_from_json, parse_config_text
from modelhost.errors import ModelhostError

FIELDS = [
    'name: "m"',
    'platform: "onnxruntime_onnx"',
    'backend: "python"',
    'backend: "onnxruntime"',
    "max_batch_size: 8",
    "max_batch_size: -1",
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]',
    'output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 2, 3 ] reshape: { shape: [ 6 ] } } ]',
    "dynamic_batching { max_queue_delay_microseconds: 100 preferred_batch_size: [ 4, 0 ] }",
    "sequence_batching { max_sequence_idle_microseconds: 5 direct {} }",
    'ensemble_scheduling { step [ { model_name: "x" model_version: -1 input_map { key: "a" value: "b" } } ] }',
    "instance_group [ { count: 2 kind: KIND_GPU gpus: [ 7 ] } ]",
    "instance_group [ { count: -3 kind: KIND_MODEL } ]",
    'parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "/nowhere" } }',
    "response_cache { enable: true }",
    "model_transaction_policy { decoupled: true }",
    "version_policy { specific { versions: [ 0, -1 ] } }",
    "optimization { input_pinned_memory { enable: false } }",
    "{",
    "}",
    "[",
    '"',
    "input [ {",
]


@st.composite
def config_texts(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.sampled_from(FIELDS), max_size=8))
    if draw(st.booleans()):
        position = draw(st.integers(0, len(parts)))
        parts.insert(position, draw(st.text(max_size=30)))
    return "\n".join(parts)


@given(config_texts())
def test_any_config_text_is_read_or_refused_with_a_message(text: str) -> None:
    model_dir = Path("/nonexistent-fuzz-model") / "m"
    try:
        config = parse_config_text(text, "m", "config.pbtxt")
        complete_model_config(config, model_dir, source="config.pbtxt", auto_complete=False, gpu_count=1)
    except ModelhostError:
        pass  # a message for the log and the repository API


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=15,
)


@given(
    st.one_of(
        json_values,
        st.fixed_dictionaries(
            {},
            optional={
                "name": json_values,
                "backend": st.sampled_from(["python", "onnxruntime", "nope", ""]) | json_values,
                "max_batch_size": st.integers(-(2**40), 2**40) | json_values,
                "input": json_values,
                "instance_group": json_values,
                "dynamic_batching": json_values,
            },
        ),
    )
)
def test_any_config_override_of_a_load_request_is_read_or_refused(value: object) -> None:
    model_dir = Path("/nonexistent-fuzz-model") / "m"
    try:
        config = config_from_json(json.dumps(value, allow_nan=True), "m")
        complete_model_config(config, model_dir, source="the load request", auto_complete=False)
    except ModelhostError:
        pass


messages = st.dictionaries(
    st.text(max_size=8),
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**63 - 1)
        | st.text(max_size=10)
        | st.binary(max_size=10),
        lambda children: st.lists(children, max_size=3).map(tuple) | st.lists(children, max_size=3),
        max_leaves=10,
    ),
    max_size=5,
)


@given(st.lists(messages, max_size=6), st.lists(st.integers(0, 10_000), max_size=6))
def test_python_backend_frames_split_anywhere_arrive_whole(
    sent: list[dict[str, object]], cuts: list[int]
) -> None:
    stream = b"".join(encode(m) for m in sent)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    reader = FrameReader()
    received: list[dict[str, object]] = []
    for start, end in itertools.pairwise(points):
        received += reader.feed(stream[start:end])
    assert received == [marshal.loads(marshal.dumps(m)) for m in sent]


@given(st.binary(min_size=5, max_size=200))
def test_garbage_on_the_python_backend_channel_is_a_clean_error(data: bytes) -> None:
    # A frame whose length covers the garbage: what marshal makes of it is a message or a ValueError-like error.
    reader = FrameReader()
    framed = len(data).to_bytes(4, "little") + data
    with contextlib.suppress(ValueError, EOFError, TypeError):
        reader.feed(framed)

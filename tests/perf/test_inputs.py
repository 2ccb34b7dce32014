"""The input data of a perf run: zero, random and perf_analyzer's JSON files."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from modelhost.perf.client import ModelInfo, PerfError, TensorInfo
from modelhost.perf.inputs import build_input_data
from perf.models import SIMPLE, options


def write_json(tmp_path: Path, document: object) -> str:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(document))
    return str(path)


def test_zero_and_random_data_with_batch() -> None:
    zero = build_input_data(SIMPLE, options("--input-data", "zero", "-b", "4")).entries
    assert len(zero) == 1
    t = zero[0][0]
    assert (t.name, t.datatype, t.shape) == ("INPUT0", "INT32", [4, 16])
    assert t.raw == bytes(4 * 16 * 4)
    rand = build_input_data(SIMPLE, options()).entries[0][1]
    values = np.frombuffer(rand.raw, dtype="<i4")
    assert values.size == 16 and values.tolist() == rand.values


def test_json_data_lists_b64_and_content(tmp_path: Path) -> None:
    ones = list(range(16))
    b64 = base64.b64encode(np.arange(16, dtype="<i4").tobytes()).decode()
    document = {
        "data": [
            {"INPUT0": ones, "INPUT1": [ones[:8], ones[8:]]},
            {"INPUT0": {"b64": b64}, "INPUT1": {"content": ones, "shape": [16]}},
        ]
    }
    entries = build_input_data(
        SIMPLE, options("--input-data", write_json(tmp_path, document), "-b", "2")
    ).entries
    assert len(entries) == 2
    for entry in entries:
        for tensor in entry:
            assert tensor.shape == [2, 16]
            assert np.frombuffer(tensor.raw, dtype="<i4").tolist() == ones * 2


def test_json_data_streams_and_bytes(tmp_path: Path) -> None:
    info = ModelInfo("s", "", 0, [TensorInfo("INPUT", "BYTES", [1])], [])
    elements = struct.pack("<I", 3) + b"abc"
    document = {
        "data": [
            [{"INPUT": ["1"]}, {"INPUT": ["2"]}],
            [{"INPUT": {"b64": base64.b64encode(elements).decode()}}],
        ]
    }
    data = build_input_data(info, options("--input-data", write_json(tmp_path, document)))
    assert [len(s) for s in data.streams] == [2, 1]
    assert data.streams[0][1][0].raw == struct.pack("<I", 1) + b"2"
    assert data.streams[1][0][0].raw == elements
    assert data.streams[1][0][0].values == ["abc"]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"data": [{"INPUT0": [1, 2], "INPUT1": list(range(16))}]}, "entry 1, input INPUT0: 2 elements"),
        ({"data": [{"INPUT1": list(range(16))}]}, "entry 1, input INPUT0: missing"),
        ({"data": []}, 'non-empty "data"'),
        ({"data": [{"INPUT0": {"b64": "AAAA"}, "INPUT1": list(range(16))}]}, "3 bytes of b64 data"),
        ({"data": [{"INPUT0": {"x": 1}, "INPUT1": list(range(16))}]}, "expected a list"),
        ({"data": [{"INPUT0": ["a"] * 16, "INPUT1": list(range(16))}]}, "do not fit datatype INT32"),
    ],
)
def test_json_data_errors(tmp_path: Path, document: object, message: str) -> None:
    with pytest.raises(PerfError, match=message):
        build_input_data(SIMPLE, options("--input-data", write_json(tmp_path, document)))


def test_bad_json_file_and_shapes(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(PerfError, match="not valid JSON"):
        build_input_data(SIMPLE, options("--input-data", str(tmp_path / "bad.json")))
    with pytest.raises(PerfError, match="cannot read"):
        build_input_data(SIMPLE, options("--input-data", str(tmp_path / "missing.json")))
    variable = ModelInfo("v", "", 0, [TensorInfo("X", "FP32", [-1, 4])], [])
    with pytest.raises(PerfError, match="--shape X:d1,d2"):
        build_input_data(variable, options())
    assert build_input_data(variable, options("--shape", "X:3,4")).entries[0][0].shape == [3, 4]
    with pytest.raises(PerfError, match="does not support batching"):
        build_input_data(variable, options("--shape", "X:3,4", "-b", "2"))
    with pytest.raises(PerfError, match="max_batch_size 8"):
        build_input_data(SIMPLE, options("-b", "9"))

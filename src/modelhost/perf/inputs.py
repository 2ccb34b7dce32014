"""The tensors a perf run sends: zeros, random values, or perf_analyzer's JSON input-data file.

Each data entry is one batch-1 sample of every input (as in perf_analyzer); `-b N` repeats the sample N times
along the batch dimension. A JSON file's `"data"` is a list of entries, or for sequence models a list of
streams (lists of entries); a value is a flat or nested list, `{"b64": ...}` (little-endian raw bytes; for
BYTES the 4-byte-length-prefixed elements), or `{"content": ..., "shape": [...]}`.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from modelhost.perf.client import ModelInfo, PerfError, TensorInfo
from modelhost.perf.options import PerfOptions

NUMPY_TYPES: dict[str, type[np.generic]] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
}


@dataclass(frozen=True, slots=True)
class Tensor:
    """One input of one request: its shape (batch dimension included where the model batches) and values."""

    name: str
    datatype: str
    shape: list[int]
    raw: bytes  # the binary tensor extension's / gRPC raw_input_contents' bytes
    values: list[Any]  # flattened values, for JSON bodies (BYTES as str)


Entry = list[Tensor]  # every input of one request


@dataclass(frozen=True, slots=True)
class InputData:
    streams: list[list[Entry]]  # one stream unless a JSON file gives several (sequence models)

    @property
    def entries(self) -> list[Entry]:
        return [entry for stream in self.streams for entry in stream]


def sample_shape(tensor: TensorInfo, info: ModelInfo, shapes: dict[str, list[int]]) -> list[int]:
    """The shape of one sample (no batch dimension), with variable dimensions filled in from --shape."""
    dims = tensor.shape[1:] if info.max_batch_size > 0 else list(tensor.shape)
    given = shapes.get(tensor.name)
    if given is not None:
        if len(given) != len(dims) or any(d >= 0 and d != g for d, g in zip(dims, given, strict=True)):
            raise PerfError(
                f"--shape {tensor.name}:{','.join(map(str, given))} does not fit the model's shape "
                f"{dims} for input {tensor.name}"
            )
        return list(given)
    if any(d < 0 for d in dims):
        raise PerfError(
            f"input {tensor.name} has variable dimensions {dims}: give its shape with "
            f'--shape {tensor.name}:d1,d2,... (or a "shape" in the input data file)'
        )
    return dims


def _bytes_elements(raw: bytes, where: str) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise PerfError(f"{where}: truncated BYTES element length in b64 data")
        (length,) = struct.unpack_from("<I", raw, offset)
        offset += 4
        if offset + length > len(raw):
            raise PerfError(f"{where}: BYTES element runs past the end of the b64 data")
        out.append(raw[offset : offset + length])
        offset += length
    return out


def serialize_bytes(elements: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, list):
        return [x for item in value for x in _flatten(item)]
    return [value]


def _sample_values(
    tensor: TensorInfo, value: Any, shape: list[int], where: str
) -> tuple[np.ndarray | list[bytes], list[int]]:
    """One sample of one input from a JSON value: numpy array (or BYTES elements) and its shape."""
    if isinstance(value, dict) and "content" in value:
        if "shape" in value:
            try:
                shape = [int(d) for d in value["shape"]]
            except (TypeError, ValueError):
                raise PerfError(f'{where}: "shape" must be a list of integers') from None
        value = value["content"]
    count = math.prod(shape)
    if isinstance(value, dict):
        if "b64" not in value:
            raise PerfError(f'{where}: expected a list, {{"b64": ...}} or {{"content": ...}}')
        try:
            raw = base64.b64decode(str(value["b64"]), validate=True)
        except (binascii.Error, ValueError):
            raise PerfError(f"{where}: invalid base64") from None
        if tensor.datatype == "BYTES":
            elements = _bytes_elements(raw, where)
            if len(elements) != count:
                raise PerfError(f"{where}: {len(elements)} elements, shape {shape} needs {count}")
            return elements, shape
        dtype = np.dtype(NUMPY_TYPES[tensor.datatype]).newbyteorder("<")
        if len(raw) != count * dtype.itemsize:
            raise PerfError(
                f"{where}: {len(raw)} bytes of b64 data, shape {shape} of {tensor.datatype} needs "
                f"{count * dtype.itemsize}"
            )
        return np.frombuffer(raw, dtype=dtype).reshape(shape), shape
    if not isinstance(value, list):
        raise PerfError(f'{where}: expected a list, {{"b64": ...}} or {{"content": ...}}')
    flat = _flatten(value)
    if len(flat) != count:
        raise PerfError(f"{where}: {len(flat)} elements, shape {shape} needs {count}")
    if tensor.datatype == "BYTES":
        return [x.encode() if isinstance(x, str) else json.dumps(x).encode() for x in flat], shape
    try:
        array = np.array(flat, dtype=NUMPY_TYPES[tensor.datatype])
    except (TypeError, ValueError, OverflowError):
        raise PerfError(f"{where}: values do not fit datatype {tensor.datatype}") from None
    return array.reshape(shape), shape


def _tensor(
    tensor: TensorInfo, sample: np.ndarray | list[bytes], shape: list[int], info: ModelInfo, batch: int
) -> Tensor:
    full = [batch, *shape] if info.max_batch_size > 0 else list(shape)
    if isinstance(sample, list):  # BYTES
        elements = sample * batch
        values: list[Any] = [e.decode("utf-8", errors="replace") for e in elements]
        return Tensor(tensor.name, tensor.datatype, full, serialize_bytes(elements), values)
    array = np.ascontiguousarray(
        np.broadcast_to(sample, (batch, *shape)) if info.max_batch_size > 0 else sample
    )
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return Tensor(tensor.name, tensor.datatype, full, little.tobytes(), array.ravel().tolist())


def _generated(info: ModelInfo, options: PerfOptions, mode: str) -> Entry:
    rng = np.random.default_rng(0)
    entry: Entry = []
    for tensor in info.inputs:
        shape = sample_shape(tensor, info, options.shapes)
        count = math.prod(shape)
        sample: np.ndarray | list[bytes]
        if tensor.datatype == "BYTES":
            if options.string_data is not None:
                elements = [options.string_data.encode()] * count
            elif mode == "zero":
                elements = [b"0" * options.string_length] * count
            else:
                letters = rng.integers(
                    ord("a"), ord("z") + 1, size=(count, options.string_length), dtype=np.uint8
                )
                elements = [row.tobytes() for row in letters]
            sample = elements
        elif tensor.datatype not in NUMPY_TYPES:
            raise PerfError(f"input {tensor.name}: datatype {tensor.datatype} is not supported by perf")
        else:
            dtype = NUMPY_TYPES[tensor.datatype]
            if mode == "zero":
                sample = np.zeros(shape, dtype=dtype)
            elif tensor.datatype == "BOOL":
                sample = rng.integers(0, 2, size=shape).astype(np.bool_)
            elif tensor.datatype.startswith(("INT", "UINT")):
                sample = rng.integers(0, 100, size=shape).astype(dtype)
            else:
                sample = rng.random(size=shape).astype(dtype)
        entry.append(_tensor(tensor, sample, shape, info, options.batch_size))
    return entry


def load_json_data(path: Path, info: ModelInfo, options: PerfOptions) -> InputData:
    try:
        document = json.loads(path.read_text())
    except OSError as error:
        raise PerfError(f"cannot read --input-data {path}: {error.strerror}") from None
    except ValueError as error:
        raise PerfError(f"--input-data {path} is not valid JSON: {error}") from None
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list) or not data:
        raise PerfError(f'--input-data {path}: expected an object with a non-empty "data" list')
    raw_streams = data if all(isinstance(x, list) for x in data) else [data]
    streams: list[list[Entry]] = []
    number = 0
    for raw_stream in raw_streams:
        stream: list[Entry] = []
        for item in raw_stream:
            number += 1
            if not isinstance(item, dict):
                raise PerfError(f"--input-data {path}: entry {number} is not an object")
            entry: Entry = []
            for tensor in info.inputs:
                where = f"--input-data {path}: entry {number}, input {tensor.name}"
                if tensor.name not in item:
                    raise PerfError(f"{where}: missing")
                value = item[tensor.name]
                default: list[int] | None
                try:
                    default = sample_shape(tensor, info, options.shapes)
                except PerfError:
                    if not (isinstance(value, dict) and "shape" in value):
                        raise
                    default = None
                sample, shape = _sample_values(tensor, value, default or [], where)
                entry.append(_tensor(tensor, sample, shape, info, options.batch_size))
            unknown = sorted(set(item) - {t.name for t in info.inputs})
            if unknown:
                raise PerfError(
                    f"--input-data {path}: entry {number} names unknown input(s) {', '.join(unknown)}"
                )
            stream.append(entry)
        if stream:
            streams.append(stream)
    if not streams:
        raise PerfError(f"--input-data {path}: no data entries")
    return InputData(streams)


def build_input_data(info: ModelInfo, options: PerfOptions) -> InputData:
    if options.batch_size > 1 and info.max_batch_size == 0:
        raise PerfError(f"model {info.name!r} does not support batching: -b must be 1")
    if info.max_batch_size > 0 and options.batch_size > info.max_batch_size:
        raise PerfError(
            f"-b {options.batch_size} is above model {info.name!r}'s max_batch_size {info.max_batch_size}"
        )
    unknown = sorted(set(options.shapes) - {t.name for t in info.inputs})
    if unknown:
        raise PerfError(f"--shape names unknown input(s) of model {info.name!r}: {', '.join(unknown)}")
    if options.input_data in ("zero", "random"):
        return InputData([[_generated(info, options, options.input_data)]])
    path = Path(options.input_data)
    if path.is_dir():
        raise PerfError(f"--input-data {path}: directories of binary files are not supported yet")
    return load_json_data(path, info, options)

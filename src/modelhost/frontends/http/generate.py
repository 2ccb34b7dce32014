"""Triton's generate extension over HTTP (`/generate`, `/generate_stream`): its request and answer bodies, and
its routes.

A request is one flat JSON object. Each member names either an input of the model (its value, a JSON scalar or a
flat array, becomes that tensor, shaped from the model's metadata) or else a request parameter; the reserved
member `parameters` holds more of the same. An answer is one flat JSON object too: `id`, `model_name`,
`model_version`, the response parameters and the outputs, each under its own name. `/generate_stream` carries each
answer as a server-sent event. Everything here follows Triton's src/http_server.cc (GenerateRequestClass) and its
messages, which its tests and clients match on.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from modelhost.datatypes import WIRE_TO_NUMPY
from modelhost.engine_api import EngineAPI
from modelhost.errors import InternalError, InvalidArgument, ModelhostError
from modelhost.frontends.http.infer_codec import _out_of_range
from modelhost.frontends.http.messages import HttpResponse
from modelhost.frontends.http.statuses import http_status
from modelhost.io_specs import TensorSpec
from modelhost.tensor_codec import id_prefix
from modelhost.types import (
    FINAL_RESPONSE,
    InferenceRequest,
    InferenceResponse,
    Parameters,
    ParamValue,
    Tensor,
)

log = logging.getLogger("modelhost.http")

# Triton's default --http-max-input-size.
DEFAULT_MAX_INPUT_SIZE = 1 << 26
SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
# The body of a /generate whose model answered with no response or with several (sent with the status the first
# answer set, 200 where it was not an error).
ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that generates various "
    "number of responses"
)

_PARAMETERS = "parameters"
_NO_JSON = {"FP16", "BF16"}
_INT64 = (-(2**63), 2**63)
_UINT64 = (0, 2**64)


class _Object(dict[str, Any]):
    """A JSON object as rapidjson keeps it: `members` lists every key in document order, duplicates included, and
    looking a key up gives its first value. Triton converts each member in that order, a duplicate again with the
    first value (a duplicated input then fails as already in the request), which a plain dict cannot express."""

    __slots__ = ("members",)

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__()
        self.members = [key for key, _ in pairs]
        for key, value in pairs:
            self.setdefault(key, value)


def _parse(body: bytes) -> Any:
    # The standard parser rather than orjson: it keeps duplicate keys (through the hook) and accepts NaN and
    # Infinity, as Triton's rapidjson does; a generate body is small (a prompt), so its speed is not the point.
    if not body.strip(b" \t\n\r"):
        raise InvalidArgument(
            f"failed to parse the request JSON buffer: The document is empty. at {len(body)}"
        )
    try:
        return json.loads(body, object_pairs_hook=_Object, parse_float=_finite_float)
    except json.JSONDecodeError as e:
        raise InvalidArgument(f"failed to parse the request JSON buffer: {e.msg} at {e.pos}") from e
    except (ValueError, RecursionError) as e:  # not UTF-8, an integer of thousands of digits, nested too deep
        raise InvalidArgument(f"failed to parse the request JSON buffer: {e}") from e


def _finite_float(text: str) -> float:
    """A JSON number literal as a double; rapidjson refuses one too big for a double (1e400) while parsing."""
    value = float(text)
    if math.isinf(value):
        raise ValueError("Number too big to be stored in double.")
    return value


def _flat(value: list[Any]) -> list[Any]:
    """A nested array's elements in order. Triton reads them when they are as many as the outer array has
    (`[["hello"]]`, one element); any other count is a shape it cannot read."""
    if not any(isinstance(item, list) for item in value):
        return value
    flat: list[Any] = []
    todo = [iter(value)]
    while todo:
        for item in todo[-1]:
            if isinstance(item, list):
                todo.append(iter(item))
                break
            flat.append(item)
        else:
            todo.pop()
    if len(flat) != len(value):
        raise _data_error("Shape does not match true shape of 'data' field")
    return flat


def _double(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError as e:  # rapidjson refuses such a literal while parsing
        raise InvalidArgument(
            "failed to parse the request JSON buffer: Number too big to be stored in double."
        ) from e


def _parameter(key: str, value: Any) -> ParamValue:
    # Triton's order: string, int64, bool, any other number (a double), nothing else.
    if isinstance(value, str | bool):
        return value
    if type(value) is int:
        return value if _INT64[0] <= value < _INT64[1] else _double(value)
    if type(value) is float:
        return value
    raise InvalidArgument(
        f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
    )


def _data_error(reason: str) -> InvalidArgument:
    # Triton answers these with 500 (its JSON library's errors are internal ones); a client's fault is a 400 here.
    return InvalidArgument(f"Unable to parse 'data': {reason}")


def _check(items: list[Any], ok: Callable[[Any], bool], reason: str) -> None:
    """Raise Triton's complaint about the first element that is not `ok`; called once the fast check failed."""
    for item in items:
        if not ok(item):
            if isinstance(item, list):
                # Triton counts the elements of the outer array only: nesting breaks that count.
                raise _data_error("Shape does not match true shape of 'data' field")
            raise _data_error(reason)


def _integers(name: str, datatype: str, items: list[Any], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    unsigned = dtype.kind == "u"
    low, high = _UINT64 if unsigned else _INT64
    if not all(type(v) is int and low <= v < high for v in items):
        reason = (
            "attempt to access JSON non-unsigned-integer as unsigned-integer"
            if unsigned
            else "attempt to access JSON non-signed-integer as signed-integer"
        )
        _check(items, lambda v: type(v) is int and low <= v < high, reason)
    info = np.iinfo(dtype)
    # Triton truncates a value to the width silently (300 becomes 44 in a UINT8); like the /infer path, modelhost
    # refuses it.
    if min(items) < info.min or max(items) > info.max:
        raise _out_of_range(name, datatype)
    return np.array(items, dtype=dtype)


def _numbers(name: str, datatype: str, items: list[Any]) -> npt.NDArray[Any]:
    dtype = WIRE_TO_NUMPY[datatype]
    if dtype.kind == "b":
        if not all(v is True or v is False for v in items):
            _check(items, lambda v: v is True or v is False, "attempt to access JSON non-boolean as boolean")
        return np.array(items, dtype=dtype)
    if dtype.kind in "iu":
        return _integers(name, datatype, items, dtype)
    if not all(type(v) is float or type(v) is int for v in items):
        _check(
            items, lambda v: type(v) is float or type(v) is int, "attempt to access JSON non-number as double"
        )
    doubles = np.array([_double(v) for v in items], dtype=np.float64)
    with np.errstate(over="ignore"):  # a double past FP32's range becomes inf, as the C cast in Triton does
        return doubles.astype(dtype)


def _strings(items: list[Any]) -> tuple[npt.NDArray[Any], int]:
    """BYTES elements (UTF-8) and their size as Triton counts it: each with its 4-byte length."""
    data = np.empty(len(items), dtype=object)
    size = 0
    for i, item in enumerate(items):
        if isinstance(item, list):
            raise _data_error("Shape does not match true shape of 'data' field")
        if not isinstance(item, str):
            raise InvalidArgument(
                "Unable to parse JSON bytes array: attempt to access JSON non-string as string"
            )
        try:
            encoded = item.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate escape, which rapidjson refuses while parsing
            raise InvalidArgument(
                "failed to parse the request JSON buffer: The surrogate pair in string is invalid."
            ) from e
        data[i] = encoded
        size += len(encoded) + 4
    return data, size


def _shape(name: str, metadata_shape: list[int], count: int) -> list[int]:
    """Triton's two passes: the fixed dims must divide the count, from the innermost out; then the innermost
    variable dim takes what is left and the other variable dims (the batch one included) are 1."""
    shape = list(metadata_shape)
    left = count
    for d in reversed(shape):
        if d != -1:
            if d <= 0 or left % d:  # Triton divides by a 0 dim; it cannot hold a non-empty value either
                raise InvalidArgument(
                    f"The schema can not convert input '{name}' to tensor with proper shape"
                )
            left //= d
    for i in reversed(range(len(shape))):
        if shape[i] == -1:
            shape[i] = left
            left = 1
    if left != 1:
        raise InvalidArgument(f"The schema can not convert input '{name}' to tensor with proper shape")
    return shape


class _Decoder:
    def __init__(
        self,
        request: InferenceRequest,
        inputs: Mapping[str, TensorSpec],
        max_batch_size: int,
        max_input_size: int,
    ) -> None:
        self.request = request
        self.inputs = inputs
        self.max_batch_size = max_batch_size
        self.max_input_size = max_input_size
        self.seen: set[str] = set()

    def members(self, obj: _Object, top: bool) -> None:
        consumed = 0  # per object, as in Triton: `parameters` counts its inputs apart
        for key in obj.members:
            value = obj[key]
            if top and key == _PARAMETERS:
                if key in self.inputs:
                    raise InvalidArgument(
                        f"Keyword '{key}' for nested schema also given as input tensor name"
                    )
                if not isinstance(value, _Object):
                    raise InvalidArgument(
                        f"Expected JSON object for keyword: '{key}': attempt to access JSON non-object as object"
                    )
                try:
                    self.members(value, top=False)
                except InvalidArgument as e:
                    raise InvalidArgument(f"Converting keyword: '{key}': {e.message}") from e
            elif key in self.inputs:
                consumed += self.tensor(self.inputs[key], value, consumed)
            else:
                # Not an input, so a parameter: `id` and `text_input` too, and `priority`, `timeout` or
                # `sequence_id` are custom parameters here, not scheduling fields.
                self.request.parameters[key] = _parameter(key, value)

    def tensor(self, spec: TensorSpec, value: Any, consumed: int) -> int:
        """Add the input; return its size in bytes as Triton counts it against --http-max-input-size."""
        name = spec.name
        if name in self.seen:
            raise InvalidArgument(id_prefix(self.request.id) + f"input '{name}' already exists in request")
        self.seen.add(name)
        items = _flat(value) if isinstance(value, list) else [value]
        datatype = spec.datatype
        if datatype == "BYTES":
            strings, size = _strings(items)
        else:
            strings, size = None, len(items) * spec.dtype.itemsize
        if size == 0:
            # An empty array: Triton adds the input with no dims and no data, and the model's checks refuse it.
            self.request.inputs.append(Tensor(name, datatype, [], np.empty(0, dtype=spec.dtype)))
            return 0
        if consumed + size > self.max_input_size:
            raise InvalidArgument(
                f"request size of {consumed} bytes with input '{name}' of size {size} bytes exceeds the maximum "
                f"allowed input size of {self.max_input_size}. Use --http-max-input-size to increase the limit."
            )
        shape = _shape(name, spec.full_shape(self.max_batch_size), len(items))
        if datatype in _NO_JSON:
            raise InvalidArgument(
                f"receiving {datatype} data via JSON is not supported. Please use the binary data format for "
                f"input {name}"
            )
        data = strings if strings is not None else _numbers(name, datatype, items)
        self.request.inputs.append(Tensor(name, datatype, shape, data.reshape(shape)))
        return size


def decode_generate_request(
    body: bytes,
    name: str,
    version: str,
    inputs: Mapping[str, TensorSpec],
    max_batch_size: int,
    *,
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
) -> InferenceRequest:
    """The request a generate body makes for a model with these `inputs` (a LoadedModel's) and `max_batch_size`.

    Every output is requested. Raises InvalidArgument with Triton's messages; errors of the inputs themselves
    (count, names, batch size) are the model's to raise, as in Triton's core.
    """
    doc = _parse(body)
    request_id = ""
    if isinstance(doc, _Object) and "id" in doc:
        if not isinstance(doc["id"], str):
            raise InvalidArgument("Unable to parse 'id': attempt to access JSON non-string as string")
        request_id = doc["id"]
    if not isinstance(doc, _Object):
        raise InvalidArgument("attempt to get members for non-object")
    request = InferenceRequest(model_name=name, model_version=version, id=request_id)
    _Decoder(request, inputs, max_batch_size, max_input_size).members(doc, top=True)
    return request


def _output_value(tensor: Tensor) -> Any:
    datatype = tensor.datatype
    if datatype in _NO_JSON:
        raise InvalidArgument(
            f"sending {datatype} data via JSON is not supported. Please use the binary data format for output"
        )
    flat = np.ascontiguousarray(tensor.data).ravel()
    value: Any
    if datatype == "BYTES":
        value = [b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b) for b in flat]
        return value[0] if len(value) == 1 else value
    if datatype == "FP32":
        # Triton writes each float as the double it widens to (0.1f as 0.10000000149011612).
        flat = flat.astype(np.float64)
    # One element is written bare, any other count (none included) as a flat array.
    return flat[0].item() if flat.size == 1 else flat


def encode_generate_response(response: InferenceResponse) -> bytes:
    """One answer: `id` (when the request had one), `model_name`, `model_version`, then each response parameter
    and each output under its own name, keys sorted (Triton collects them in a std::map, the first of a name wins).

    Raises InvalidArgument for an FP16 or BF16 output, as Triton does. A response's `error` is not looked at: the
    caller answers it with `sse_error_event` or an error body.
    """
    entries: dict[str, Any] = {}
    if response.id:
        entries["id"] = response.id
    entries["model_name"] = response.model_name
    entries["model_version"] = response.model_version
    for key, param in response.parameters.items():
        # The final flag is modelhost's marker for its streams, not a parameter of the model's (Triton's HTTP
        # frontend never sees it as one).
        if key != FINAL_RESPONSE:
            entries.setdefault(key, param)
    for tensor in response.outputs:
        if tensor.name not in entries:
            entries[tensor.name] = _output_value(tensor)
    ordered = {key: entries[key] for key in sorted(entries)}
    if any(_non_finite(value) for value in ordered.values()):
        # orjson writes NaN and the infinities as null, losing them; Triton writes the literals its parser reads.
        plain = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in ordered.items()}
        return json.dumps(plain, allow_nan=True, separators=(",", ":")).encode()
    return orjson.dumps(ordered, option=orjson.OPT_SERIALIZE_NUMPY)


def _non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return not bool(np.isfinite(value).all())
    return False


def is_flag_only(response: InferenceResponse) -> bool:
    """The empty final response that only ends a decoupled model's stream: Triton writes nothing for it.

    A model's own empty final response looks the same here, and is dropped too.
    """
    return response.error is None and not response.outputs and response.parameters.get(FINAL_RESPONSE) is True


def sse_event(payload: bytes) -> bytes:
    """One answer of /generate_stream as a server-sent event."""
    return b"data: " + payload + b"\n\n"


def sse_error_event(message: str) -> bytes:
    """An error in the middle of /generate_stream (the status, sent with the first event, stays as it was)."""
    return sse_event(orjson.dumps({"error": message}))


# -- the routes ------------------------------------------------------------------------------------------------


async def generate(
    engine: EngineAPI,
    body: bytes,
    name: str,
    version: str,
    max_input_size: int,
    *,
    stream: bool,
    parameters: Parameters | None = None,
) -> HttpResponse:
    """The generate extension: one JSON answer (/generate), or server-sent events (/generate_stream). The status is
    that of the model's first answer; a later error in a stream is an error event."""
    signature = await engine.model_signature(name, version)
    generate_request = decode_generate_request(
        body,
        name,
        version,
        signature.inputs,
        signature.max_batch_size,
        max_input_size=max_input_size,
    )
    if parameters:
        generate_request.parameters.update(parameters)
    if stream:
        # Refused: a JSON error; what the model then fails: events.
        await engine.check_request(generate_request)
    answers = _answers(engine.infer_stream(generate_request))
    if not stream:
        return await _one_answer(answers)
    try:
        first = await anext(answers)
    except StopAsyncIteration:
        return HttpResponse(200, content_type=SSE_CONTENT_TYPE, stream=_events(None, answers))
    # As Triton: the first answer sets the status; an error is an event like any later one, and the answers
    # that follow it still come.
    status = http_status(first) if isinstance(first, ModelhostError) else 200
    return HttpResponse(status, content_type=SSE_CONTENT_TYPE, stream=_events(first, answers))


async def _answers(
    responses: AsyncIterator[InferenceResponse],
) -> AsyncGenerator[InferenceResponse | ModelhostError, None]:
    """A generate request's answers: each response, or its error, without the empty final ones that only end a
    decoupled model's stream. An error that ends the request is the last item."""
    try:
        async for response in responses:
            if is_flag_only(response):
                continue
            if response.error is not None:
                error = response.error
                yield error if isinstance(error, ModelhostError) else InternalError(str(error))
            else:
                yield response
    except ModelhostError as e:
        yield e


async def _one_answer(answers: AsyncGenerator[InferenceResponse | ModelhostError, None]) -> HttpResponse:
    """/generate: the model's one answer. A model that answers several times, or not at all, is asked through the
    wrong endpoint: 400 (Triton sends its message with status 200)."""
    got = [answer async for answer in answers]
    if len(got) != 1:
        if got and isinstance(got[0], ModelhostError):
            raise got[0]
        raise InvalidArgument(ONE_RESPONSE)
    answer = got[0]
    if isinstance(answer, ModelhostError):
        raise answer
    return HttpResponse(200, encode_generate_response(answer))


async def _events(
    first: InferenceResponse | ModelhostError | None,
    answers: AsyncGenerator[InferenceResponse | ModelhostError, None],
) -> AsyncGenerator[bytes, None]:
    """/generate_stream's events: one per answer, an error as an error event (its status went out with the first
    answer: an error's own when the first answer was one)."""
    try:
        pending: list[InferenceResponse | ModelhostError] = [first] if first is not None else []
        while True:
            if pending:
                answer = pending.pop()
            else:
                try:
                    answer = await anext(answers)
                except StopAsyncIteration:
                    return
            if isinstance(answer, ModelhostError):
                log.info("generate_stream: %s", answer)
                yield sse_error_event(str(answer))
                continue
            try:
                yield sse_event(encode_generate_response(answer))
            except ModelhostError as e:
                yield sse_error_event(str(e))
    finally:
        await answers.aclose()  # the client went away: the request is cancelled

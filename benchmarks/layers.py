"""Which layer of the server a py-spy sample is in: the per-layer CPU split of cpu_split.py --table.

A sample (one line of py-spy's raw output: frames outermost first, `;`-separated, then a count) is put in the
layer of its innermost modelhost frame, by module and, in the codecs, by function name (decode or encode). A
sample with no modelhost frame below the loop's own start is the event loop itself (uvloop's C code: polling,
reading and writing the sockets, scheduling callbacks).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

LAYERS = (
    "socket & parsing",
    "decode",
    "routing & handlers",
    "engine",
    "backend & stub exchange",
    "statistics",
    "encode & write",
    "transport",
    "event loop",
    "other",
)

# Modules (path under modelhost/) -> layer, first match wins.
_MODULES = (
    ("frontends/http/protocol.py", "socket & parsing"),
    ("frontends/grpc/connection.py", "socket & parsing"),
    ("frontends/grpc/dispatch.py", "socket & parsing"),
    ("frontends/grpc/answers.py", "socket & parsing"),
    ("frontends/grpc/keepalive.py", "socket & parsing"),
    ("frontends/grpc/http2", "socket & parsing"),  # http2.py, http2_streams.py, http2_frames.py
    ("frontends/grpc/hpack_cache.py", "socket & parsing"),
    ("frontends/grpc/server.py", "socket & parsing"),
    ("frontends/http/routes.py", "routing & handlers"),
    ("frontends/http/router.py", "routing & handlers"),
    ("frontends/http/buffer.py", "routing & handlers"),
    ("engine/", "engine"),
    ("engine_api.py", "engine"),
    ("types.py", "engine"),
    ("backends/", "backend & stub exchange"),
    ("observability/", "statistics"),
    ("transport/", "transport"),
    ("app.py", "event loop"),
    ("cli/", "event loop"),
    ("__main__.py", "event loop"),
)
# The codecs and per-call handlers: decode or encode by the function's name.
_CODECS = (
    "frontends/http/infer_codec.py",
    "frontends/http/infer.py",
    "frontends/http/bodies.py",
    "frontends/tracing.py",
    "frontends/http/compression.py",
    "frontends/grpc/codec.py",
    "frontends/grpc/methods.py",
    "frontends/grpc/calls.py",
    "frontends/grpc/service.py",
    "tensor_codec.py",
    "datatypes.py",
    "io_specs.py",
)
_WIRE_LIBRARIES = ("h2", "hpack", "hyperframe", "httptools")
_ENCODE_WORDS = ("encode", "respon", "write", "send", "answer", "trailer", "output")
_DECODE_WORDS = ("decode", "request", "parse", "read", "input", "tensor_from", "from_wire")


def _frame_parts(frame: str) -> tuple[str, str]:
    """(function, path under modelhost/) of a frame `function (path:line)`; path "" for other code."""
    function, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    marker = "modelhost/"
    if marker not in path:
        return function, ""
    return function, path.split(marker, 1)[1]


def layer_of(stack: str) -> str:
    frames = [_frame_parts(f) for f in stack.split(";")]
    ours = [(function, path) for function, path in frames if path]
    if not ours:
        # HTTP/2's libraries run from callbacks and lazily consumed generators, their callers gone from the stack.
        if any(f"{library}/" in frame for frame in stack.split(";") for library in _WIRE_LIBRARIES):
            return "socket & parsing"
        return "other"
    function, path = ours[-1]
    if path.startswith(_CODECS):
        name = function.lower()
        if any(word in name for word in _ENCODE_WORDS):
            return "encode & write"
        if any(word in name for word in _DECODE_WORDS):
            return "decode"
        return "routing & handlers"
    for prefix, layer in _MODULES:
        if path.startswith(prefix):
            return layer
    return "other"


def layer_shares(raw: Path) -> tuple[dict[str, float], int]:
    """Each layer's share of the busy samples in a py-spy raw profile, and the number of samples."""
    counts: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            counts[layer_of(stack)] += int(count)
    total = sum(counts.values())
    return {layer: counts[layer] / total for layer in LAYERS if total}, total

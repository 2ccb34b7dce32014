"""The options layer: what the server is told (its command line, or code that builds `ServerOptions`), checked
once, and the small settings each part of the server is built from. It imports nothing above the host layer, so
every part may take its settings from here."""

from __future__ import annotations

from modelhost.options.backend_config import HONOURED_BACKEND_CONFIG
from modelhost.options.limits import (
    DEFAULT_GRPC_MAX_DECOMPRESSED_SIZE,
    DEFAULT_HTTP_MAX_HEADER_SIZE,
    DEFAULT_HTTP_MAX_INPUT_SIZE,
    GrpcLimits,
    HttpLimits,
)
from modelhost.options.log import LOG_FORMATS, LogOptions
from modelhost.options.server import DEFAULT_FRONTEND_BUFFER_BYTE_SIZE, MAX_FRONTEND_PROCESSES, ServerOptions
from modelhost.options.values import (
    auto_frontend_processes,
    bool_or_none,
    compile_forward_pattern,
    parse_address,
    pattern_problem,
)

__all__ = [
    "DEFAULT_FRONTEND_BUFFER_BYTE_SIZE",
    "DEFAULT_GRPC_MAX_DECOMPRESSED_SIZE",
    "DEFAULT_HTTP_MAX_HEADER_SIZE",
    "DEFAULT_HTTP_MAX_INPUT_SIZE",
    "HONOURED_BACKEND_CONFIG",
    "LOG_FORMATS",
    "MAX_FRONTEND_PROCESSES",
    "GrpcLimits",
    "HttpLimits",
    "LogOptions",
    "ServerOptions",
    "auto_frontend_processes",
    "bool_or_none",
    "compile_forward_pattern",
    "parse_address",
    "pattern_problem",
]

"""--http-header-forward-pattern and --grpc-header-forward-pattern: the HTTP headers (gRPC metadata) of an
inference request whose names match become string parameters of the request, which a model reads as any other
parameter (a python model through `request.parameters()`).

As Triton: the pattern is searched for anywhere in the name (RE2's PartialMatch), case-insensitively unless it
starts with `(?-i)`; a matching name that is a parameter Triton reserves, or that starts with `triton_`, fails
the request with Triton's message. Only /infer (HTTP) and ModelInfer / ModelStreamInfer (gRPC) forward: Triton's
generate and SageMaker endpoints do not. gRPC `-bin` metadata carries bytes, not a string: it is not forwarded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from modelhost.errors import InvalidArgument
from modelhost.types import Parameters

# Triton's kReservedParameterKeys: parameters its protocols give a meaning of their own.
RESERVED = frozenset(
    {"sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "headers", "binary_data_output"}
)


def forwarded_parameters(pattern: re.Pattern[str], headers: Iterable[tuple[str, str | bytes]]) -> Parameters:
    """The parameters forwarded from `headers` (name, value); InvalidArgument for a reserved name."""
    parameters: Parameters = {}
    for name, value in headers:
        if not isinstance(value, str) or pattern.search(name) is None:
            continue
        if name in RESERVED or name.startswith("triton_"):
            raise InvalidArgument(f"Header '{name}' is reserved for Triton usage and cannot be forwarded.")
        parameters[name] = value
    return parameters

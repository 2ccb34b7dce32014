"""Restricted APIs: `--http-restricted-api=<apis>:<key>=<value>` and `--grpc-restricted-protocol=<protocols>:<key>=
<value>`, as tritonserver has them (command_line_parser.cc, restricted_features.h).

An endpoint of a restricted category is served only to a request that carries the header `<key>` (HTTP; the
SageMaker port too) or the metadata `triton-grpc-protocol-<key>` (gRPC) with exactly `<value>`; any other gets 403
`{"error": "This API is restricted, expecting header '<key>'"}` or gRPC UNAVAILABLE "This protocol is restricted,
expecting header 'triton-grpc-protocol-<key>'", before anything else about the request is looked at. Which
endpoint is of which category is in each frontend's routes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

# Triton's categories, in its order.
CATEGORIES = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)
# modelhost's own HTTP categories: the web console (`/` and `/console/...`).
HTTP_ONLY_CATEGORIES = ("console",)
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"

# category -> (header, value); the header as given (gRPC's with its prefix), compared without regard to case.
Restrictions = dict[str, tuple[str, str]]


def add_restriction(
    restrictions: Restrictions, raw: str, option: str, *, key_prefix: str = "", feature: str = "api"
) -> None:
    """Add one flag's value; ValueError in tritonserver's words when it is malformed, names an unknown category,
    or names a category an earlier value restricted already."""
    categories, colon, setting = raw.partition(":")
    key, equals, value = setting.partition("=")
    if not (colon and equals and categories and key and value):
        raise ValueError(f"--{option} option format is '<config name>:<setting>=<value>'. Got {raw}")
    known = CATEGORIES + HTTP_ONLY_CATEGORIES if feature == "api" else CATEGORIES
    for category in categories.split(","):
        if category not in known:
            raise ValueError(f"unknown restricted {feature} '{category}'")
        if category in restrictions:
            raise ValueError(
                f"restricted {feature} '{category}' can not be specified in multiple config groups"
            )
        restrictions[category] = (key_prefix + key, value)


def refusal(
    restrictions: Mapping[str, tuple[str, str]], category: str, header: Callable[[str], object]
) -> str:
    """Why a request of `category` is refused ("" when it may go on); `header(name)` is the request's value of a
    header (lower-case name), or None."""
    restriction = restrictions.get(category)
    if restriction is None:
        return ""
    key, value = restriction
    if header(key.lower()) == value:
        return ""
    return f"expecting header '{key}'"


__all__ = [
    "CATEGORIES",
    "GRPC_HEADER_PREFIX",
    "HTTP_ONLY_CATEGORIES",
    "Restrictions",
    "add_restriction",
    "refusal",
]

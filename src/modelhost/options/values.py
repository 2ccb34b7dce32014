"""Values as tritonserver's flags write them: booleans, addresses, header patterns; and the `auto` of
--frontend-processes."""

from __future__ import annotations

import re


def auto_frontend_processes(cores: int) -> int:
    """--frontend-processes=auto: the number of frontend processes for a machine of `cores` usable cores.

    A frontend process costs each request some server CPU (the hop to the engine) and buys the work of a core that
    would otherwise idle. With two cores or fewer there is no such core once the engine, the model runtimes'
    threads and python-backend stubs run (measured in benchmarks/README.md, "Frontend processes": python-backend
    models lose up to 40%): none. Beyond that, one frontend per core beyond the engine's, at most 8.
    """
    if cores <= 2:
        return 0
    return min(8, cores - 1)


def parse_address(text: str) -> str:
    """A bindable host from a tritonserver address: `ipv6:[::1]` and `[::1]` both give `::1`."""
    host = text.strip()
    if host.startswith("ipv6:"):
        host = host[len("ipv6:") :]
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host


_TRUE = frozenset({"true", "on", "1"})
_FALSE = frozenset({"false", "off", "0"})


def bool_or_none(raw: str) -> bool | None:
    """A boolean as tritonserver's flags take it (true/false, on/off, 1/0, any case); None for anything else."""
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    return None


# --http-header-forward-pattern, --grpc-header-forward-pattern: read here (the options check them), used by the
# frontends (frontends/header_forwarding.py).
_CASE_SENSITIVE = "(?-i)"


def compile_forward_pattern(pattern: str) -> re.Pattern[str]:
    """The compiled pattern; raises re.error for one that is not a regular expression. Triton prefixes `(?i)`;
    Python's `re` has no global `(?-i)` after it, so the prefix is read here instead."""
    if pattern.startswith(_CASE_SENSITIVE):
        return re.compile(pattern[len(_CASE_SENSITIVE) :])
    return re.compile(pattern, re.IGNORECASE)


def pattern_problem(flag: str, pattern: str) -> str:
    """What is wrong with a flag's pattern ("" when nothing is)."""
    if not pattern:
        return ""
    try:
        compile_forward_pattern(pattern)
    except re.error as e:
        return f"{flag} is not a valid regular expression: {e} ({pattern!r})"
    return ""

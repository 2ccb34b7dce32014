"""The values of `modelhost serve`'s flags, each from its raw text in tritonserver's forms; a value that is not
one is a CliError naming the flag."""

from __future__ import annotations

from modelhost.cli.errors import CliError
from modelhost.cli.flags import Flag, int_or_none
from modelhost.host.devices import cpu_count
from modelhost.options import auto_frontend_processes, bool_or_none, parse_address

# --backend-config values: (backend ("" = global), setting, value)
BackendSetting = tuple[str, str, str]

# The trace flags, each as the --trace-config prefix its value goes after.
TRACE_FLAGS = {
    "trace-config": "",
    "trace-file": "triton,file=",
    "trace-level": "level=",
    "trace-rate": "rate=",
    "trace-count": "count=",
    "trace-log-frequency": "triton,log-frequency=",
}


def convert(flag: Flag, raw: str) -> bool | int | float | str:
    if flag.kind == "bool":
        value = bool_or_none(raw)
        if value is None:
            raise CliError(f"{flag.option}: invalid boolean value {raw!r} (use true/false, on/off or 1/0)")
        return value
    if flag.kind == "int":
        number = int_or_none(raw)
        if number is None:
            raise CliError(f"{flag.option}: invalid integer value {raw!r}")
        return number
    if flag.kind == "float":
        try:
            return float(raw)
        except ValueError:
            raise CliError(f"{flag.option}: invalid number {raw!r}") from None
    if flag.kind == "address":
        return parse_address(raw)
    return raw


def repository(flag: Flag, raw: str) -> str:
    if not raw:
        raise CliError(f"{flag.option} must not be empty")
    return raw


def backend_setting(raw: str) -> BackendSetting:
    """`[<backend>,]<setting>=<value>`; no backend means a global setting (backend "")."""
    key, equals, value = raw.partition("=")
    backend, comma, setting = key.partition(",")
    if not comma:
        backend, setting = "", key
    if not equals or not setting:
        raise CliError(f"--backend-config format is '[<backend>,]<setting>=<value>', got {raw!r}")
    if comma and not backend:
        raise CliError(f"--backend-config {raw!r} names no backend before the comma")
    return backend, setting, value


def _gpu_setting(flag: Flag, raw: str) -> tuple[int, str]:
    """tritonserver's `<gpu>:<value>`, split at the first colon; the GPU is an integer (checked for >= 0 by
    ServerOptions, in tritonserver's words)."""
    gpu_text, colon, value = raw.partition(":")
    gpu = int_or_none(gpu_text)
    if not colon or gpu is None:
        raise CliError(f"{flag.option} format is '{flag.metavar}', got {raw!r}")
    return gpu, value


def cuda_pool(flag: Flag, raw: str) -> tuple[int, int]:
    gpu, value = _gpu_setting(flag, raw)
    size = int_or_none(value)
    if size is None:
        raise CliError(f"{flag.option}: invalid byte size {value!r} in {raw!r}")
    return gpu, size


def rate_limit_resource(raw: str) -> tuple[str, int, int | None]:
    # Imported here: the parser needs nothing else of the scheduling package.
    from modelhost.engine.scheduling.rate_limiter import parse_resource_flag

    try:
        return parse_resource_flag(raw)
    except ValueError as error:
        raise CliError(str(error)) from None


def load_limit(flag: Flag, raw: str) -> tuple[int, float]:
    gpu, value = _gpu_setting(flag, raw)
    try:
        return gpu, float(value)
    except ValueError:
        raise CliError(f"{flag.option}: invalid fraction {value!r} in {raw!r}") from None


def frontend_processes(raw: str) -> int:
    text = raw.strip().lower()
    if text == "auto":
        return auto_frontend_processes(cpu_count())
    number = int_or_none(text)
    if number is None:
        raise CliError(f"--frontend-processes must be a number or auto, got {raw!r}")
    return number


def memory_budget(raw: str) -> int:
    from modelhost.engine.registry.model_memory import parse_size

    try:
        return parse_size(raw)
    except ValueError as e:
        raise CliError(f"--model-memory-budget: {e}") from None


def port_range(flag: Flag, raw: str) -> tuple[int, int]:
    low, dash, high = raw.strip().partition("-")
    if not dash or int_or_none(low) is None or int_or_none(high) is None:
        raise CliError(f"{flag.option} format is '<low>-<high>', got {raw!r}")
    return int(low), int(high)
